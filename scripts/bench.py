"""verltop's speed, measured in one run on this machine, beside the tools people use today.

    python -m scripts.bench            # everything (about 10 minutes on 2 cores), from the repository root
    python -m scripts.bench --quick    # shorter runs, no live Ray cluster
    python -m scripts.bench --only ui --long   # the TUI's figures, with 10,000 actors over 4 minutes

Each figure is a real measurement: real processes, a real HTTP server (the synthetic Ray 2.60 dashboard of
tests/fakeray, in its own process), real py-spy, and for the peer columns a real Ray cluster running the
demo's verl job. Prints one table (Markdown) with targets and a PASS/MISS column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts.net import free_port

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = Path(PY).parent


class FakeServer:
    """The synthetic dashboard in a child process, so its CPU is not counted as verltop's."""

    def __init__(self, nodes: int, gpus: int, extra: int = 0, hang_at: float | None = None, speed: float = 1.0,
                 rm_nodes: int = 0, max_finished: int = 2000) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [PY, "-m", "scripts.fake_dashboard", "--nodes", str(nodes), "--gpus", str(gpus),
                "--port", str(self.port), "--extra-actors", str(extra), "--speed", str(speed),
                "--rm-nodes", str(rm_nodes), "--max-finished", str(max_finished)]
        if hang_at is not None:
            args += ["--hang-at", str(hang_at)]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if "dashboard at" not in first:
            raise RuntimeError(f"fake dashboard did not start: {first}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ------------------------------------------------------------------ child modes (run in a fresh process)


def child_first_frame(url: str, t_start: float) -> None:
    """Process start (the parent's clock just before it spawned us) → first table rendered with rows. The
    first reads go out before the app is imported, as ``verltop`` sends them (``cli._tui``)."""
    from verltop.engine.prefetch import prefetch_tui
    from verltop.sources.config import resolve

    endpoint = resolve(url)
    pre = prefetch_tui(endpoint, 10.0)

    from verltop.ui.app import VerltopApp
    from verltop.ui.widgets.actor_table import ActorTable

    app = VerltopApp.live(endpoint, use_local=False, prefetch=pre)

    def check() -> None:
        t = app.screen.query(ActorTable)
        if t and t.first().row_count > 1:
            print(json.dumps({"first_frame_s": time.time() - t_start}), flush=True)
            app.exit()

    app.call_later(lambda: app.set_interval(0.005, check))
    app.run(headless=True, size=(160, 48))


def child_refresh(url: str, seconds: float) -> None:
    """Run the TUI headless for ``seconds``; report CPU per poll cycle, steady CPU %, peak RSS, key latency."""
    from verltop.sources.config import resolve
    from verltop.ui.app import VerltopApp
    from verltop.ui.widgets.actor_table import ActorTable

    async def run() -> dict:
        app = VerltopApp.live(resolve(url), use_local=False)
        async with app.run_test(size=(160, 48)) as pilot:
            for _ in range(600):
                await pilot.pause(0.05)
                if app.screen.query_one(ActorTable).row_count > 1:
                    break
            await pilot.pause(4.0)  # past start-up (imports, first detail reads)
            cpu0 = time.process_time()
            w0 = time.monotonic()
            polls0 = app.engine.src.tasks.tries
            lat = []
            table = app.screen.query_one(ActorTable)
            handled: list[float] = []
            orig = table.move_cursor

            def timed_move(row: int) -> None:
                orig(row)
                handled.append(time.perf_counter())

            table.move_cursor = timed_move  # type: ignore[method-assign]
            keys = ["j", "k"]
            while time.monotonic() - w0 < seconds:
                await asyncio.sleep(0.37)  # not in step with the 2 s polls: keys land during refreshes too
                # key (j/k: move the cursor) → its handler has run and the row is redrawn
                t0 = time.perf_counter()
                n = len(handled)
                await pilot.press(keys[len(lat) % 2])
                if len(handled) > n:
                    lat.append((handled[-1] - t0) * 1000)
            cpu = time.process_time() - cpu0
            wall = time.monotonic() - w0
            cycles = max(1, app.engine.src.tasks.tries - polls0)
            return {"cpu_per_cycle_ms": cpu / cycles * 1000, "steady_cpu_pct": cpu / wall * 100,
                    "cycles": cycles, "keys": len(lat), "key_ms_median": statistics.median(lat), "key_ms_p95": _p95(lat),
                    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    "build_ms": app.engine.last_build_ms, "requests": app.engine.client.requests}

    # the key presses themselves cost CPU; measure steady CPU in a second run without keys
    print(json.dumps(asyncio.run(run())), flush=True)


def child_idle_cpu(url: str, seconds: float) -> None:
    from verltop.sources.config import resolve
    from verltop.ui.app import VerltopApp

    async def run() -> dict:
        app = VerltopApp.live(resolve(url), use_local=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(6.0)
            cpu0, w0 = time.process_time(), time.monotonic()
            polls0 = app.engine.src.tasks.tries
            await pilot.pause(seconds)
            cpu, wall = time.process_time() - cpu0, time.monotonic() - w0
            cycles = max(1, app.engine.src.tasks.tries - polls0)
            return {"steady_cpu_pct": cpu / wall * 100, "cpu_per_cycle_ms": cpu / cycles * 1000, "cycles": cycles,
                    "seconds": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    print(json.dumps(asyncio.run(run())), flush=True)


def child_engine(url: str, seconds: float, timeline: str) -> None:
    """The engine alone (polls, history, snapshots; no UI) for ``seconds``: CPU per task-poll cycle, with or
    without the step timeline, and what the timeline read from Ray's finished tasks meanwhile."""
    from verltop.engine.monitor import Monitor
    from verltop.sources.config import resolve

    spent = [0.0]  # thread CPU inside the timeline's own code (polls' observe, plans, exact rows, step builds)

    def timed(fn):
        def wrapper(*a, **kw):
            t0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[0] += time.thread_time() - t0
        return wrapper

    async def run() -> dict:
        mon = Monitor(resolve(url), use_local=False, timeline=timeline == "on")
        tl = mon.timeline
        for name in ("observe", "steps", "add_finished", "maybe_refine"):
            setattr(tl, name, timed(getattr(tl, name)))
        mon.start()
        await asyncio.sleep(8.0)  # past start-up: the seed, the first detail reads
        spent[0] = 0.0
        st = mon.timeline.stats
        cpu0, w0, polls0, req0 = time.process_time(), time.monotonic(), mon.src.tasks.tries, mon.client.requests
        rounds0, treq0, rows0 = st.rounds, st.requests, st.rows
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - w0
        cycles = max(1, mon.src.tasks.tries - polls0)
        steps = (mon.latest.steps if mon.latest else ())
        out = {"cpu_per_cycle_ms": cpu / cycles * 1000, "steady_cpu_pct": cpu / wall * 100, "cycles": cycles,
               "requests": mon.client.requests - req0, "refine_rounds": st.rounds - rounds0,
               "refine_requests": st.requests - treq0, "refine_rows": st.rows - rows0,
               "steps": len(steps), "exact_steps": sum(1 for s in steps if s.exact), "build_ms": mon.last_build_ms,
               "timeline_ms_per_cycle": spent[0] / cycles * 1000}
        await mon.stop()
        return out

    print(json.dumps(asyncio.run(run())), flush=True)


def bench_timeline(quick: bool) -> list[tuple]:
    """What the step timeline adds to the engine's poll cost at 1,024 ranks. The job runs at twice the
    speed (a 32 s step: two or three complete, are refined and read back while it is measured, and a phase
    changes every few polls, more often than in a real job); runs alternate so drift hits both alike."""
    secs = 30.0 if quick else 60.0
    # two steps of finished tasks (Ray's GCS keeps 100,000 attempts: ten steps here; the synthetic server would
    # spend the cores listing them)
    srv = FakeServer(128, 8, speed=2.0, max_finished=20_000)
    try:
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        for mode in ("off", "on", "off", "on"):
            runs[mode].append(child("engine", srv.url, str(secs), mode))
    finally:
        srv.stop()
    on = statistics.median(r["cpu_per_cycle_ms"] for r in runs["on"])
    off = statistics.median(r["cpu_per_cycle_ms"] for r in runs["off"])
    on_pct = statistics.median(r["steady_cpu_pct"] for r in runs["on"])
    off_pct = statistics.median(r["steady_cpu_pct"] for r in runs["off"])
    own = statistics.median(r["timeline_ms_per_cycle"] for r in runs["on"])
    per_round = [r["refine_requests"] / max(1, r["refine_rounds"]) for r in runs["on"]]
    rows = [r["refine_rows"] / max(1, r["refine_rounds"]) for r in runs["on"]]
    return [
        ("engine CPU per poll cycle, 1,024 ranks (1,161 actors), timeline off / on",
         f"{off:.0f} / {on:.0f} ms ({(on - off) / off * 100:+.0f} %)", "on ≤ off + 5 %", on <= off * 1.05),
        ("engine steady CPU, 1,024 ranks, timeline off / on", f"{off_pct:.1f} / {on_pct:.1f} % of a core", "-", None),
        ("of which the timeline's own code (thread CPU), per poll cycle", f"{own:.1f} ms", "≤ 5 % of off",
         own <= off * 0.05),
        ("timeline reads per completed step, 1,024 ranks (requests / rows)",
         f"{statistics.median(per_round):.0f} / {statistics.median(rows):.0f}", "-", None),
    ]


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.95 * len(xs)))] if xs else float("nan")


