"""Check verltop against a real NCCL hang on this machine's NVIDIA GPUs.

    python -m scripts.gpu_check                          # from the repository root
    python -m scripts.gpu_check --after-timeout          # also the NCCL watchdog's path (about 1 min more per shape)
    python -m scripts.gpu_check --shapes mismatch --world 4 --out /tmp/check

Needs one or more NVIDIA GPUs, torch with CUDA, ``ray[default]`` and py-spy. For each shape it starts a Ray
cluster of its own on this machine (the dashboard on a free port), runs the verl-shaped job of
``scripts/gpu_job.py`` (``TaskRunner`` + one ``WorkerDict`` per rank, one GPU each, an NCCL group with a short
timeout and the Flight Recorder on) until collective #5 hangs, then runs what a user would:

1. ``verltop snapshot --json``: every rank listed with its GPU, in ``actor_rollout_update_actor``;
2. ``verltop dump --json`` (2 samples): every rank dumped; the straggler named as the only suspect (straggler
   and single shapes), the others waiting on their GPU (``cuda_sync``) or in the collective;
3. the Flight Recorder through the debug-info pipe (what ``f`` does in the TUI), then ``dump --json`` again:
   the collective each rank waits in (``all_reduce`` #5; ``all_gather`` vs ``all_reduce`` for the mismatch);
4. with ``--after-timeout``: after the NCCL watchdog fired, ``dump --json`` with the dump-on-timeout files
   and the watchdog lines, then with the watchdog lines alone (the files moved aside);
5. with ``--post-mortem`` (implies ``--after-timeout``): once the watchdog has aborted the waiting ranks,
   ``dump --json`` again: the dead rank classified ``nccl_timeout`` from its own stderr, the straggler still the
   suspect with the collective it never reached.

NCCL RAS (NCCL >= 2.24) is asked at every step (raw answers saved, JSON and text): before the timeout it must
name the straggler as behind its peers (``straggler``), both ranks of the ``mismatch``, and ``snapshot`` /
``dump`` must carry it; after the abort (``--post-mortem``) the dead rank as missing. The ``kill`` shape hangs
like ``straggler`` and then SIGKILLs the straggler inside its wait: the dump names the dead rank as the suspect,
and RAS names it missing while its peers live; when the job's controller fails with it and Ray kills the peers
as their owner died (a verl layout: the controller's ``ray.get`` raises), the rank that died of its own cause
is still the one named.

Shapes: ``straggler`` and ``mismatch`` need 2 GPUs (``--world`` ranks); ``single`` runs on one (an NCCL group
of one that keeps its GPU busy, and a CPU-only straggler); ``tree`` (``scripts/gpu_tree.py``, one GPU, needs
``setproctitle``) is a rollout server whose engine's TP workers hold GPU memory: verltop must list them and their
memory under the actor (from /proc and NVML, and through a probe), and as orphans once the server is killed.
Default: straggler and mismatch with 2 or more GPUs, single with one; then tree.

Everything lands in ``OUT/<shape>/`` (the raw outputs, the Flight Recorder files, ``marks.json`` with what
each rank said before hanging, ``checks.json``, ``timings.json``), with a summary in ``OUT/summary.md``. Each shape's cluster
is shut down, its processes gone, before the next starts. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts.net import free_port

ROOT = Path(__file__).resolve().parent.parent
VERLTOP = [sys.executable, "-m", "verltop"]
PORT_BASE = 29600


def count_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: ask nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


class Checks:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def check(self, name: str, ok: bool, detail: Any = "") -> bool:
        self.items.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"  {'PASS' if ok else 'FAIL'}  {name}{f': {detail}' if detail and not ok else ''}", flush=True)
        return bool(ok)

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.items)


class Scenario:
    """One shape: its own Ray cluster, the job hung at collective #5, verltop run against it, the checks."""

    def __init__(self, shape: str, world: int, out: Path, nccl_timeout_s: float, port: int) -> None:
        self.shape, self.world, self.dir = shape, world, out / shape
        self.prefix = {"straggler": "chks", "mismatch": "chkm", "single": "chk1", "tree": "chkt", "kill": "chkk"}[shape]
        self.nccl_timeout_s = nccl_timeout_s
        self.port = port
        self.checks = Checks()
        self.url = ""
        self.hang_t = 0.0
        self.straggler = world - 1 if shape in ("straggler", "single", "kill") else None
        self.pids: set[int] = set()  # this job's processes, ended at the stop if Ray left them
        self.own_pids: set[int] = set()  # processes of the job that are not Ray workers (the tree's engine)
        self.timings: list[dict[str, Any]] = []

    # ---------------------------------------------------------- running verltop

    def verltop(self, name: str, *args: str, timeout: float = 120) -> Any:
        """``verltop --address URL ARGS``: stdout to ``name``, stderr next to it; the parsed JSON, if any."""
        t0 = time.monotonic()
        p = subprocess.run([*VERLTOP, "--address", self.url, *args], capture_output=True, text=True,
                           timeout=timeout, cwd=ROOT)
        (self.dir / name).write_text(p.stdout)
        if p.stderr:
            (self.dir / f"{name}.stderr").write_text(p.stderr)
        dt = time.monotonic() - t0
        self.timings.append({"command": " ".join(["verltop", *args]), "file": name, "rc": p.returncode,
                             "seconds": round(dt, 3), "after_hang_s": round(time.time() - self.hang_t, 1)})
        print(f"  {' '.join(args)}: rc {p.returncode}, {dt:.1f} s", flush=True)
        try:
            return json.loads(p.stdout) if name.endswith(".json") else p.stdout
        except ValueError:
            return None

    def ranks(self, doc: dict | None, key: str) -> dict[int, dict]:
        return {a["rank"]: a for a in (doc or {}).get(key, []) if a.get("worker_group") == self.prefix}

    # ---------------------------------------------------------- the run

    def run(self, after_timeout: bool, post_mortem: bool = False) -> Checks:
        import ray

        from scripts import gpu_job

        self.dir.mkdir(parents=True, exist_ok=True)
        ray.cloudpickle.register_pickle_by_value(gpu_job)  # the workers need not import scripts/
        dash = free_port()
        gpus = 1 if self.shape in ("single", "tree") else self.world
        what = "a rollout server and its engine" if self.shape == "tree" else \
            f"{self.world} ranks, NCCL timeout {self.nccl_timeout_s:g} s"
        print(f"== {self.shape}: {what}, {gpus} GPU(s)", flush=True)
        ray.init(address="local", include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=dash,
                 num_cpus=self.world + 2, num_gpus=gpus, log_to_driver=False,
                 runtime_env={"env_vars": dict(gpu_job.SAFE_ENV)})
        self.url = f"http://127.0.0.1:{dash}"
        try:
            if self.shape == "tree":
                from scripts.gpu_tree import run_tree

                run_tree(self)
                return self.checks
            marks = gpu_job.Marks.remote()
            fr = str(self.dir / "fr_rank_")
            cfg = {"shape": "straggler" if self.shape == "kill" else self.shape, "world": self.world, "prefix": self.prefix, "port": self.port,
                   "hold_s": self.nccl_timeout_s + 600, "nccl_timeout_s": self.nccl_timeout_s, "marks": marks,
                   "fr_env": {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": fr,
                              "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(self.dir / "fr_pipe_"),
                              "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}}
            run_ref = gpu_job.TaskRunner.options(name="TaskRunner").remote().run.remote(cfg)
            if not self.wait_for_hang(marks, run_ref):
                return self.checks
            time.sleep(3.0)  # every rank inside its wait, two samples apart
            if self.shape == "kill":
                self.killed()
                return self.checks
            self.before_timeout()
            if after_timeout or post_mortem:
                self.after_timeout()
            if post_mortem:
                self.after_abort()
        finally:
            self.stop(ray)
        return self.checks

    def wait_for_hang(self, marks: Any, run_ref: Any, timeout_s: float = 300.0) -> bool:
        import ray

        deadline = time.monotonic() + timeout_s
        got: dict[str, Any] = {}
        while time.monotonic() < deadline:
            got = ray.get(marks.get.remote())
            hung = {k: v for k, v in got.items() if k.startswith("hang:")}
            self.pids |= {v["pid"] for v in got.values()}
            if len(hung) == self.world:
                self.hang_t = max(v["t"] for v in hung.values())
                (self.dir / "marks.json").write_text(json.dumps(got, indent=1))
                return self.checks.check("every rank reached collective #5", True)
            done, _ = ray.wait([run_ref], timeout=0)
            if done:
                try:
                    ray.get(done[0])
                    why = "the job finished without hanging"
                except Exception as e:  # noqa: BLE001 - the job's own failure is the finding
                    why = f"the job failed: {str(e).splitlines()[0][:300]}"
                return self.checks.check("every rank reached collective #5", False, why)
            time.sleep(0.5)
        (self.dir / "marks.json").write_text(json.dumps(got, indent=1))
        return self.checks.check("every rank reached collective #5", False, f"not within {timeout_s:g} s: {sorted(got)}")

    def before_timeout(self) -> None:
        c, w = self.checks, self.world
        snap = self.verltop("snapshot.json", "snapshot", "--json")
        self.pids |= {a["pid"] for a in (snap or {}).get("actors", []) if a.get("pid")}  # this cluster's only
        rows = self.ranks(snap, "actors")
        c.check("snapshot lists every rank", sorted(rows) == list(range(w)), sorted(rows))
        gpu_ranks = [r for r in range(w) if not (self.shape == "single" and r > 0)]
        idx = [rows.get(r, {}).get("gpu_index") for r in gpu_ranks]
        c.check("snapshot maps each GPU rank to its own GPU", None not in idx and len(set(idx)) == len(idx), idx)
        tasks = {r: a.get("task") for r, a in rows.items()}
        c.check("snapshot: every rank in actor_rollout_update_actor",
                all(t == "actor_rollout_update_actor" for t in tasks.values()) and len(tasks) == w, tasks)
        c.check("snapshot lists the controller", any(a.get("role") == "controller" for a in (snap or {}).get("actors", [])))

        dump = self.verltop("dump.json", "dump", "--json")
        self.verltop("dump.txt", "dump")
        ranks = self.ranks(dump, "ranks")
        errors = {r: a.get("error") for r, a in ranks.items() if a.get("error")}
        c.check("dump: every rank dumped", sorted(ranks) == list(range(w)) and not errors, errors or sorted(ranks))
        ctl = [a for a in (dump or {}).get("ranks", []) if a.get("role") == "controller"]
        c.check("dump: the controller waits in ray.get", bool(ctl) and (ctl[0].get("blocked_on") or {}).get("op") == "ray.get",
                [a.get("blocked_on") for a in ctl])
        ops = {r: (a.get("blocked_on") or {}).get("op") for r, a in ranks.items()}
        waiting = [r for r in range(w) if r != self.straggler]
        c.check("dump: the ranks in collective #5 wait on their GPU or in the collective",
                all(ops.get(r) in ("cuda_sync", "all_reduce", "all_gather") for r in waiting), ops)
        if self.straggler is not None:
            self.check_suspects("dump", dump, {self.straggler})
            stack = " ".join(f.get("func", "") for f in ranks.get(self.straggler, {}).get("stack") or [])
            c.check("dump: the straggler's stack shows generate_sequences", "generate_sequences" in stack)
        if self.shape in ("straggler", "mismatch"):
            self.check_ras_before(snap, dump)
        self.flight_recorder()

    # ---------------------------------------------------------- NCCL RAS and the post-mortem

    def ras(self, name: str) -> Any:
        """NCCL RAS on this machine, its raw answers saved (JSON and text): the parsed report, or None."""
        from verltop.sources import ras

        async def both() -> tuple[tuple[Any, Any], str | None]:
            body, problem = await ras.query()
            text = None
            try:  # the text form too, as NVIDIA's ncclras prints it
                reader, writer = await asyncio.wait_for(asyncio.open_connection(ras.DEFAULT_HOST, ras.DEFAULT_PORT), 2)
                writer.write(b"CLIENT PROTOCOL 2\nSTATUS\n")
                await writer.drain()
                text = (await asyncio.wait_for(reader.read(), 5)).decode("utf-8", "replace")
                writer.close()
            except (OSError, asyncio.TimeoutError):
                pass
            return (body, problem), text

        (body, problem), text = asyncio.run(both())
        if body is not None:
            (self.dir / f"{name}.json").write_text(body)
        if text is not None:
            (self.dir / f"{name}.txt").write_text(text)
        if body is None:
            (self.dir / f"{name}.error").write_text(problem.text if problem else "no answer")
            return None
        report, _ = ras.parse(body)
        return report

    def ras_findings(self, what: str, report: Any) -> list[Any]:
        from verltop.analysis.ras import findings

        found = findings(report) if report is not None else []
        (self.dir / f"{what}.findings.json").write_text(json.dumps([f.text for f in found], indent=1))
        return found

    def rank_pids(self, doc: dict | None) -> dict[int, int]:
        return {r: a.get("pid") for r, a in self.ranks(doc, "ranks" if "ranks" in (doc or {}) else "actors").items()}

    def check_ras_before(self, snap: dict | None, dump: dict | None) -> None:
        c = self.checks
        report = self.ras("ras_before")
        c.check("RAS answers on this machine", report is not None)
        found = self.ras_findings("ras_before", report)
        pids = self.rank_pids(snap)
        if self.shape in ("straggler",):
            behind = {f.pid for f in found if f.kind == "behind"}
            c.check("RAS: the straggler is behind its peers", behind == {pids.get(self.straggler)},
                    [f.text for f in found])
            rows = self.ranks(snap, "actors")
            st = [x for x in rows.get(self.straggler, {}).get("stalls", []) if x.get("rule") == "ras"]
            c.check("snapshot: the straggler carries the RAS stall", bool(st) and st[0].get("state") == "behind", st)
            sus = [x for x in (dump or {}).get("suspects", []) if x.get("rank") == self.straggler]
            c.check("dump: the straggler's suspect line has RAS's reason",
                    bool(sus) and "NCCL RAS" in sus[0].get("reason", ""), sus)
        elif self.shape == "mismatch":
            mism = {f.pid for f in found if f.kind == "mismatch"}
            c.check("RAS: both ranks issued different collectives", mism == set(pids.values()),
                    [f.text for f in found])

    def after_abort(self) -> None:
        """After NCCL's watchdog aborted the waiting ranks (about a minute after it fired): the dead rank's
        cause from its own stderr, the straggler still named, RAS naming the dead rank missing."""
        if self.shape != "straggler":
            return
        c = self.checks
        deadline = time.time() + 150
        dump = None
        while time.time() < deadline:
            dump = self.verltop("dump_after_abort.json", "dump", "--json", "--samples", "1")
            dead = [a for r, a in self.ranks(dump, "ranks").items() if a.get("state") == "DEAD" and a.get("process") is None]
            if dead:
                break
            time.sleep(5.0)
        ranks = self.ranks(dump, "ranks")
        waiting = [r for r in range(self.world) if r != self.straggler]
        deaths = {r: (ranks.get(r, {}).get("death") or {}).get("kind") for r in waiting}
        c.check("post-mortem: the aborted ranks are DEAD, classified nccl_timeout",
                all(v == "nccl_timeout" for v in deaths.values()), deaths)
        self.check_suspects("post-mortem", dump, {self.straggler})
        reason = " ".join(s.get("reason", "") for s in (dump or {}).get("suspects", []))
        c.check("post-mortem: the suspect's reason names the collective it never reached", "#5" in reason, reason)
        self.verltop("dump_after_abort.txt", "dump", "--samples", "1")
        report = self.ras("ras_after_abort")
        found = self.ras_findings("ras_after_abort", report)
        if report is not None:  # only while the straggler's RAS thread is alive to answer
            pids = self.rank_pids(dump)
            missing = {f.pid for f in found if f.kind == "missing"}
            c.check("RAS after the abort: the dead ranks are missing", missing == {pids.get(r) for r in waiting},
                    [f.text for f in found])

    def killed(self) -> None:
        """The straggler SIGKILLed inside its wait: RAS names it missing, the dump names it the suspect."""
        c = self.checks
        snap = self.verltop("snapshot.json", "snapshot", "--json")
        self.pids |= {a["pid"] for a in (snap or {}).get("actors", []) if a.get("pid")}
        victim = self.ranks(snap, "actors").get(self.straggler, {}).get("pid")
        c.check("kill: the straggler's pid is known", bool(victim))
        if not victim:
            return
        self.ras("ras_before_kill")
        os.kill(victim, signal.SIGKILL)
        time.sleep(8.0)  # Ray marks it DEAD; RAS's keep-alive notices
        dump = None
        for _ in range(10):
            dump = self.verltop("dump_after_kill.json", "dump", "--json", "--samples", "1")
            if self.ranks(dump, "ranks").get(self.straggler, {}).get("state") == "DEAD":
                break
            time.sleep(3.0)
        self.check_suspects("after the kill", dump, {self.straggler})
        report = self.ras("ras_after_kill")
        alive = [r for k, r in self.ranks(dump, "ranks").items() if k != self.straggler and r.get("state") == "ALIVE"]
        if alive:  # the peers live on, stuck in the collective: RAS still answers from them
            found = self.ras_findings("ras_after_kill", report)
            c.check("RAS after the kill: the killed rank is missing",
                    victim in {f.pid for f in found if f.kind == "missing"}, [f.text for f in found])
        else:
            # the controller's ray.get raised, the job ended and Ray killed the peers as their owner died:
            # nothing is left to answer RAS, and the dump must still name the rank that died first
            c.check("after the kill: the peers died of their owner's death, RAS has no listener left",
                    report is None, "RAS still answered")

    def check_suspects(self, what: str, dump: dict | None, want: set[int]) -> None:
        got = {s.get("rank") for s in (dump or {}).get("suspects", []) if s.get("worker_group") == self.prefix}
        reasons = [s.get("reason") for s in (dump or {}).get("suspects", [])]
        self.checks.check(f"{what}: suspects are rank(s) {sorted(want)}", got == want, reasons)

    def flight_recorder(self) -> None:
        """What ``f`` does: ask every local rank for a Flight Recorder dump through its pipe, then dump."""
        from verltop.engine.monitor import Monitor
        from verltop.sources.config import resolve
        from verltop.sources.flight_recorder import trigger_and_read

        async def trigger() -> tuple[int, list[str]]:
            mon = Monitor(resolve(self.url), use_local=True)
            try:
                await mon.poll_once(seed=False)
                snap = mon.snapshot()
            finally:
                await mon.stop()
            ranks = [a for a in snap.actors if a.worker_group == self.prefix and a.rank is not None
                     and not (self.shape == "single" and a.rank > 0)]
            states, notes = await trigger_and_read(ranks)
            return len(states), notes

        n, notes = asyncio.run(trigger())
        gpu_ranks = 1 if self.shape == "single" else self.world
        self.checks.check("Flight Recorder: every GPU rank wrote a dump through its pipe", n == gpu_ranks, notes)
        dump = self.verltop("dump_fr.json", "dump", "--json", "--samples", "1")
        self.check_collectives("after the Flight Recorder dump", dump)

    def check_collectives(self, what: str, dump: dict | None, source: str | None = None) -> None:
        c, w = self.checks, self.world
        col = {r: a.get("collective") or {} for r, a in self.ranks(dump, "ranks").items()}
        if source is not None:
            c.check(f"{what}: collectives read from {source}",
                    all(v.get("source") == source for r, v in col.items() if r != self.straggler), col)
        if self.shape == "single":
            c.check(f"{what}: rank 0's last collective is all_reduce #5, done", col.get(0, {}).get("last_completed") == 5, col)
            return
        want = {r: "all_gather" if self.shape == "mismatch" and r == 1 else "all_reduce"
                for r in range(w) if r != self.straggler}
        got = {r: (col.get(r, {}).get("op"), col.get(r, {}).get("seq")) for r in want}
        c.check(f"{what}: each waiting rank's collective #5 named", all(got[r] == (op, 5) for r, op in want.items()), got)
        if self.straggler is not None:
            last = col.get(self.straggler, {}).get("last_enqueued")
            c.check(f"{what}: the straggler never enqueued #5", last == 4, col.get(self.straggler))
            self.check_suspects(what, dump, {self.straggler})
        else:
            self.check_suspects(what, dump, {0, 1})

    def after_timeout(self) -> None:
        """After the watchdog: the dump-on-timeout files and the watchdog lines, then the lines alone."""
        if self.shape == "single":
            return  # a group of one never times out
        wait = self.hang_t + self.nccl_timeout_s + 5 - time.time()
        print(f"  waiting {max(0.0, wait):.0f} s for the NCCL watchdog", flush=True)
        time.sleep(max(0.0, wait))
        dump = None
        for _ in range(20):  # the watchdog line and the files come within seconds of each other
            dump = self.verltop("dump_after_timeout.json", "dump", "--json", "--samples", "1")
            cols = [(a.get("collective") or {}) for r, a in self.ranks(dump, "ranks").items() if r != self.straggler]
            if cols and all(v.get("last_enqueued") is not None and v.get("source") == "flight_recorder" for v in cols):
                break
            time.sleep(2.0)
        self.check_collectives("after the timeout", dump, "flight_recorder")
        aside = [p for p in self.dir.glob("fr_rank_*") if p.is_file()]
        for p in aside:
            p.rename(p.with_name(p.name + ".aside"))
        try:
            dump = self.verltop("dump_after_timeout_logs.json", "dump", "--json", "--samples", "1")
            self.check_collectives("from the watchdog lines alone", dump, "watchdog_log")
        finally:
            for p in aside:
                p.with_name(p.name + ".aside").rename(p)

    def stop(self, ray: Any) -> None:
        """End the job and the cluster, then any of its workers still there (a rank asleep in
        ``generate_sequences`` outlives its raylet); wait until the GPUs are let go."""
        ray.shutdown()
        time.sleep(2.0)
        for pid in self.pids | self.own_pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read(64)
                if title.startswith(b"ray::") or (pid in self.own_pids and title.startswith((b"VLLM::", b"python"))):
                    os.kill(pid, signal.SIGKILL)  # still that process, not a reused pid
            except OSError:
                pass
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and gpu_processes():
            time.sleep(1.0)
        left = gpu_processes()
        self.checks.check("the GPUs are free again after the cluster stopped", not left, left)


def gpu_processes() -> list[str]:
    """Processes that hold a GPU now (nvidia-smi's compute apps)."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", help="comma-separated: straggler, mismatch, single, tree, kill (default: what the GPUs "
                    "allow, and tree)")
    ap.add_argument("--world", type=int, default=2, help="ranks for straggler and mismatch (one GPU each; default 2)")
    ap.add_argument("--timeout", type=float, default=60.0, metavar="S", help="the NCCL timeout (default 60)")
    ap.add_argument("--after-timeout", action="store_true", help="also check the watchdog path after the timeout")
    ap.add_argument("--post-mortem", action="store_true",
                    help="also check the dump after the watchdog aborted the ranks (implies --after-timeout)")
    ap.add_argument("--out", default=f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}", help="output directory")
    a = ap.parse_args()
    n = count_gpus()
    if n == 0:
        print("gpu_check: no NVIDIA GPU found (NVML / nvidia-smi)", file=sys.stderr)
        return 2
    shapes = a.shapes.split(",") if a.shapes else (["straggler", "mismatch"] if n >= 2 else ["single"]) + ["tree"]
    bad = [s for s in shapes if s not in ("straggler", "mismatch", "single", "tree", "kill")]
    need = max(1 if s in ("single", "tree") else a.world for s in shapes)
    if bad or a.world < 2 or need > n:
        print(f"gpu_check: {'unknown shape ' + ', '.join(bad) if bad else f'{need} GPUs needed, {n} here'}",
              file=sys.stderr)
        return 2
    if gpu_processes():
        print(f"gpu_check: note: GPUs already in use: {gpu_processes()}", file=sys.stderr)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for i, shape in enumerate(shapes):
        sc = Scenario(shape, 2 if shape == "single" else a.world, out, a.timeout, PORT_BASE + i)
        results[shape] = sc.run(a.after_timeout, a.post_mortem)
        (sc.dir / "checks.json").write_text(json.dumps(results[shape].items, indent=1))
        (sc.dir / "timings.json").write_text(json.dumps(sc.timings, indent=1))
    lines = [f"# verltop GPU check, {time.strftime('%Y-%m-%d %H:%M')}, {n} GPU(s)\n", "| shape | check | |",
             "| --- | --- | --- |"]
    lines += [f"| {s} | {c['check']} | {'PASS' if c['ok'] else '**FAIL**'} |" for s, r in results.items() for c in r.items]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    failed = sum(1 for r in results.values() for c in r.items if not c["ok"])
    print(f"\n{'all checks passed' if not failed else f'{failed} check(s) failed'}; outputs in {out}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
