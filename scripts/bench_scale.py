"""Past one rack: verltop on 16 to 128 nodes, simulated, and on a real multi-raylet cluster as the truth.

    python -m scripts.bench_scale            # the simulation (about 4 minutes on 2 cores); docs/scale.md + svg
    python -m scripts.bench_scale --real 4   # also a real 4-raylet Ray cluster on this machine (ray.cluster_utils)

The simulation is the synthetic Ray 2.60 dashboard of tests/fakeray (a real HTTP server in its own process;
8 GPU ranks per node, rollout servers, agent-loop workers), where each node's agent answers a
``/worker/traceback`` after a set latency (its round trip and py-spy run) and dead nodes never answer; the probe
path replaces ``sources.probe.ProbePool`` by one whose actors start and answer after the latencies measured on
the real cluster. Every command is the real ``verltop`` in a fresh process. The real run starts raylets on
this machine (all share its 2 cores, so it measures overheads, not a rack's parallelism) and dumps them
through the dashboard and through the probes; its figures set the simulation's latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts.bench import PY, ROOT, child
from scripts.net import free_port

DOCS = ROOT / "docs"
# what a real node costs (measured with --real on this machine: see docs/scale.md); the simulation's defaults
TRACEBACK_S = 0.08  # the dashboard's relay to a node's agent and its py-spy run, one process
PROBE_INIT_S = 0.6  # ray.init from verltop's process
PROBE_START_S = 1.0  # a probe actor's worker process starting on its node (all nodes at once)
PROBE_CALL_S = 0.03  # one py-spy run through a started probe
DUMP_TIMEOUT = 2.0
HUNG = ("--hang-at", "0")  # a job is dumped when it hangs: every rank in the collective but the straggler  # --dump-timeout in the dead-node runs: a relayed request gives up after it + 5 s


class Fake:
    """The synthetic dashboard in a child process."""

    def __init__(self, nodes: int, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([PY, "-m", "scripts.fake_dashboard", "--nodes", str(nodes), "--gpus", "8",
                                      "--port", str(self.port), *extra], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if "dashboard at" not in first:
            raise RuntimeError(f"fake dashboard did not start: {first}")

    def __enter__(self) -> Fake:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


CPU: list[float] = []  # the CPU seconds of the last run (the command's process and its children)


def run(cmd: list[str], timeout: float = 300, env: dict[str, str] | None = None) -> tuple[float, dict, str]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else {}
    if p.returncode not in (0, 1) or not doc:
        raise RuntimeError(f"{' '.join(cmd[2:8])}… exited {p.returncode}: {p.stderr[-800:]}")
    return dt, doc, p.stderr


def dump_cmd(url: str, via: str, *extra: str) -> list[str]:
    return [PY, "-m", "verltop", "--address", url, "dump", "--json", "--samples", "1", "--no-local", "--via", via,
            *extra]


def probe_cmd(url: str, dead: int, *extra: str) -> list[str]:
    return [PY, "-m", "scripts.bench_scale", "--child-probe", url, str(dead), *dump_cmd(url, "probe", *extra)[3:]]


def ranks_of(doc: dict) -> tuple[int, int]:
    """(ranks with a stack, ranks without) of a dump's JSON."""
    rs = doc.get("ranks", [])
    return sum(1 for r in rs if r["error"] is None), sum(1 for r in rs if r["error"] is not None)


def sim_dumps(sizes: list[int], rounds: int) -> list[dict]:
    out = []
    for nodes in sizes:
        with Fake(nodes, *HUNG, "--profiling", "--traceback-delay", str(TRACEBACK_S)) as f:
            dash, dash_cpu = [], []
            for _ in range(rounds):
                dash.append(run(dump_cmd(f.url, "dashboard")))
                dash_cpu.append(CPU[-1])
        with Fake(nodes, *HUNG, "--profiling") as f:  # answers the simulated probes' py-spy at once
            probe, probe_cpu = [], []
            for _ in range(rounds):
                probe.append(run(probe_cmd(f.url, 0)))
                probe_cpu.append(CPU[-1])
        ok, bad = ranks_of(dash[0][1])
        out.append({"nodes": nodes, "ranks": ok + bad, "stacks": ok, "dashboard_s": statistics.median(d[0] for d in dash),
                    "probe_s": statistics.median(d[0] for d in probe), "probe_stacks": ranks_of(probe[0][1])[0],
                    "dashboard_cpu": statistics.median(dash_cpu), "probe_cpu": statistics.median(probe_cpu)})
        print(f"  {nodes} nodes: {out[-1]}", file=sys.stderr, flush=True)
    return out


