"""``verltop doctor``, start to end: the dashboard's node list, a probe on every alive node (``sources.probe_runner``)
reading its facts (``sources.node_check``), the clock offsets, the shared-directory round trip, then the pure
judgement (``analysis.doctor``). The CLI and the TUI's nodes view both run this job.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from verltop.analysis.doctor import NodeFacts, build_report
from verltop.convert import one_line
from verltop.model import DoctorReport, Node, Problem
from verltop.sources import node_check
from verltop.sources.dashboard import fetch_nodes, fetch_profiling_enabled
from verltop.sources.http import DashboardClient
from verltop.sources.probe_connect import watch_cluster_of
from verltop.text.doctor import profiling_note, value_text

log = logging.getLogger("verltop.doctor")

CLOCK_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class DoctorProgress:
    """Where a check stands: ``done`` of ``total`` nodes have answered (or failed)."""

    stage: str  # "nodes" | "connect" | "probe" | "path" | "done" | "failed"
    done: int = 0
    total: int = 0
    node: str | None = None  # the IP of the node that just answered
    report: DoctorReport | None = None
    problem: Problem | None = None


ProgressFn = Callable[[DoctorProgress], None]


class DoctorJob:
    """One check of every alive node. ``await run()`` returns the report, or ``None`` when the check could not
    run at all (``problem`` says why: dashboard down, no Ray, no probe). It never raises but for cancellation,
    which kills the probes."""

    def __init__(self, client: DashboardClient, path: str | None = None, node_timeout_s: float = 30.0,
                 on_progress: ProgressFn | None = None, probe_address: str = "auto",
                 clock: Callable[[], float] = time.time, runner: Any = None) -> None:
        self.client = client
        watch_cluster_of(client.endpoint.address)
        self.path = path
        self.node_timeout_s = node_timeout_s
        self.on_progress = on_progress
        self.probe_address = probe_address
        self.clock = clock
        self.runner = runner  # a sources.probe_runner.NodeRunner; made on run() when not given
        self.report: DoctorReport | None = None
        self.problem: Problem | None = None
        self.stage = "new"
        self.total = 0
        self.done = 0
        self.elapsed_s: float | None = None

    def _emit(self, stage: str, node: str | None = None) -> None:
        self.stage = stage
        if self.on_progress is not None:
            self.on_progress(DoctorProgress(stage, self.done, self.total, node, self.report, self.problem))

    def _fail(self, problem: Problem) -> None:
        self.problem = problem
        self._emit("failed")

    async def run(self) -> DoctorReport | None:
        t0 = time.perf_counter()
        try:
            report = await self._run()
        except asyncio.CancelledError:
            self.stage = "cancelled"
            raise
        except Exception as e:
            log.error("doctor failed", exc_info=True)
            self._fail(Problem("internal", f"the check failed: {e.__class__.__name__}: {one_line(e, 200)}"))
            return None
        self.elapsed_s = time.perf_counter() - t0
        if report is not None:
            self.report = replace(report, elapsed_s=self.elapsed_s)
            self._emit("done")
        return self.report

    async def _run(self) -> DoctorReport | None:
        self._emit("nodes")
        if self.runner is None:
            from verltop.sources.probe_runner import NodeRunner  # imports ray: only here, only when asked

            self.runner = NodeRunner(self.probe_address)
        runner = self.runner
        # joining the cluster (ray's import, ray.init) is most of the start: it goes on while the dashboard
        # lists the nodes; that they are the cluster joined is checked once both are in
        joining = asyncio.create_task(runner.connect(()))
        profiling = asyncio.create_task(fetch_profiling_enabled(self.client))
        try:
            r = await fetch_nodes(self.client)
        except BaseException:
            joining.cancel()
            profiling.cancel()
            raise
        if not r.ok or r.value is None:
            joining.cancel()
            assert r.error is not None
            self._fail(r.error.with_message(f"cannot list the cluster's nodes: {r.error.message}"))
            return None
        alive = [n for n in r.value if n.state == "ALIVE"]
        dead = len(r.value) - len(alive)
        if not alive:
            joining.cancel()
            self._fail(Problem("no_nodes", "the dashboard lists no alive node", "start the cluster (`ray start`)"))
            return None
        self.total = len(alive)
        self._emit("connect")
        problem = await joining
        if problem is None:
            problem = await runner.connect(n.node_id for n in alive)  # joined: only checks the node ids
        if problem is not None:
            self._fail(problem)
            return None
        runner.start(n.node_id for n in alive)  # every probe's worker starts now, in parallel
        notes = (f"{dead} dead node(s) listed by the dashboard were not checked",) if dead else ()
        prof = await profiling
        note = profiling_note(prof.value if prof.ok else None)
        notes += (note,) if note else ()
        try:
            self._emit("probe")
            facts = list(await asyncio.gather(*(self._probe(n) for n in alive)))
            if all(f.error is not None for f in facts):  # not one probe ran: the check could not run at all
                first = facts[0].error
                assert first is not None
                self._fail(first.with_message(f"no node could be checked ({len(facts)} tried): {first.message}"))
                return None
            facts, clock_note = _against_head(facts)
            notes += clock_note
            if self.path is not None:
                self._emit("path")
                facts = await self._shared_dir(facts, self.path)
        finally:
            await runner.close()
        return build_report(facts, self.clock(), value_text, self.path, notes=notes)

    async def _probe(self, n: Node) -> NodeFacts:
        runner = self.runner
        rn = runner.nodes.get(n.node_id)
        base = NodeFacts(n.node_id, n.ip or (rn.ip if rn else None), n.hostname or (rn.hostname if rn else None),
                         n.is_head, rn.gpus if rn else 0.0)
        # the node's own parts stop in time to be reported, within the node's timeout (worker start included);
        # the clock is read meanwhile (its best round trip of the samples counts: the first waits for the probe)
        (facts, err), best = await asyncio.gather(
            runner.call(n.node_id, self.node_timeout_s, node_check.collect, rn.session_dir if rn else None,
                        max(3.0, self.node_timeout_s * 0.6)),
            self._clock(n.node_id))
        if err is None:
            base = replace(base, facts=facts, clock_rtt_s=best[0] if best else None,
                           clock_offset_s=best[1] if best else None)
        else:
            base = replace(base, error=err)
        self.done += 1
        self._emit("probe", base.ip)
        return base

    async def _clock(self, node_id: str) -> tuple[float, float] | None:
        """(round trip, offset against this machine) of the fastest of ``CLOCK_SAMPLES`` reads of the node's
        clock after the first (which waits for the probe to start), or None when none came back."""
        best: tuple[float, float] | None = None
        for i in range(CLOCK_SAMPLES + 1):
            t0 = self.clock()
            tp, e = await self.runner.call(node_id, self.node_timeout_s, node_check.now)
            t1 = self.clock()
            if e is not None:
                if i == 0:
                    return None  # no probe there: collect says why
                continue
            if i and (best is None or t1 - t0 < best[0]):
                best = (t1 - t0, tp - (t0 + t1) / 2)
        return best

    async def _shared_dir(self, facts: list[NodeFacts], path: str) -> list[NodeFacts]:
        """Every node writes a file there; every other node reads it back; each removes its own."""
        runner = self.runner
        run_id = uuid.uuid4().hex[:12]
        ok = [f for f in facts if f.error is None]
        names = {f.node_id: f".verltop-doctor-{run_id}-{f.node_id[:12]}" for f in ok}
        content = {f.node_id: f"verltop doctor {run_id} written by node {f.node_id}\n" for f in ok}

        async def write(f: NodeFacts) -> tuple[str, Any]:
            v, e = await runner.call(f.node_id, self.node_timeout_s, node_check.write_marker, path, names[f.node_id],
                                     content[f.node_id])
            return f.node_id, v if e is None else {"ok": False, "error": e.message}

        wrote = dict(await asyncio.gather(*(write(f) for f in ok)))
        writers = [nid for nid, w in wrote.items() if w.get("ok")]
        try:
            async def read(f: NodeFacts) -> tuple[str, dict[str, str] | None]:
                want = {names[w]: content[w] for w in writers if w != f.node_id}
                if not want:
                    return f.node_id, {}
                v, e = await runner.call(f.node_id, self.node_timeout_s, node_check.read_markers, path, want)
                if e is not None or "seen" not in v:
                    why = e.message if e is not None else str(v.get("error"))
                    return f.node_id, {w: f"not read ({why})" for w in writers if w != f.node_id}
                by_name = {names[w]: w for w in writers}
                return f.node_id, {by_name[k]: s for k, s in v["seen"].items()}

            seen = dict(await asyncio.gather(*(read(f) for f in ok)))
        finally:
            await asyncio.shield(asyncio.gather(*(runner.call(w, 5.0, node_check.remove_marker, path, names[w])
                                                  for w in writers)))
        return [replace(f, path_write=wrote[f.node_id], path_read=seen[f.node_id]) if f.node_id in wrote else f
                for f in facts]


def _against_head(facts: list[NodeFacts]) -> tuple[list[NodeFacts], tuple[str, ...]]:
    """Offsets measured against this machine, re-based on the head node's clock (when the head answered)."""
    head = next((f for f in facts if f.is_head and f.clock_offset_s is not None), None)
    if head is None:
        return facts, ("clock offsets are against this machine's clock: the head node did not answer",)
    base = head.clock_offset_s or 0.0
    return [replace(f, clock_offset_s=f.clock_offset_s - base) if f.clock_offset_s is not None else f
            for f in facts], ()


__all__ = ["DoctorJob", "DoctorProgress"]
