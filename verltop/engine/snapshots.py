"""The joined view: the sources' last values as ``ClusterData``, and the ``Snapshot`` built from it."""

from __future__ import annotations

import asyncio
import logging
import operator
from dataclasses import replace
from typing import Any

from verltop.analysis.oom import gone_rows
from verltop.analysis.slow_ranks import slow_ranks
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.engine.memory_book import verl_peaks
from verltop.engine.polling import PollState
from verltop.model import ActorRow, Node, ProcStat, Snapshot, SourceStatus, TrainingView
from verltop.sources.local import LocalSample

log = logging.getLogger("verltop.engine")
_ID = operator.attrgetter("actor_id")


class SnapshotBuilding(PollState):
    """The joined view of every source."""

    def data(self, now: float | None = None) -> ClusterData:
        now = self.clock() if now is None else now
        nodes: list[Node] = list(self.src.nodes.value or [])
        if self.node_details:
            nodes = [self._merged(n, self.node_details[n.node_id]) if n.node_id in self.node_details else n
                     for n in nodes]
            if len(self._merged_nodes) > len(self.node_details):  # nodes whose details are no longer read
                for nid in [k for k in self._merged_nodes if k not in self.node_details]:
                    del self._merged_nodes[nid]
        ls: LocalSample | None = self.src.local.value
        procs: dict[int, ProcStat] = ls.procs if ls else {}
        statuses = [s.status(now) for s in self.src.all()
                    if (s is not self.src.local or self.use_local) and (s is not self.src.engine or s.error)]
        if self.remote.asked:  # no age: a node off screen is not re-read, and that is not staleness
            statuses.append(SourceStatus("processes", None, self.remote.error))
        # pending work's own line only when the actors' read is fine (else it repeats the same problem)
        if not self.pending.unsupported and self.src.actors.error is None:
            statuses.append(self.pending.state.status(now))
        return ClusterData(
            address=self.endpoint.address,
            actors=tuple(self.src.actors.value or ()),
            tasks=tuple(self.src.tasks.value or ()),
            nodes=tuple(nodes),
            local_node_ids=self.local_node_ids(),
            local_procs=procs,
            local_gpus=ls.gpus if ls else None,
            local_gpu_error=ls.gpu_error if ls else None,
            sources=tuple(statuses),
            truncated="; ".join(t for t in (self.truncated, self.tasks_truncated) if t) or None,
            ras=self.ras,
            local_tree=ls.tree if ls else None,
            remote_trees=tuple(self.remote.trees.values()),
            pending=self.pending.data(),
        )

    def _merged(self, n: Node, d: Node) -> Node:
        """``_with_detail``, the same object while the node's summary and its detail read are."""
        m = self._merged_nodes.get(n.node_id)
        if m is None or m[0] is not n or m[1] is not d:
            m = self._merged_nodes[n.node_id] = (n, d, _with_detail(n, d))
        return m[2]

    async def snapshot_async(self, now: float | None = None) -> Snapshot:
        """``snapshot`` with the analysis in a worker thread; polls that would change the history wait
        for it (``_hist_ready``), so the thread never reads a history being written. One build at a time
        (the publisher's and ``publish_now``'s): a second waits, then builds from what is new by then."""
        async with self._building:
            now = now if now is not None else self.clock()
            data = self.data(now)
            self._hist_free.clear()
            try:
                return await asyncio.to_thread(self._build, data, now)
            finally:
                self._hist_free.set()

    def _build(self, data: ClusterData, now: float) -> Snapshot:
        """The joined view, with the step timeline, the trends' marks and the pending work."""
        snap = build_snapshot(data, self.hist, now, self.stall, self._row_memo)
        self.trends.record(snap.actors, now)
        actors = dict(zip(map(_ID, data.actors), data.actors, strict=True))
        steps = self.timeline.steps(now, snap.actors)
        training = self.training_view()
        rollout = self.rollout.view(map(_ID, snap.actors))
        peaks = verl_peaks(training.metrics, training.last_step) if training is not None else ()
        # by phase where a view shows it, or an OOM verdict's peers are read from it
        gone = gone_rows(snap.actors)
        phases = self.memory_phases or bool(self.hist.ooms) or bool(gone)
        memory = self.memory.view(steps, snap.actors, rollout, peaks, phases)
        return replace(snap, steps=steps, work=self.work.summary(self.waiting, actors, snap.actors),
                       training=training, slow_ranks=slow_ranks(steps, snap.actors), rollout=rollout,
                       memory=self.oom_book.view(memory, snap.actors, self.hist, steps, now,
                                                 lambda row, phase: self.memory.lead_up(steps, row, phase), gone))

    def show_memory_phases(self, on: bool) -> None:
        if on and not self.memory_phases:
            self._dirty.set()  # the screen that shows them waits for the next build
        self.memory_phases = on

    def training_view(self) -> TrainingView | None:
        """verl's metrics as read so far (the metrics poller overrides this)."""
        return None

    def trend(self, actor_id: str, now: float | None = None) -> Any:
        """The actor's trend rings (``analysis.trends.Trend``), or None."""
        return self.trends.trend(actor_id, self.clock() if now is None else now)

    def snapshot(self, now: float | None = None) -> Snapshot:
        now = now if now is not None else self.clock()
        return self._build(self.data(now), now)

    def rows_by_id(self, now: float | None = None) -> dict[str, ActorRow]:
        """The current rows (fresh role names included), for a dump that learnt them while it ran."""
        return {a.actor_id: a for a in self.snapshot(now).actors}


def _with_detail(n: Node, d: Node) -> Node:
    """A node's identity with the stats of its (fresher) /nodes/{id} read."""
    return replace(n, cpu_percent=d.cpu_percent if d.cpu_percent is not None else n.cpu_percent,
                   mem_used_bytes=d.mem_used_bytes or n.mem_used_bytes, mem_total_bytes=d.mem_total_bytes or n.mem_total_bytes,
                   gpus=d.gpus or n.gpus, stats_age_s=d.stats_age_s, procs=d.procs,
                   object_store_used_bytes=_first(d.object_store_used_bytes, n.object_store_used_bytes),
                   object_store_total_bytes=_first(d.object_store_total_bytes, n.object_store_total_bytes),
                   object_store_spilled_bytes=_first(d.object_store_spilled_bytes, n.object_store_spilled_bytes))


def _first(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b