def child(mode: str, *args: str) -> dict:
    out = subprocess.run([PY, "-m", "scripts.bench", "--child", mode, *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    for line in out.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"child {mode} failed: {out.stderr[-2000:]}")


# ------------------------------------------------------------------ measurements


LONG_S = 240.0  # past the first minutes at 10,000 actors, while every node's worker report gets read once


def bench_ui(quick: bool, long: bool = False) -> list[tuple]:
    rows = []
    # past the actors' 30-s detail re-read (after the 6 s of start-up): the peak RSS includes parsing it
    secs = 8.0 if quick else 36.0
    sizes = [(8, 8, 0, "64"), (128, 8, 0, "1,024"), (128, 8, 8900, "10,000")]
    for nodes, gpus, extra, label in sizes:
        srv = FakeServer(nodes, gpus, extra)
        try:
            if label == "1,024":
                ff = [child("first_frame", srv.url, repr(time.time()))["first_frame_s"] for _ in range(5)]
                rows.append(("time to first frame, 1,024 actors (median of 5)", f"{statistics.median(ff):.2f} s", "≤ 1.0 s",
                             statistics.median(ff) <= 1.0))
            r = child("refresh", srv.url, str(secs))
            idle = child("idle", srv.url, str(secs))
        finally:
            srv.stop()
        target = {"64": None, "1,024": 50.0, "10,000": 120.0}[label]
        over = f"{idle['cycles']} cycles, {idle['seconds']:.0f} s"
        rows.append((f"refresh cost per poll cycle, {label} actors (CPU; {over})", f"{idle['cpu_per_cycle_ms']:.0f} ms",
                     f"≤ {target:.0f} ms" if target else "-", None if target is None else idle["cpu_per_cycle_ms"] <= target))
        rows.append((f"steady CPU, {label} actors, default intervals ({over})", f"{idle['steady_cpu_pct']:.1f} % of a core",
                     "≤ 3 %" if label == "1,024" else "-", idle["steady_cpu_pct"] <= 3.0 if label == "1,024" else None))
        rows.append((f"peak RSS, {label} actors", f"{max(r['rss_mb'], idle['rss_mb']):.0f} MB",
                     "≤ 150 MB" if label != "64" else "-",
                     max(r["rss_mb"], idle["rss_mb"]) <= 150 if label != "64" else None))
        rows.append((f"key latency during refreshes, {label} actors (median / p95 of {r['keys']} keys)",
                     f"{r['key_ms_median']:.0f} / {r['key_ms_p95']:.0f} ms", "≤ 50 ms",
                     r["key_ms_p95"] <= 50))
    if long:  # what a 36-s run misses: the memory book and the trends filling with every actor's samples
        srv = FakeServer(128, 8, 8900)
        try:
            idle = child("idle", srv.url, str(LONG_S))
        finally:
            srv.stop()
        over = f"{idle['cycles']} cycles, {idle['seconds']:.0f} s"
        rows.append((f"refresh cost per poll cycle, 10,000 actors, a long run (CPU; {over})",
                     f"{idle['cpu_per_cycle_ms']:.0f} ms", "≤ 120 ms", idle["cpu_per_cycle_ms"] <= 120))
        rows.append((f"peak RSS, 10,000 actors, a long run ({over})", f"{idle['rss_mb']:.0f} MB", "≤ 150 MB",
                     idle["rss_mb"] <= 150))
    return rows


def bench_merge() -> list[tuple]:
    from tests.analysis.helpers import in_collective, row, sleeping
    from verltop.analysis.dump import analyse
    from verltop.analysis.merge import build_tree, render_tree

    n = 4096
    actors = [row(f"a{i}", f"g{i // 512}", i % 512) for i in range(n)]
    samples = {f"a{i}": [sleeping() if i % 512 == 7 else in_collective("all_reduce")] * 2 for i in range(n)}
    t, cpu = [], []
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        rep = analyse(actors, samples, 0.0)
        lines = render_tree(build_tree({f"g{i // 512}:{i % 512}": r.stack for i, r in enumerate(rep.ranks)}))
        t.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    assert len(rep.suspects) == 8 and lines
    ms, cpu_ms = statistics.median(t) * 1000, statistics.median(cpu) * 1000
    return [("stack merge + suspects, 4,096 synthetic ranks (median of 5; wall, CPU)", f"{ms:.0f} ms, CPU {cpu_ms:.0f} ms",
             "≤ 100 ms", ms <= 100)]


def bench_metrics() -> list[tuple]:
    """verl's logged metrics at 1,000 steps of history: one poll (a 20-line log tail with one new step parsed,
    the anomaly rules, the snapshot's view), and the first read of the whole history."""
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    from verltop.analysis.training import MetricHistory
    from verltop.demo.metrics import RunMetrics
    from verltop.sources import metrics_log as M

    run = RunMetrics(0)
    lines = [concat_dict_to_str(run.step(s), step=s) for s in range(1, 1201)]
    h = MetricHistory()
    t0 = time.perf_counter()
    h.add_many(M.console_lines("\n".join(lines[:1000])))
    h.view("actor_log", "TaskRunner")
    first_ms = (time.perf_counter() - t0) * 1000
    polls = []
    for s in range(1000, 1200):
        t0 = time.perf_counter()
        last = h.last_step
        h.add_many([(st, v) for st, v in M.console_lines("\n".join(lines[s - 19:s + 1]), last - 1) if st > last])
        h.view("actor_log", "TaskRunner")
        polls.append(time.perf_counter() - t0)
    med, p95 = statistics.median(polls) * 1000, _p95(polls) * 1000
    points = sum(len(p) for p in h.series.values())
    return [(f"metrics poll at 1,000 steps of history, {len(h.series)} keys (median / p95 of 200)",
             f"{med:.2f} / {p95:.2f} ms", "≤ 2 ms", p95 <= 2),
            ("metrics: first read of 1,000 logged steps", f"{first_ms:.0f} ms", "-", None),
            ("metrics kept (points over all keys)", f"{points:,}", f"≤ {len(h.series) * 1250:,}",
             points <= len(h.series) * 1250)]


def _spawn_ranks(n: int) -> list[subprocess.Popen]:
    code = ("import time\ndef waiting_in_collective():\n    time.sleep(3600)\n"
            "print('ready', flush=True)\nwaiting_in_collective()\n")
    procs = [subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for p in procs:
        p.stdout.readline()
    return procs


def bench_dump_local() -> list[tuple]:
    from tests.analysis.helpers import row
    from verltop.analysis.dump import analyse
    from verltop.sources.pyspy import DumpOptions, children_by_pidfd, find_pyspy
    from verltop.sources.stacks import StackCapture

    pyspy = find_pyspy()
    rows = []
    for n in (8, 32, 64):
        procs = _spawn_ranks(n)
        try:
            actors = [row(f"a{i}", "g", i, pid=p.pid) for i, p in enumerate(procs)]
            ours = []
            for _ in range(3):
                t0 = time.perf_counter()
                cap = StackCapture(None, frozenset(), DumpOptions(samples=1, via="local"))

                async def capture(cap: StackCapture = cap, actors: list = actors) -> dict:
                    with children_by_pidfd():  # as `verltop dump` runs it
                        return await cap.capture(actors)

                s = asyncio.run(capture())
                analyse(actors, s, time.time())
                ours.append(time.perf_counter() - t0)
            assert all(v[0].error is None for v in s.values())
            t0 = time.perf_counter()
            for p in procs:
                subprocess.run([pyspy, "dump", "--pid", str(p.pid)], capture_output=True, check=True)
            serial = time.perf_counter() - t0
        finally:
            for p in procs:
                p.kill()
                p.wait()
        ours_s = statistics.median(ours)
        target = "≤ 0.5 s" if n == 64 else "-"
        rows.append((f"dump + analysis of {n} local ranks, median of 3 (one serial py-spy loop)",
                     f"{ours_s:.2f} s ({serial:.2f} s, {serial / ours_s:.1f}x)", target,
                     ours_s <= 0.5 if n == 64 else None))
    return rows


_TREE_PARENT = """import sys, subprocess, time
from tests.shapes import set_title
set_title("ray::WorkerDict.actor_rollout_generate_sequences")
c = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=subprocess.PIPE, text=True)
c.stdout.readline()
print("ready", flush=True)
def waiting_in_collective():
    time.sleep(3600)
waiting_in_collective()
"""
_TREE_CHILD = """import sys, time
from tests.shapes import set_title
set_title("VLLM::Worker_TP0")
print("ready", flush=True)
def _load_weights():
    time.sleep(3600)
_load_weights()
"""


def bench_dump_children() -> list[tuple]:
    """A whole dump (children from /proc, py-spy of every process, analysis with chains) of 64 local ranks
    that each have one child process, titled as Ray and vLLM title theirs."""
    from tests.analysis.helpers import row
    from verltop.engine.dumps import DumpJob
    from verltop.sources.pyspy import DumpOptions

    code = _TREE_PARENT.format(child=_TREE_CHILD)  # run from the repository root: `tests` imports
    n = 64
    procs = [subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(n)]
    try:
        for p in procs:
            p.stdout.readline()
        actors = [row(f"a{i}", "g", i, pid=p.pid) for i, p in enumerate(procs)]
        times = []
        for _ in range(5):
            job = DumpJob(None, frozenset({"n1"}), actors, DumpOptions(samples=1))
            t0 = time.perf_counter()
            rep = asyncio.run(job.run())
            times.append(time.perf_counter() - t0)
            assert rep is not None and len(rep.ranks) == 2 * n, len(rep.ranks) if rep else job.problem
            assert all(r.error is None for r in rep.ranks), [r.error for r in rep.ranks if r.error][:3]
    finally:
        import psutil

        for p in procs:
            try:
                for c in psutil.Process(p.pid).children():
                    c.kill()
            except psutil.Error:
                pass
            p.kill()
            p.wait()
    med = statistics.median(times)
    return [(f"dump of {n} local ranks + {n} child processes (children from /proc, py-spy each, chains)",
             f"{med:.2f} s (min {min(times):.2f})", "≤ 0.8 s", med <= 0.8)]


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def live_env(token: str | None) -> dict[str, str]:
    """The commands' environment: the repository's verltop first, the cluster's token for it and for `ray`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if token:
        env.update(RAY_AUTH_TOKEN=token, RAY_AUTH_MODE="token")  # `ray list` reads the token only in token mode
    return env


def run_timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}… exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return dt, p


def measure_live(address: str, token: str | None, runs: int) -> dict[str, Any]:
    """verltop against what a user would type by hand, on a live cluster; every command a fresh process, the
    two sides interleaved (so a busy moment of the machine hits both), medians of ``runs``. The one-sample
    dump is measured beside its floor and the by-hand path by ``scripts.bench_floor``."""
    from scripts import bench_floor

    env = live_env(token)
    vt = [PY, "-m", "verltop", "--address", address]
    ray_cli = str(BIN / "ray")
    floor = bench_floor.measure(address, token, runs)
    out: dict[str, list[float]] = {k: [] for k in ("dump2", "snap", "snap_window", "ray_detail")}
    loads = [load()]
    for _ in range(max(3, runs // 2)):
        out["dump2"].append(run_timed([*vt, "dump", "--json"], env)[0])
        out["snap"].append(run_timed([*vt, "snapshot", "--json"], env)[0])
        out["snap_window"].append(run_timed([*vt, "snapshot", "--json", "--cpu-window", "0.5"], env)[0])
        out["ray_detail"].append(run_timed([ray_cli, "list", "actors", "--detail", "--address", address], env)[0])
    loads.append(load())
    return {"floor": floor, "loads": loads, **{k: sorted(v) for k, v in out.items()}}


def bench_live(quick: bool, runs: int = 9) -> list[tuple]:
    """On the demo's real Ray cluster, hung (as it is when someone dumps it): verltop vs the peer commands."""
    from verltop.demo.cluster import start_demo

    h = start_demo(hang_after=1)
    rows = []
    try:
        for _ in range(240):
            if h.hung():
                break
            time.sleep(0.5)
        time.sleep(3.0)  # its peers inside all_reduce
        rows += live_rows(measure_live(h.address, h.token, runs))
        rows.append(bench_first_ranks(h.address, live_env(h.token)))
    finally:
        h.stop()
    return rows


def live_rows(m: dict[str, Any]) -> list[tuple]:
    from scripts import bench_floor

    def med(k: str) -> float:
        return statistics.median(m[k])

    def spread(k: str) -> str:
        return f"{m[k][0]:.2f}–{m[k][-1]:.2f}"

    print(f"  load average {m['loads'][0]} before, {m['loads'][1]} after", file=sys.stderr)
    return [
        *bench_floor.rows(m["floor"]),
        (f"`verltop dump --json` (2 samples 1 s apart), median of {len(m['dump2'])}", f"{med('dump2'):.2f} s "
         f"({spread('dump2')})", "-", None),
        (f"`verltop snapshot --json` (`ray list actors --detail`), median of {len(m['snap'])}",
         f"{med('snap'):.2f} s ({med('ray_detail'):.2f} s; ratio {med('snap') / med('ray_detail'):.2f})",
         "≤ 0.3 of peer", med("snap") <= med("ray_detail") * 0.3),
        (f"`verltop snapshot --json --cpu-window 0.5` (this machine's processes sampled 0.5 s apart), median of "
         f"{len(m['snap_window'])}", f"{med('snap_window'):.2f} s", "-", None),
    ]


def bench_first_ranks(address: str, env: dict) -> tuple:
    out = subprocess.run([PY, "-m", "scripts.bench", "--child", "first_ranks", address], cwd=ROOT, capture_output=True,
                         text=True, env=env, timeout=180)
    line = next((x for x in out.stdout.splitlines()[::-1] if x.startswith("{")), None)
    if line is None:
        raise RuntimeError(out.stderr[-2000:])
    r = json.loads(line)
    return ("first ranks on screen after `d` (whole dump; one run)",
            f"{r['first_rank_ms']:.0f} ms ({r['done_ms'] / 1000:.1f} s, 2 samples)", "≤ 150 ms",
            r["first_rank_ms"] <= 150)


def child_first_ranks(address: str) -> None:
    from verltop.sources.config import resolve
    from verltop.ui.app import VerltopApp
    from verltop.ui.screens.stacks import StackScreen
    from verltop.ui.widgets.actor_table import ActorTable

    async def run() -> dict:
        app = VerltopApp.live(resolve(address))
        async with app.run_test(size=(160, 48)) as pilot:
            for _ in range(400):
                await pilot.pause(0.05)
                if app.screen.query_one(ActorTable).row_count > 5:
                    break
            await pilot.pause(2)
            t = app.screen.query_one(ActorTable)
            keys = t.keys
            target = next(i for i, k in enumerate(keys) if not k.startswith("grp:") and
                          next(a for a in app.snapshot.actors if a.actor_id == k).worker_group)
            t.move_cursor(row=target)
            await pilot.press("d")
            scr = app.screen
            assert isinstance(scr, StackScreen)
            for _ in range(400):
                await pilot.pause(0.05)
                if scr.report is not None:
                    break
            job = scr.job
            return {"first_rank_ms": job.first_rank_s * 1000, "done_ms": job.elapsed_s * 1000}

    print(json.dumps(asyncio.run(run())), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-live", action="store_true", help="skip the comparisons on a live Ray cluster")
    ap.add_argument("--live", metavar="URL", help="only the live comparisons, on the Ray cluster at URL (its "
                    "dashboard; token from RAY_AUTH_TOKEN or ~/.ray/auth_token)")
    ap.add_argument("--runs", type=int, default=9, help="runs per live figure (default 9)")
    ap.add_argument("--long", action="store_true", help=f"also run the TUI at 10,000 actors for {LONG_S:.0f} s")
    ap.add_argument("--only", choices=("merge", "dump_local", "dump_children", "ui", "processes", "timeline", "live",
                                       "metrics", "doctor"),
                    help="run one measurement")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        mode, *rest = a.child
        {"first_frame": lambda: child_first_frame(rest[0], float(rest[1])),
         "refresh": lambda: child_refresh(rest[0], float(rest[1])),
         "idle": lambda: child_idle_cpu(rest[0], float(rest[1])),
         "engine": lambda: child_engine(rest[0], float(rest[1]), rest[2]),
         "first_ranks": lambda: child_first_ranks(rest[0])}[mode]()
        return 0
    rows: list[tuple] = []
    start_load = load()
    from scripts.bench_floor import compiled

    compiled()
    from scripts.bench_doctor import bench_doctor
    from scripts.bench_processes import bench_processes

    named = {"merge": bench_merge, "dump_local": bench_dump_local, "dump_children": bench_dump_children,
             "ui": lambda: bench_ui(a.quick, a.long), "processes": lambda: bench_processes(polls=10 if a.quick else 40),
             "timeline": lambda: bench_timeline(a.quick), "live": lambda: bench_live(a.quick, a.runs),
             "metrics": bench_metrics, "doctor": lambda: bench_doctor(3 if a.quick else 7)}
    steps = [named[k] for k in ("merge", "dump_local", "dump_children", "ui", "processes", "timeline", "metrics")]
    if not (a.quick or a.no_live):
        steps += [named["live"], named["doctor"]]
    if a.only:
        steps = [named[a.only]]
    if a.live:
        from verltop.sources.config import resolve

        steps = [lambda: live_rows(measure_live(a.live, resolve(a.live).token, a.runs))]
    for step in steps:
        try:
            got = step()
        except Exception as e:  # noqa: BLE001 - one failed measurement must not lose the others
            print(f"benchmark step failed: {e.__class__.__name__}: {e}", file=sys.stderr)
            continue
        for r in got:
            print("  " + " | ".join(str(x) for x in r), file=sys.stderr, flush=True)
        rows += got
    print(f"\nverltop benchmark — {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; load average {start_load} at the start, {load()} at the end\n")
    print("| measure | verltop (peer) | target | |")
    print("| --- | --- | --- | --- |")
    for name, val, target, ok in rows:
        mark = "" if ok is None else ("PASS" if ok else "MISS")
        print(f"| {name} | {val} | {target} | {mark} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
