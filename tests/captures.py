"""Real captures replayed through today's code: a capture folder's dashboard answers served over real HTTP
(``tests.replay_server``) and read by the engine's ``Monitor``; its py-spy answers served as the dashboard's
``/worker/traceback`` and read by a ``DumpJob``; its log tails as the log API; its Flight Recorder files
read where the ranks' runtime env says they are.

A ``Capture`` names which of a folder's files answer which request, and the moment the replay's clock
stands at (when the state API was read there).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.replay_server import FIXTURES, ReplayDashboard
from verltop.analysis.dump import analyse, dump_targets
from verltop.analysis.stalls import StallSettings
from verltop.engine.dumps import DumpJob
from verltop.engine.monitor import Monitor
from verltop.model import ActorRow, DumpReport, ProcessDump, Snapshot
from verltop.sources.config import Endpoint
from verltop.sources.pyspy import DumpOptions, parse_json

GPU_RUN = FIXTURES / "real-gpu-run"
RAY_GPU = FIXTURES / "real-gpu" / "ray-gpu-cluster"
DEMO_CPU = FIXTURES / "demo-cpu"


@dataclass(frozen=True)
class Capture:
    """One moment of one capture folder, as a dashboard would answer it."""

    root: Path
    at: float  # the replay's clock: when these answers were read
    actors: str = "api_v0_actors.json"
    tasks: str = "api_v0_tasks.json"
    nodes: str = "api_v0_nodes.json"
    summary: str = "nodes_view_summary.json"
    node_detail: str | None = "nodes_NODE_ID.json"
    logs: dict[str, str] = field(default_factory=dict)  # actor_id -> its stderr tail; {}: root/logs/worker-*-PID.*
    tracebacks: dict[int, tuple[str, ...]] = field(default_factory=dict)  # pid -> py-spy text, one per sample
    native_tracebacks: bool = True  # the captured texts are `py-spy dump --native`

    def path(self, rel: str) -> Path:
        return self.root / rel

    def text(self, rel: str) -> str:
        return self.path(rel).read_text()

    def json(self, rel: str):
        return json.loads(self.text(rel))

    def raw_actors(self) -> list[dict]:
        return self.json(self.actors)["data"]["result"]["result"]

    def actor_id(self, name: str) -> str:
        return next(a["actor_id"] for a in self.raw_actors() if a["name"] == name)

    def pid(self, name: str) -> int:
        return next(a["pid"] for a in self.raw_actors() if a["name"] == name)

    def dashboard(self, port: int | None = None) -> ReplayDashboard:
        files = {"api_v0_actors.json": self.path(self.actors), "api_v0_tasks.json": self.path(self.tasks),
                 "api_v0_nodes.json": self.path(self.nodes), "nodes_view_summary.json": self.path(self.summary),
                 "nodes_NODE_ID.json": self.path(self.node_detail or "no-node-detail-captured")}
        logs: Callable[[str, str], Path | None] | None = None
        if self.logs:
            logs = lambda aid, suffix: self.path(self.logs[aid]) if suffix == "err" and aid in self.logs else None  # noqa: E731

        def tracebacks(pid: int, native: bool, n: int) -> Path | None:
            got = self.tracebacks.get(pid)
            if not got or native != self.native_tracebacks:
                return None
            return self.path(got[min(n, len(got) - 1)])

        return ReplayDashboard(self.root, "", port=port, files=files, logs=logs, tracebacks=tracebacks)


def taken_at(root: Path, file: str) -> float:
    """When the capture's harness read ``file`` (``timings.json``)."""
    return next(t["start"] for t in json.loads((root / "timings.json").read_text()) if t.get("file") == file)