def sim_dead(nodes: int, dead: int) -> dict:
    """Two nodes that never answer: what it costs, and whether the report names them."""
    res = {}
    with Fake(nodes, *HUNG, "--profiling", "--traceback-delay", str(TRACEBACK_S), "--dead-nodes", str(dead)) as f:
        dt, doc, _ = run(dump_cmd(f.url, "dashboard", "--dump-timeout", str(DUMP_TIMEOUT)))
        res["dashboard"] = (dt, ranks_of(doc), [n for n in doc.get("notes", []) if n.startswith("node ")])
    with Fake(nodes, *HUNG, "--profiling") as f:
        dt, doc, _ = run(probe_cmd(f.url, dead, "--dump-timeout", str(DUMP_TIMEOUT)))
        res["probe"] = (dt, ranks_of(doc), [n for n in doc.get("notes", []) if n.startswith("node ")])
    print(f"  dead nodes: {res}", file=sys.stderr, flush=True)
    return res


def sim_tui(sizes: list[int], secs: float) -> list[dict]:
    out = []
    for nodes in sizes:
        agents = 4 * nodes  # verl#6583: 512 agent-loop workers on 32 nodes; here 512 on 128
        with Fake(nodes, "--agent-loop-workers", str(agents)) as f:
            ff = [child("first_frame", f.url, repr(time.time()))["first_frame_s"] for _ in range(3)]
            idle = child("idle", f.url, str(secs))
            snap = run([PY, "-m", "verltop", "--address", f.url, "snapshot", "--json"])[1]
        out.append({"nodes": nodes, "actors": len(snap["actors"]), "first_frame_s": statistics.median(ff),
                    "cycle_ms": idle["cpu_per_cycle_ms"], "cpu_pct": idle["steady_cpu_pct"], "rss_mb": idle["rss_mb"]})
        print(f"  TUI {nodes} nodes: {out[-1]}", file=sys.stderr, flush=True)
    return out


def sim_caps() -> list[str]:
    """More than 10,000 actors: what `snapshot` says about it (the JSON has no room for it; stderr does)."""
    with Fake(128, "--extra-actors", "10500") as f:
        _, doc, err = run([PY, "-m", "verltop", "--address", f.url, "snapshot", "--json"])
    return [f"{len(doc['actors']):,} actors in the JSON; stderr: `{err.strip()}`"]


# ------------------------------------------------------------------ the probe path, simulated


def child_probe(url: str, dead: int, argv: list[str]) -> int:
    """`verltop dump --via probe` with ``ProbePool`` replaced by probes that start and answer after the
    latencies measured on a real cluster; the last ``dead`` nodes' probes never start."""
    import verltop.sources.probe as P
    from verltop.cli import main
    from verltop.model import Problem, ProcessDump, ThreadStack
    from verltop.model.stacks import Frame
    from verltop.sources import dashboard as D
    from verltop.sources.config import resolve
    from verltop.sources.http import DashboardClient
    from verltop.sources.pyspy import parse_text

    async def node_ids() -> list[str]:
        c = DashboardClient(resolve(url))
        r = await D.fetch_nodes(c)
        return [n.node_id for n in r.value or []]

    dead_ids = set(asyncio.run(node_ids())[-dead:]) if dead else set()
    client = DashboardClient(resolve(url), max_inflight=64)
    canned: list[Any] = []
    stack = (ThreadStack(1, "MainThread", False, False, (Frame("wait", "threading.py", 320),)),)

    class SimPool:
        def __init__(self, opts: Any, address: str = "auto", schedule_timeout_s: float = 15.0) -> None:
            self.opts, self.timeout = opts, schedule_timeout_s
            self.started: dict[str, asyncio.Task] = {}
            self.init: asyncio.Task | None = None
            self.failed: set[str] = set()

        async def _ready(self, node: str) -> bool:
            if self.init is None:
                self.init = asyncio.ensure_future(asyncio.sleep(PROBE_INIT_S))
            await self.init
            if node in self.failed:
                return False
            if node not in self.started:
                self.started[node] = asyncio.ensure_future(asyncio.sleep(
                    self.opts.per_process_timeout + self.timeout if node in dead_ids else PROBE_START_S))
            await self.started[node]
            if node in dead_ids:
                self.failed.add(node)
                return False
            return True

        async def dump(self, node_id: str, pid: int) -> ProcessDump:
            if not await self._ready(node_id):
                return ProcessDump(pid, error=Problem("probe", "probe actor could not be scheduled on that node "
                                                      "(no answer)"))
            await asyncio.sleep(PROBE_CALL_S)
            if not canned:  # a stack the synthetic cluster holds (one for all: the fake server's CPU is not ours)
                canned.append(asyncio.ensure_future(D.fetch_traceback(client, pid, node_id)))
            r = await canned[0]
            return ProcessDump(pid, threads=parse_text(r.value or "")[0] if r.ok else stack, taken_at=time.time())

        async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, Problem | None]:
            return None, Problem("probe", "no NCCL RAS in the simulation")

        async def descendants(self, node_id: str, pids: list[int], limit: int = 64) -> Any:
            if not await self._ready(node_id):
                return Problem("probe", "probe actor could not be scheduled on that node (no answer)")
            await asyncio.sleep(PROBE_CALL_S)
            return {}

        def warm(self, node_ids: list[str]) -> None:
            self.warming = [asyncio.ensure_future(self._ready(n)) for n in node_ids]

        async def close(self) -> None:
            pass

    P.ProbePool = SimPool  # type: ignore[misc]
    return main(argv)


