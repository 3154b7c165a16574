"""Running tasks (their start times estimated between detail reads) and tasks waiting to run."""

from __future__ import annotations

import asyncio
import logging
import time

from verltop.analysis import roles as R
from verltop.analysis.snapshot_build import group_key, running_task_rows
from verltop.engine.polling import PollState
from verltop.model import RawActor, RawTask
from verltop.model.evolve import evolve
from verltop.sources import dashboard as D

log = logging.getLogger("verltop.engine")

FAILURE_READ_S = 10.0
GAP_INTERVALS = 2.5  # polls further apart than this many intervals: a new task's start is not estimated
# how often the estimates are put right while new calls keep coming: an estimate is off by half an interval
# (and Ray's task events' flush, ~1 s); the stall rules' windows are tens of seconds. A read is 1.6 MB at
# 1,024 ranks (~80 ms of CPU): every 30 s it was a twentieth of the refresh
TASK_DETAIL_REFRESH_S = 120.0


class TaskPolls(PollState):
    """The running and waiting tasks."""

    async def _poll_tasks(self) -> None:
        """Running tasks. Start times need the detail rows (3x the bytes, 1.6 MB at 1,024 ranks): a task that
        appeared since the last poll started within its interval, whose middle is its start's estimate (off by
        at most half the interval). The detail rows are read when that does not hold for the unknown tasks (the
        first poll; a gap since the last poll, which failed or was paused) and, while unknown tasks keep
        appearing, every ``TASK_DETAIL_REFRESH_S`` to put the estimates right."""
        now = time.time()
        starts = self._task_starts
        since = now - (self._task_detail_at or 0)
        r = await D.fetch_running_tasks(self.client, self.iv.timeout_s, detail=self._task_detail_at is None)
        detailed = self._task_detail_at is None
        if r.ok and not detailed:
            unknown = [t for t in r.value or [] if t.task_id not in starts]
            gap = r.taken_at - (self._last_task_poll or 0) > GAP_INTERVALS * self.iv.tasks_s
            if unknown and (gap or since > TASK_DETAIL_REFRESH_S):
                r = await D.fetch_running_tasks(self.client, self.iv.timeout_s, detail=True)
                detailed = True
        if not self._record(self.src.tasks, r):
            return
        if r.unchanged and not detailed:
            self.src.tasks.value = list(self._task_objs.values())
            self._last_task_poll = r.taken_at
            await self._hist_ready()
            self.timeline.tracker.polled(r.taken_at)  # nothing started or ended up to now
            self.timeline.maybe_refine(self._actor_map, self._hist_ready)  # a step stuck this long?
            self._read_failed(dict(self._short_handed), r.taken_at)  # still short-handed: read again in a while
            return
        rows = r.value or []
        if detailed:
            self._task_detail_at = r.taken_at
            starts.clear()
            starts.update({t.task_id: t.start_time_ms for t in rows if t.start_time_ms})
        prev = self._last_task_poll or r.taken_at
        guess = (prev + r.taken_at) / 2 * 1000
        fixed = []
        objs = self._task_objs
        for t in rows:
            if t.start_time_ms is None:
                if t.task_id not in starts:
                    starts[t.task_id] = guess
                old = objs.get(t.task_id)
                # the same task as last poll keeps its object (no copy per task per poll)
                if old is not None and old.worker_pid == t.worker_pid and old.start_time_ms == starts[t.task_id]:
                    t = old
                else:
                    t = evolve(t, start_time_ms=starts[t.task_id])
            fixed.append(t)
        live = {t.task_id for t in rows}
        for k in [k for k in starts if k not in live]:
            del starts[k]
        self._task_objs = {t.task_id: t for t in fixed}
        self._last_task_poll = r.taken_at
        self.src.tasks.value = fixed
        actors = self._actor_map()  # shared: read only
        await self._hist_ready()
        self.tasks_truncated = r.truncated  # shown beside the actors' (more than 10,000 running, or events lost)
        whole = D.complete(r)
        rows = running_task_rows(tuple(fixed), actors)
        self._check_failures(rows, objs, r.taken_at, actors)
        self.hist.observe(rows, r.taken_at, complete=whole)
        self.timeline.observe(fixed, actors, r.taken_at, complete=whole)
        self.work.note(fixed, actors)
        self.timeline.maybe_refine(self._actor_map, self._hist_ready)

    def _check_failures(self, rows: list[tuple], before: dict[str, RawTask], now: float,
                        actors: dict[str, RawActor] | None = None) -> None:
        """A call that ended while its peers' calls of the same method run on may have failed in their
        collective (a timeout waiting for the one still running), and a worker group's call that runs on fewer
        ranks than the group has may have failed on the others before any poll saw it (an OOM at its first
        allocation): read that method's FAILED calls, at most once per ``FAILURE_READ_S`` per method."""
        live = {(g, m) for _, _, g, m, _ in rows}
        seen = {t for t, *_ in rows}
        names: dict[str, str | None] = {}
        for tid, run in self.hist.running.items():
            if tid not in seen and (run.group, run.method) in live:
                t = before.get(tid)
                names[run.method] = t.name if t is not None else None
        actors = actors or {}
        last = self._group_sizes  # worked out once per actors' list, not per poll
        if last is None or last[0] is not actors:
            last = self._group_sizes = (actors, group_sizes(actors))
        self._short_handed = short_handed(rows, actors, self._task_objs, last[1])
        for method, name in self._short_handed.items():
            names.setdefault(method, name)
        self._read_failed(names, now)

    def _read_failed(self, names: dict[str, str | None], now: float) -> None:
        """Read the FAILED calls of these methods (``method → task name``), each at most once per
        ``FAILURE_READ_S``."""
        for method, name in names.items():
            if now - self._failure_reads.get(method, 0.0) < FAILURE_READ_S:
                continue
            self._failure_reads[method] = now

            async def read_failed(n: str | None = name) -> None:
                await self.read_failures(n)

            self._tasks[:] = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.create_task(self._guarded(read_failed, None)))

    async def _poll_waiting(self) -> None:
        """Tasks submitted and not yet running (their count per group; retries among them)."""
        r = await D.fetch_waiting_tasks(self.client, self.iv.timeout_s)
        if not r.ok:
            return  # the running-task poll reports the dashboard's problems; this one only adds detail
        if r.unchanged:
            return
        self.waiting = r.value or []
        self.work.note(self.waiting, self._actor_map())
        self._dirty.set()


def group_sizes(actors: dict[str, RawActor]) -> dict[str, int]:
    """How many live ranks each worker group has."""
    size: dict[str, int] = {}
    for a in actors.values():
        ident = R.identity(a)
        if a.state == "ALIVE" and ident.worker_group is not None:
            g = group_key(ident, a.class_name)
            size[g] = size.get(g, 0) + 1
    return size


def short_handed(rows: list[tuple], actors: dict[str, RawActor], tasks: dict[str, RawTask],
                 sizes: dict[str, int] | None = None) -> dict[str, str | None]:
    """Methods that a worker group's live ranks run on fewer ranks than it has (``method → task name``);
    ``sizes``: ``group_sizes(actors)`` where the caller keeps it."""
    running: dict[tuple[str, str], set[str | None]] = {}
    name: dict[str, str | None] = {}
    for tid, aid, g, m, _ in rows:
        running.setdefault((g, m), set()).add(aid)
        t = tasks.get(tid)
        name[m] = t.name if t is not None else None
    if not running:
        return {}
    size = group_sizes(actors) if sizes is None else sizes
    return {m: name[m] for (g, m), aids in running.items() if len(aids) < size.get(g, 0)}
