"""The engine's side of the step timeline, the trends and the pending work.

The timeline costs the polls nothing: it is fed from the RUNNING-task answers the engine reads anyway and
from the finished tasks it reads once at start. Only when a step completes does it read Ray's finished
tasks, a few small, filtered requests planned by ``analysis.timeline_reads.ReadPlanner.plan`` within a budget of
rows, one round at a time, off the poll loops.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from verltop.analysis import roles as R
from verltop.analysis.snapshot_build import group_key
from verltop.analysis.steps import median_step_s, segment, steps_of
from verltop.analysis.timeline import Finished, Observed, StepTracker
from verltop.analysis.timeline_reads import NAME_ROWS_BUDGET, Query, ReadPlanner
from verltop.analysis.trends import Trend, Trends
from verltop.model import ActorRow, GroupWork, RawActor, RawTask, Step
from verltop.sources import dashboard as D
from verltop.sources.aio import cancel_all
from verltop.sources.http import DashboardClient

log = logging.getLogger("verltop.engine")

# actors whose calls are not steps of the job: servers answer many small requests, the controller runs one
# long task, and "other" actors are not verl's
_NOT_STEPS = frozenset({"rollout_server", "controller", "other"})
MAX_RETRIED = 4096  # task ids remembered as retried
QUERY_CONCURRENCY = 2


@dataclass(slots=True)
class RefineStats:
    rounds: int = 0
    requests: int = 0
    rows: int = 0
    failed: int = 0
    last_ms: float = 0.0


def actor_group(a: RawActor, method: str | None = None) -> str | None:
    """The timeline's group of an actor's tasks (of ``method``), or None when its calls are not job steps. A
    rollout server's weight sync is the step's: the trainer waits on it, and the header names its phase."""
    ident = R.identity(a)
    if ident.base_role in _NOT_STEPS:
        if ident.base_role == "rollout_server" and method is not None and R.phase_of_method(method) == "weight_sync":
            return group_key(ident, a.class_name)
        return None
    return group_key(ident, a.class_name)


def _syncs(a: RawActor) -> bool:
    """An actor some of whose calls are steps' (a rollout server: its weight sync)."""
    return R.identity(a).base_role == "rollout_server"