# ------------------------------------------------------------------ a real multi-raylet cluster


REAL_JOB = r"""
import json, os, sys, time
import ray
from ray.cluster_utils import Cluster
n = int(sys.argv[1])
os.environ["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"
c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"n0": 8}, "include_dashboard": True,
            "dashboard_host": "127.0.0.1", "dashboard_port": None})
for i in range(1, n):
    c.add_node(num_cpus=2, resources={f"n{i}": 8})
c.wait_for_nodes()
ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)

class WorkerDict:  # named as verl's colocated workers, with its rank env: a verl worker group to verltop
    def pid(self):
        return os.getpid()
    def hang(self):
        time.sleep(3600)

W = ray.remote(num_cpus=0)(WorkerDict)
env = lambda i: {"env_vars": {"WG_PREFIX": "bench", "RANK": str(i), "WORLD_SIZE": str(2 * n)}}
ranks = [W.options(resources={f"n{i % n}": 1}, name=f"benchWorkerDict_0:{i}", runtime_env=env(i)).remote()
         for i in range(2 * n)]
ray.get([r.pid.remote() for r in ranks])
for r in ranks:
    r.hang.remote()
print(json.dumps({"address": "http://" + c.webui_url, "gcs": c.address}), flush=True)
sys.stdin.readline()
ray.shutdown()
c.shutdown()
"""