class Replay:
    """``async with Replay(capture) as r``: the capture served, ``r.snap`` its snapshot through a ``Monitor``."""

    def __init__(self, cap: Capture, stall: StallSettings | None = None, now: float | None = None,
                 port: int | None = None) -> None:
        self.cap = cap
        self.now = cap.at if now is None else now
        self.stall = stall
        self.dash = cap.dashboard(port)
        self.mon: Monitor | None = None
        self.snap: Snapshot | None = None

    async def __aenter__(self) -> Replay:
        self.dash.__enter__()
        self.mon = Monitor(Endpoint(self.dash.url, "--address", None, None), stall=self.stall, use_local=False,
                           clock=lambda: self.now)
        await self.mon.poll_once()
        self.snap = self.mon.snapshot()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.mon is not None:
            await self.mon.stop()
        self.dash.__exit__(*exc)

    def row(self, name: str) -> ActorRow:
        assert self.snap is not None
        return next(a for a in self.snap.actors if a.actor_name == name)

    def job(self, opts: DumpOptions | None = None, fr: dict[int, Path] | None = None, tmp: Path | None = None,
            use_logs: bool = True) -> DumpJob:
        """A dump of every verl rank, as ``D`` takes it: through the dashboard's ``/worker/traceback``
        (the captured py-spy texts). ``fr``: rank -> a captured Flight Recorder file, put in ``tmp`` where
        the ranks' runtime env (``TORCH_FR_DUMP_TEMP_FILE``) says, on this (the ranks') node."""
        assert self.snap is not None and self.mon is not None
        targets = dump_targets(self.snap.actors)
        local: frozenset[str] = frozenset()
        if fr:
            assert tmp is not None
            prefix = _place_fr(targets, fr, tmp)
            targets = [replace(a, fr_dump_prefix=prefix) if a.fr_dump_prefix else a for a in targets]
            local = frozenset(a.node_id for a in targets if a.node_id)
        opts = opts or DumpOptions(native=self.cap.native_tracebacks, samples=2, interval_s=0.0, via="dashboard")
        return DumpJob(self.mon.client, local, targets, opts, use_logs=use_logs, clock=lambda: self.now)

    async def dump(self, **kw) -> DumpReport:
        report = await self.job(**kw).run()
        assert report is not None
        return report

    async def analyse_samples(self, samples: dict[str, list[ProcessDump]], **kw) -> DumpReport:
        """The rest of a dump (evidence, analysis) over stacks py-spy took on the node itself (``--json``:
        the local route, which a replay cannot run)."""
        job = self.job(**kw)
        job.samples = samples
        collectives, notes = await job.evidence(samples)
        return analyse(job.targets, samples, self.now, collectives, native=job.opts.native, notes=tuple(notes))


def _place_fr(targets: list[ActorRow], fr: dict[int, Path], tmp: Path) -> str:
    prefixes = {a.fr_dump_prefix for a in targets if a.fr_dump_prefix}
    assert len(prefixes) == 1, prefixes  # the job's runtime env gave every rank one prefix
    name = Path(prefixes.pop()).name
    for rank, src in fr.items():
        shutil.copy(src, tmp / f"{name}{rank}")
    return str(tmp / name)


def pyspy_json(cap: Capture, rel: str, samples: int = 2) -> list[ProcessDump]:
    """A captured ``py-spy dump --json``, as the local route reads it (``samples`` times: one capture)."""
    threads, err = parse_json(cap.text(rel))
    assert err is None, err
    return [ProcessDump(1, threads=threads)] * samples



def ray_gpu_cluster(at: float | None = None) -> Capture:
    """``real-gpu/ray-gpu-cluster``, 8-27 s into the hang (2x H200: rank 0 in an NCCL all_reduce, rank 1
    asleep, the controller in ``ray.get``). Tracebacks: the dashboard's own ``/worker/traceback?native=0``
    answer, then a direct ``py-spy dump`` a few seconds later (two real samples); logs: the workers' stderr
    tails (rank 0's watchdog line came at 44 s, before the tails were taken)."""
    meta = json.loads((RAY_GPU / "capture_meta.json").read_text())
    pids = meta["pids"]
    return Capture(RAY_GPU, meta["t_hang_start"] + 8.0 if at is None else at, actors="hung/api_v0_actors.json",
                   tasks="hung/api_v0_tasks.json", nodes="hung/api_v0_nodes.json",
                   summary="hung/nodes_view_summary.json", node_detail="hung/nodes_NODE_ID.json",
                   tracebacks={pid: (f"hung/worker_traceback_{k}_native0.txt", f"hung/pyspy_{k}.txt")
                               for k, pid in pids.items()},
                   native_tracebacks=False)


def demo_cpu() -> Capture:
    """``demo-cpu``: the demo job on a CPU-only cluster, 45 s into its hang; two dashboard tracebacks of
    every actor about 1 s apart."""
    meta = json.loads((DEMO_CPU / "capture_meta.json").read_text())
    pids = sorted({int(k.split("_")[1].split(".")[0]) for k in meta["taken_at"] if "/traceback_" in k})
    logs = {p.name.split("-")[1]: f"logs/{p.name}" for p in (DEMO_CPU / "logs").glob("worker-*.err")}
    return Capture(DEMO_CPU, meta["taken_at"]["hung/api_v0_actors.json"]["t"], actors="hung/api_v0_actors.json",
                   tasks="hung/api_v0_tasks.json", nodes="hung/api_v0_nodes.json",
                   summary="hung/nodes_view_summary.json", node_detail="hung/nodes_NODE_ID.json", logs=logs,
                   tracebacks={p: (f"hung/traceback_{p}.0.txt", f"hung/traceback_{p}.1.txt") for p in pids},
                   native_tracebacks=False)