class Timeline:
    """Steps from the polls, made exact from Ray's task events when a step completes."""

    def __init__(self, client: DashboardClient, timeout_s: float = 10.0, enabled: bool = True) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.enabled = enabled
        # finished runs this reads, handed on (the stall medians: a long-running view knows what a fresh start does)
        self.on_finished: Callable[[list[RawTask]], None] | None = None
        self.tracker = StepTracker()
        self.planner = ReadPlanner(self.tracker)
        self.stats = RefineStats()
        self._task: asyncio.Task | None = None
        self._planned_version = -1
        self._ignored: set[str] = set()  # running task ids that are no step's (servers, the controller)
        self._groups: dict[str, tuple[RawActor, str | None]] = {}
        self._methods: dict[str, str] = {}
        self._cache: tuple | None = None  # (tracker version, segments, finished steps, rank_of)
        self._last_ids: set[str] = set()
        self._skip_actors: set[str] = set()
        self._stuck_done: float | None = None  # the running step whose finished calls were read already

    # ---------------------------------------------------------- feeding (event loop, history gate held)

    def observe(self, tasks: Iterable[RawTask], actors: dict[str, RawActor], now: float, complete: bool) -> None:
        if not self.enabled:
            return
        tasks = list(tasks)
        ids = {t.task_id for t in tasks}
        fresh = ids - self._last_ids  # set arithmetic in C: only tasks not in the last poll are looked at
        later: set[str] = set()  # tasks of actors not listed yet: looked at again next poll
        tr, ign = self.tracker, self._ignored
        rows: list[Observed] = []
        skip = self._skip_actors
        for t in tasks if fresh else ():
            tid = t.task_id
            if tid not in fresh or t.actor_id in skip or tid in ign or tr.knows(tid):
                continue
            a = actors.get(t.actor_id or "")
            if a is None:
                if t.actor_id:
                    later.add(tid)
                else:
                    ign.add(tid)  # a plain task
                continue
            method = self._methods.get(t.func_name)
            if method is None:
                method = self._methods[t.func_name] = R.method_of(t.func_name) or t.name
            g = self._group(a)
            if g is None and _syncs(a):
                g = actor_group(a, method)
                if g is None:
                    ign.add(tid)  # a server's request
                    continue
            if g is None:
                skip.add(a.actor_id)  # the controller's: none of its tasks is a step's
                continue
            if R.phase_of_method(method) is None:
                ign.add(tid)
                continue
            rows.append((tid, t.actor_id, g, method, t.name, t.start_time_ms / 1000.0 if t.start_time_ms else None))
        self._last_ids = ids - later if later else ids
        if len(ign) > 2 * len(ids) + 64:
            self._ignored = ign & ids
        if len(self._methods) > 4096:
            self._methods.clear()
        tr.observe(rows, now, complete, seen=ids)

    def _group(self, a: RawActor) -> str | None:
        hit = self._groups.get(a.actor_id)
        if hit is not None and hit[0] is a:
            return hit[1]
        if len(self._groups) > 65536:
            self._groups.clear()
        g = actor_group(a)
        self._groups[a.actor_id] = (a, g)
        return g

    def add_finished(self, tasks: Iterable[RawTask], actors: dict[str, RawActor]) -> int:
        """Finished runs with exact times (the start-up seed, refinement answers)."""
        if not self.enabled:
            return 0
        rows: list[Finished] = []
        for t in tasks:
            a = actors.get(t.actor_id or "")
            if a is None or t.state != "FINISHED" or not t.start_time_ms or not t.end_time_ms:
                continue
            method = R.method_of(t.func_name) or t.name
            g = actor_group(a, method)
            if g is None:
                continue
            rows.append((t.task_id, t.actor_id, g, method, t.name,
                         t.start_time_ms / 1000.0, t.end_time_ms / 1000.0))
        return self.tracker.add_exact(rows)

    # ---------------------------------------------------------- refinement

    def maybe_refine(self, actors: Callable[[], dict[str, RawActor]], gate: Callable[[], Awaitable[None]]) -> None:
        """Start a refinement round if a step completed since the last plan and none is running."""
        if not self.enabled or (self._task is not None and not self._task.done()):
            return
        queries: list[Query] = []
        calls: list = []
        through = self.planner.checked_until_s
        if self.tracker.version != self._planned_version:
            self._planned_version = self.tracker.version
            queries, calls, through = self.planner.plan()
        if not calls and not queries:
            queries, calls, through = self._stuck_step()
        if not calls and not queries:
            return
        if not queries:
            self.planner.refined(calls, through)
            return
        self._task = asyncio.create_task(self._round(queries, calls, through, actors, gate),
                                         name="verltop-timeline-refine")

    def _stuck_step(self) -> tuple[list[Query], list, float]:
        """The running step, once it has run three times the median step: its finished calls made exact."""
        cache = self._cache
        if cache is None or len(cache[2]) < 3 or not cache[1]:
            return [], [], self.planner.checked_until_s
        med = median_step_s(cache[2])
        started = cache[1][-1][0].start_s
        now = self.tracker.last_poll_s or 0.0
        if med is None or started == self._stuck_done or now - started < 3 * med:
            return [], [], self.planner.checked_until_s
        self._stuck_done = started
        return self.planner.plan_current()

    async def _round(self, queries: list[Query], calls: list, through: float,
                     actors: Callable[[], dict[str, RawActor]], gate: Callable[[], Awaitable[None]]) -> None:
        import time

        t0 = time.perf_counter()
        sem = asyncio.Semaphore(QUERY_CONCURRENCY)

        async def one(q: Query) -> D.Result:
            async with sem:
                # a name read is cut at the budget (Ray cuts after sorting by id: a sample, and its total)
                return await D.fetch_finished_runs(self.client, name=q.name, actor_id=q.actor_id, task_id=q.task_id,
                                                   limit=NAME_ROWS_BUDGET if q.task_id is None else 16,
                                                   timeout_s=self.timeout_s)

        try:
            results = await asyncio.gather(*(one(q) for q in queries))
            await gate()
            got: list[RawTask] = []
            for q, r in zip(queries, results, strict=True):
                self.stats.requests += 1
                if not r.ok or r.value is None:
                    self.stats.failed += 1
                    continue
                rows, total = r.value
                got += rows
                if q.task_id is None and total is not None:
                    self.tracker.record_rows(q.name, q.actor_id, total)
            self.stats.rows += len(got)
            self.add_finished(got, actors())  # at once: each call touched is recomputed once
            if self.on_finished is not None:
                self.on_finished(got)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.error("timeline refinement failed", exc_info=True)
        finally:
            self.planner.refined(calls, through)
            self.stats.rounds += 1
            self.stats.last_ms = (time.perf_counter() - t0) * 1000

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_all((self._task,))

    async def wait(self) -> None:
        """Until the running refinement round (if any) is over (tests, one-shot snapshots)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    # ---------------------------------------------------------- reading (any thread, history gate held)

    def steps(self, now: float, rows: Iterable[ActorRow]) -> tuple[Step, ...]:
        """The last steps at ``now``. Finished steps change only when the calls do (a poll that saw a task
        start or end, exact rows): they are rebuilt then; the running one at every snapshot."""
        if not self.enabled:
            return ()
        tr = self.tracker
        cache = self._cache
        if cache is None or cache[0] != tr.version:
            rank = {a.actor_id: a.rank for a in rows}
            rank_of = (lambda aid: rank.get(aid or ""))  # noqa: E731
            segs = segment(tr.views())
            start_at = max(0, len(segs) - tr.keep_steps)
            done = steps_of(segs, range(start_at, len(segs) - 1), now, tr.first_index, rank_of)
            cache = self._cache = (tr.version, segs, done, rank_of)
        _, segs, done, rank_of = cache
        if not segs:
            return ()
        return done + steps_of(segs, (len(segs) - 1,), now, tr.first_index, rank_of)


class Work:
    """Pending tasks and retries per worker group, and restart counts."""

    def __init__(self) -> None:
        self.retried: OrderedDict[tuple[str, int], str] = OrderedDict()  # (task id, attempt) -> group

    def note(self, tasks: Iterable[RawTask], actors: dict[str, RawActor]) -> None:
        """Remember retry attempts (attempt > 0; each is a row of its own in Ray) from any task read."""
        for t in tasks:
            if t.attempt > 0 and (t.task_id, t.attempt) not in self.retried:
                self.retried[(t.task_id, t.attempt)] = _group_of(t, actors)
                while len(self.retried) > MAX_RETRIED:
                    self.retried.popitem(last=False)

    def summary(self, pending: Iterable[RawTask], actors: dict[str, RawActor], rows: Iterable[ActorRow]
                ) -> tuple[GroupWork, ...]:
        counts: dict[str, list[int]] = {}
        for t in pending:
            counts.setdefault(_group_of(t, actors), [0, 0, 0])[0] += 1
        for g in self.retried.values():
            counts.setdefault(g, [0, 0, 0])[1] += 1
        for a in rows:
            if a.num_restarts:
                counts.setdefault(a.worker_group or a.role, [0, 0, 0])[2] += a.num_restarts
        return tuple(GroupWork(g, *v) for g, v in sorted(counts.items()))


def _group_of(t: RawTask, actors: dict[str, RawActor]) -> str:
    """The table's group of a task: its actor's worker group (or role); plain tasks are "tasks"."""
    a = actors.get(t.actor_id or "")
    if a is None:
        return "tasks"
    ident = R.identity(a)
    if ident.worker_group:
        return ident.worker_group
    role = ident.base_role
    return role if role != "colocated" else R.short_class(a.class_name)


class TrendStore:
    """The trends behind a lock: snapshots are built in a worker thread, and on the event loop for one-offs."""

    def __init__(self) -> None:
        self.trends = Trends()
        self._lock = threading.Lock()

    def record(self, rows: Iterable[ActorRow], now: float) -> None:
        with self._lock:
            self.trends.record(rows, now)

    def trend(self, actor_id: str, now: float) -> Trend | None:
        with self._lock:
            return self.trends.trend(actor_id, now)