def real(nodes: int, rounds: int) -> dict:
    """A real cluster of ``nodes`` raylets on this machine, 2 idle ranks each: `verltop dump` through the
    dashboard and through the probes, and `verltop doctor` (all processes share this machine's cores)."""
    # token auth on, as Ray 2.60 starts it by default, with a token of its own that verltop is given
    token = f"bench-scale-{os.getpid()}-{time.time_ns()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    p = subprocess.Popen([PY, "-c", REAL_JOB, str(nodes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    try:
        assert p.stdout is not None
        info = json.loads(p.stdout.readline())
        url = info["address"]
        renv = {"RAY_ADDRESS": info["gcs"], "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        res: dict[str, Any] = {"nodes": nodes}
        for via in ("dashboard", "probe"):
            times = []
            for _ in range(rounds):
                dt, _, _ = run([PY, "-m", "verltop", "--address", url, "dump", "--json", "--samples", "1",
                                  "--no-local", "--via", via], env=renv)
                times.append(dt)
            res[via] = statistics.median(times)
        try:
            docs = [run([PY, "-m", "verltop", "--address", url, "doctor", "--json"], env=renv) for _ in range(rounds)]
            res["doctor"] = statistics.median(d[0] for d in docs)
            res["doctor_own"] = statistics.median(d[1]["elapsed_s"] for d in docs)
        except RuntimeError as e:  # the dumps' figures stand on their own
            res["doctor_error"] = str(e)[-300:]
        print(f"  real {nodes} raylets: {res}", file=sys.stderr, flush=True)
        return res
    finally:
        try:
            assert p.stdin is not None
            p.stdin.write("\n")
            p.stdin.flush()
            p.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(p.pid, 9)


# ------------------------------------------------------------------ the report


def svg(dumps: list[dict], tui: list[dict]) -> str:
    """Two small line charts, by hand (no plotting library in the runtime): dump time against nodes (both
    paths) and refresh CPU per cycle against nodes."""
    w, h, pad = 360, 220, 44

    def chart(x0: int, title: str, xs: list[int], series: list[tuple[str, str, list[float]]], unit: str,
              limit: float | None) -> str:
        top = max([v for _, _, vs in series for v in vs] + ([limit] if limit else [])) * 1.15
        def px(x: float) -> float:
            return x0 + pad + (xs.index(int(x)) / max(1, len(xs) - 1)) * (w - 2 * pad)
        def py(y: float) -> float:
            return h - pad - y / top * (h - 2 * pad)
        out = [f'<text x="{x0 + w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
               f'<line x1="{x0 + pad}" y1="{h - pad}" x2="{x0 + w - pad}" y2="{h - pad}" stroke="#444"/>',
               f'<line x1="{x0 + pad}" y1="{pad - 10}" x2="{x0 + pad}" y2="{h - pad}" stroke="#444"/>']
        for x in xs:
            out.append(f'<text x="{px(x):.0f}" y="{h - pad + 16}" text-anchor="middle" font-size="11">{x}</text>')
        out.append(f'<text x="{x0 + w / 2}" y="{h - 8}" text-anchor="middle" font-size="11">nodes (8 GPU ranks '
                   'each)</text>')
        for frac in (0.0, 0.5, 1.0):
            y = top / 1.15 * frac
            out.append(f'<text x="{x0 + pad - 4}" y="{py(y) + 4:.0f}" text-anchor="end" font-size="10">'
                       f'{y:.2g}{unit}</text>')
        if limit:
            out.append(f'<line x1="{x0 + pad}" y1="{py(limit):.1f}" x2="{x0 + w - pad}" y2="{py(limit):.1f}" '
                       f'stroke="#c00" stroke-dasharray="4 3"/><text x="{x0 + w - pad}" y="{py(limit) - 4:.0f}" '
                       f'text-anchor="end" font-size="10" fill="#c00">target {limit:g}{unit}</text>')
        for i, (name, color, vs) in enumerate(series):
            pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, vs, strict=True))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
            out += [f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{color}"/>' for x, v in zip(xs, vs, strict=True)]
            out.append(f'<text x="{x0 + pad + 6}" y="{pad + 4 + 14 * i}" font-size="11" fill="{color}">{name}</text>')
        return "\n".join(out)

    xs = [d["nodes"] for d in dumps]
    left = chart(0, "verltop dump --samples 1: wall time", xs,
                 [("through the dashboard", "#1f77b4", [d["dashboard_s"] for d in dumps]),
                  ("through probes", "#ff7f0e", [d["probe_s"] for d in dumps])], " s", 2.0)
    right = chart(w, "TUI refresh: CPU per 2 s poll cycle", [t["nodes"] for t in tui],
                  [("1 + 4 agent workers per GPU node", "#2ca02c", [t["cycle_ms"] for t in tui])], " ms", 100.0)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h}" font-family="sans-serif">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n{left}\n{right}\n</svg>\n')


def report(dumps: list[dict], dead: dict, tui: list[dict], caps: list[str], reals: list[dict]) -> str:
    lines = ["# Past one rack", "",
             f"Made by `python -m scripts.bench_scale` on {time.strftime('%Y-%m-%d %H:%M')} ({os.cpu_count()} cores, "
             f"load average {os.getloadavg()[0]:.1f}). Simulated nodes: the synthetic dashboard of `tests/fakeray` "
             f"with 8 GPU ranks per node, each node's agent answering a py-spy request after {TRACEBACK_S * 1000:.0f} "
             f"ms; probes that start in {PROBE_START_S:g} s (after {PROBE_INIT_S:g} s of `ray.init`) and answer "
             f"in {PROBE_CALL_S * 1000:.0f} ms — what the real raylets below cost. Every command is the real "
             "`verltop` in a fresh process (wall time; the simulated latencies are waits, not CPU).", "",
             "The plot: [scale.svg](scale.svg) (dump time and refresh CPU against nodes).", "",
             "On a loaded machine (other work on its 2 cores) the wall times and the TUI's CPU per cycle measure "
             "that work too; the CPU columns of the dumps are the command's own.", "",
             "| nodes | ranks (with a stack) | `dump --samples 1` through the dashboard: wall (CPU) | through probes: "
             "wall (CPU) | target |", "| --- | --- | --- | --- | --- |"]
    for d in dumps:
        lines.append(f"| {d['nodes']} | {d['ranks']:,} ({d['stacks']:,}) | {d['dashboard_s']:.2f} s "
                     f"({d['dashboard_cpu']:.2f} s) | {d['probe_s']:.2f} s ({d['probe_cpu']:.2f} s) | ≤ 2 s at 128 nodes |")
    lines += ["", "Two dead nodes of 128 (their agents or probes never answer), `--dump-timeout "
              f"{DUMP_TIMEOUT:g}` (a relayed request gives up after it + 5 s; a probe after it + 15 s to be scheduled):", ""]
    for via, (dt, (ok, bad), notes) in dead.items():
        lines.append(f"- through {'the dashboard' if via == 'dashboard' else 'probes'}: {dt:.1f} s, {ok:,} ranks "
                     f"with a stack, {bad} without; the report says: " + "; ".join(f"“{n}”" for n in notes))
    lines += ["", "| nodes | actors | TUI first frame | refresh CPU per 2 s cycle | steady CPU | peak RSS | target |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for t in tui:
        lines.append(f"| {t['nodes']} | {t['actors']:,} | {t['first_frame_s']:.2f} s | {t['cycle_ms']:.0f} ms | "
                     f"{t['cpu_pct']:.1f} % | {t['rss_mb']:.0f} MB | first frame ≤ 1 s, ≤ 100 ms/cycle at 128 |")
    lines += ["", "Ray's caps:", "", *(f"- {c}" for c in caps),
              "- task events the GCS dropped (it keeps the last 100,000 task attempts): Ray counts them into the "
              "task list's `total`; verltop says “Ray dropped the events of N tasks …: a task's state may be stale "
              "or missing” and keeps ending the tasks that leave the RUNNING list (a list cut at 10,000 rows ends "
              "none: a task missing from it may still run). Tested in `tests/sources/test_scale_limits.py`."]
    if reals:
        lines += ["", "A real cluster on this machine (`ray.cluster_utils.Cluster`, 2 idle ranks per raylet, every "
                  "raylet and worker on the same 2 cores), medians:", "",
                  "| raylets | `dump` of every rank through the dashboard | through probes | `doctor` (its own time) |",
                  "| --- | --- | --- | --- |"]
        for r in reals:
            doc = (f"{r['doctor']:.2f} s ({r['doctor_own']:.2f} s)" if "doctor" in r else
                   f"failed: {r.get('doctor_error', '?')}")
            lines.append(f"| {r['nodes']} | {r['dashboard']:.2f} s | {r['probe']:.2f} s | {doc} |")
        lines += ["", "On one machine every raylet's probe worker starts on the same 2 cores, so the probe path and "
                  "`doctor` grow with the raylets here (a worker process each, ~0.4 s of CPU); on a rack each node "
                  "starts its own at once. The simulation's probe latencies are those of the 4-raylet run. The probes "
                  "join with the cluster's own auth mode (its dashboard's `/api/authentication_mode`): a stale "
                  "`~/.ray/auth_token` no longer turns token auth on against a cluster without it "
                  "(`tests/integration/test_doctor_plain.py`)."]
    lines += ["", "The TUI at 10,000 actors (128 nodes and 8,900 more actors) and `doctor` on one and three raylets: "
              "`python -m scripts.bench --only ui` and `--only doctor`, in [performance.md](performance.md)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child-probe":
        return child_probe(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", type=int, nargs="*", default=[], metavar="N", help="real clusters of N raylets")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="16,32,64,128")
    ap.add_argument("--seconds", type=float, default=12.0, help="refresh measured over this long per size")
    ap.add_argument("--real-json", metavar="FILE", help="write the real clusters' figures there and stop (run it "
                    "alone, under the machine's Ray lock); or, without --real, read them from there for the report")
    ap.add_argument("--save", metavar="FILE", help="also keep the simulation's figures there")
    ap.add_argument("--load", metavar="FILE", help="make the report from figures saved by --save")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    reals = [real(n, a.rounds) for n in a.real]
    if a.real_json and reals:
        Path(a.real_json).write_text(json.dumps(reals))
        return 0

    if a.load:  # the simulation's figures as an earlier run saved them: only the report is made again
        dumps, dead, tui, caps = json.loads(Path(a.load).read_text())
    else:
        dumps = sim_dumps(sizes, a.rounds)
        dead = sim_dead(max(sizes), 2)
        tui = sim_tui(sizes, a.seconds)
        caps = sim_caps()
    if a.save:
        Path(a.save).write_text(json.dumps([dumps, dead, tui, caps]))
    if a.real_json and not reals and Path(a.real_json).exists():  # measured apart, under the Ray lock
        reals = json.loads(Path(a.real_json).read_text())
    (DOCS / "scale.svg").write_text(svg(dumps, tui))
    text = report(dumps, dead, tui, caps, reals)
    (DOCS / "scale.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
