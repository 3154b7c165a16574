"""The step timeline's memory: worker-group calls as the polls saw them, made exact by Ray's task events.

Finished tasks cannot be read by time (Ray 2.60 filters only ``=``/``!=`` on job, actor, name, state and
task id, and sorts by task id before cutting), so the timeline is built in three tiers:

1. **Observed**, for free: the engine's poll of RUNNING tasks. A run starts when first seen (the middle of
   that poll interval, unless a detail read gave its start) and ends between the last poll that saw it and
   the first that did not (the middle again: error at most half a poll).
2. **Exact**, when a step completes: per method, Ray's task events (start and end to the millisecond),
   read with the source-side filters, within a budget of rows (``plan``): the ``name`` filter while Ray holds
   few runs of that method, else one rank's runs (``name`` + ``actor_id``), else single tasks by id (the
   first rank to start, the first and last to finish). A call no poll saw (shorter than a poll) is found only by the
   first two.
3. **Seeded** at start from the finished tasks the engine reads once.

Everything is bounded: the last ``KEEP_STEPS`` steps; per-rank runs only for calls not yet settled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from verltop.analysis.roles import phase_of_method
from verltop.analysis.steps import CallView, build_steps, segment
from verltop.model import Step

KEEP_STEPS = 32
MAX_CALLS = 2000  # a job whose calls never form steps (no updates) must not grow it
NAME_ROWS_BUDGET = 256  # rows (about 2.3 KB each at detail=1) one finished-task query may match
TASK_QUERIES_PER_CALL = 3  # exact times for the extremes of a call no cheaper query covers
RESCAN_ROUNDS = 16  # a group's methods are listed again this many refinement rounds later (new ones: save)
EPS = 1e-6
INF = float("inf")
# Ray's workers report task events about once a second (task_events_report_interval_ms): a task may still
# read RUNNING that long after it ended, so "seen running" bounds its end from below only this much earlier
EVENT_LAG_S = 1.0


class Run(NamedTuple):
    """One rank's run of a method. A tuple of plain values: the garbage collector leaves thousands of them
    (one per rank per call) out of its scans."""

    task_id: str
    actor_id: str | None
    start_s: float
    end_s: float | None = None  # None while running
    end_lo_s: float = 0.0  # it still ran then (the exact end, once known)
    exact: bool = False
    start_hi_s: float | None = None  # first seen running (the start lies before); None once exact


_new = tuple.__new__  # a Run without NamedTuple's Python-level __new__ (thousands per phase change)


def _end(r: Run) -> float:
    return r.end_s  # type: ignore[return-value]


class Call:
    """Every rank's run of one method in one dispatch. Once settled, only its aggregates are kept."""

    __slots__ = ("_view", "end_lo_s", "exact", "first_end_s", "group", "last_end_s", "late_actor_id", "method", "n",
                 "name", "phase", "refined", "running", "runs", "start_hi_s", "start_s")

    def __init__(self, group: str, method: str, name: str, phase: str, start_s: float) -> None:
        self.group, self.method, self.name, self.phase = group, method, name, phase
        self.runs: dict[str, Run] | None = {}
        self.start_s = start_s
        self.start_hi_s: float | None = None  # the earliest time a run of it was surely running
        self.last_end_s: float | None = None  # of the runs that ended
        self.first_end_s: float | None = None
        self.end_lo_s = start_s
        self.n = 0
        self.running = 0
        self.late_actor_id: str | None = None
        self.exact = True
        self.refined = False
        self._view: CallView | None = None

    @property
    def end_s(self) -> float | None:
        return None if self.running else self.last_end_s

    def accepts(self, start_s: float, end_s: float | None) -> bool:
        """Does a run over ``[start_s, end_s]`` belong to this dispatch (it overlaps the call)?"""
        end = INF if self.running or self.last_end_s is None else self.last_end_s
        return self.runs is not None and start_s <= end + EPS and (INF if end_s is None else end_s) + EPS >= self.start_s

    def add(self, run: Run) -> None:
        assert self.runs is not None
        self.runs[run.task_id] = run
        self.n += 1
        self.start_s = min(self.start_s, run.start_s)
        self._hi(run)
        if run.end_s is None:
            self.running += 1
        else:
            self.running += 1
            self.finished(run)
        self._view = None

    def add_many(self, runs: list[Run]) -> None:
        """Runs seen running for the first time, all at once (a dispatch of 1,000 ranks in one poll)."""
        assert self.runs is not None
        self.runs.update((r.task_id, r) for r in runs)
        self.n += len(runs)
        self.running += len(runs)
        self.start_s = min(self.start_s, min(r.start_s for r in runs))
        hi = min(r.start_s if r.start_hi_s is None else r.start_hi_s for r in runs)
        if self.start_hi_s is None or hi < self.start_hi_s:
            self.start_hi_s = hi
        self._view = None

    def _hi(self, run: Run) -> None:
        hi = run.start_s if run.start_hi_s is None else run.start_hi_s
        if self.start_hi_s is None or hi < self.start_hi_s:
            self.start_hi_s = hi

    def finished_many(self, runs: list[Run]) -> None:
        """``runs`` (counted as running) ended."""
        self.running -= len(runs)
        first = min(runs, key=_end)
        last = max(runs, key=_end)
        if self.first_end_s is None or first.end_s < self.first_end_s:  # type: ignore[operator]
            self.first_end_s = first.end_s
        if self.last_end_s is None or last.end_s >= self.last_end_s:  # type: ignore[operator]
            self.last_end_s = last.end_s
            if not self.running:
                self.late_actor_id = last.actor_id
        self.end_lo_s = max(self.end_lo_s, max(r.end_lo_s for r in runs))
        self._view = None

    def finished(self, run: Run) -> None:
        """``run`` (counted as running) ended."""
        self.running -= 1
        e = run.end_s
        assert e is not None
        if self.first_end_s is None or e < self.first_end_s:
            self.first_end_s = e
        if self.last_end_s is None or e >= self.last_end_s:
            self.last_end_s = e
            if not self.running:
                self.late_actor_id = run.actor_id
        self.end_lo_s = max(self.end_lo_s, run.end_lo_s)
        self._view = None

    def _bounds_exact(self, rs: Iterable[Run]) -> bool:
        """Are the call's start, first end and last end Ray's own times (held by runs read exactly)? At
        scale only the ranks at the extremes are read; the others' estimates then take their times."""
        start = first = last = False
        for r in rs:
            if r.exact:
                start = start or r.start_s == self.start_s
                first = first or r.end_s == self.first_end_s
                last = last or r.end_s == self.last_end_s
        return start and (self.first_end_s is None or first) and (self.running > 0 or last)

    def update(self) -> None:
        """Recompute everything from the runs (after their times changed), in one pass."""
        runs = self.runs
        if not runs:
            return
        start = hi = INF
        first = last = lo = None
        late = None
        running = 0
        for r in runs.values():
            st = r[2]
            if st < start:
                start = st
            h = st if r[6] is None else r[6]
            if h < hi:
                hi = h
            e = r[3]
            if e is None:
                running += 1
                continue
            if first is None or e < first:
                first = e
            if last is None or e >= last:
                last, late = e, r[1]
            if lo is None or r[4] > lo:
                lo = r[4]
        self.n, self.running = len(runs), running
        self.start_s, self.start_hi_s = start, hi
        self.first_end_s, self.last_end_s = first, last
        self.end_lo_s = lo if lo is not None else start
        if not running:
            self.late_actor_id = late
        self._view = None

    def view(self) -> CallView:
        if self._view is None:
            if self.running and self.runs:  # one of those still running is the late one
                self.late_actor_id = next((r.actor_id for r in self.runs.values() if r.end_s is None), None)
            if self.runs:
                self.exact = self._bounds_exact(self.runs.values())
            self._view = CallView(self.group, self.method, self.phase, self.start_s, self.end_s, self.end_lo_s,
                                  self.first_end_s, self.n, self.running, self.late_actor_id, self.exact, self,
                                  self.start_hi_s)
        return self._view


@dataclass(frozen=True, slots=True)
class Query:
    """A finished-task read that makes calls exact: by ``task_id``, or by task ``name`` (and ``actor_id``)."""

    name: str | None = None
    actor_id: str | None = None
    task_id: str | None = None


# (task_id, actor_id, group, method, task name, start_s or None)
Observed = tuple[str, str | None, str, str, str, float | None]
# (task_id, actor_id, group, method, task name, start_s, end_s)
Finished = tuple[str, str | None, str, str, str, float, float]


class StepTracker:
    """Calls of the job's worker groups, kept for the last ``KEEP_STEPS`` steps."""

    def __init__(self, keep_steps: int = KEEP_STEPS) -> None:
        self.keep_steps = keep_steps
        self.calls: list[Call] = []
        self.by_key: dict[tuple[str, str], list[Call]] = {}
        self.live: dict[str, Call] = {}  # calls not yet settled, by the task id of each of their runs
        self._running: dict[str, Call] = {}  # of those, the runs the last poll saw running
        self._last_poll_s: float | None = None
        self.first_index = 1
        self.horizon_s = -INF  # exact rows older than this belong to steps already dropped
        self.checked_until_s = -INF  # completed steps that began before this were refined
        # rows Ray held for (name, actor) at the last read ((name, None): every rank's; (None, actor): all its tasks)
        self.name_rows: dict[tuple[str | None, str | None], int] = {}
        self.version = 0
        self._calls_at_trim = 0
        self.names: set[str] = set()  # every task name a call was made of
        self.new_names: set[str] = set()  # of those, names learnt since the last plan
        self.rounds = 0  # plans made
        self.scanned: dict[str, int] = {}  # group -> the round whose plan read one of its ranks' history

    # ---------------------------------------------------------- feeding

    def knows(self, task_id: str) -> bool:
        return task_id in self._running or task_id in self.live

    def observe(self, rows: Iterable[Observed], now: float, complete: bool = True,
                seen: set[str] | None = None) -> None:
        """One poll of RUNNING tasks. ``complete=False`` (a truncated list) finishes nothing. With ``seen``
        (every running task id of the poll), ``rows`` may hold only the tasks not known yet."""
        prev = self._last_poll_s if self._last_poll_s is not None else now
        rows = list(rows)
        if seen is None:
            seen = {r[0] for r in rows}
        touched: set[Call] = set()
        guess = (prev + now) / 2
        by_key: dict[tuple[str, str, str], list[Run]] = {}
        for tid, aid, group, method, name, start in rows:
            if tid in self._running or tid in self.live:
                continue
            s = guess if start is None else min(start, now)
            by_key.setdefault((group, method, name), []).append(_new(Run, (tid, aid, s, None, now, False, now)))
        for (group, method, name), runs in by_key.items():
            phase = phase_of_method(method)
            if phase is None:
                continue
            lst = self.by_key.get((group, method))
            call = lst[-1] if lst else None
            if call is None or call.runs is None or not call.running:  # a new dispatch (or one seen ending)
                call = self._place(group, method, name, phase, runs[0])
                if call is None:
                    continue
                self._running[runs[0].task_id] = call
                runs = runs[1:]
            if runs:  # the rest of a dispatch seen running: they all join it
                call.add_many(runs)
                ids = dict.fromkeys((r.task_id for r in runs), call)
                self.live.update(ids)
                self._running.update(ids)
            touched.add(call)
            if self.name_rows:
                for r in runs:
                    self._count(name, r.actor_id)
        if complete:
            gone: dict[Call, list[str]] = {}
            for tid in self._running.keys() - seen:
                gone.setdefault(self._running.pop(tid), []).append(tid)
            lo = prev - EVENT_LAG_S
            for call, tids in gone.items():
                runs = call.runs
                if runs is None:
                    continue
                ended = []
                for tid in tids:  # ended between the last poll and this one: the middle, ± half a poll
                    r = runs.get(tid)
                    if r is not None:
                        st = r[2]
                        e = guess if guess > st else st
                        r = runs[tid] = _new(Run, (tid, r[1], st, e, min(e, lo) if lo > st else st, r[5], r[6]))
                        ended.append(r)
                if ended:
                    call.finished_many(ended)
                    touched.add(call)
        self._last_poll_s = now
        self._touch(touched)

    @property
    def last_poll_s(self) -> float | None:
        return self._last_poll_s

    def polled(self, now: float) -> None:
        """A poll whose answer did not change: every running run still ran at ``now``."""
        self._last_poll_s = now

    def add_exact(self, rows: Iterable[Finished]) -> int:
        """Finished runs with Ray's own start and end (the seed, refinement answers). Known runs become exact;
        unknown ones are placed (a call no poll saw). Returns how many were new."""
        touched: set[Call] = set()
        refreshed: dict[Call, tuple[dict[float, float], dict[float, float]]] = {}
        new = 0
        for tid, aid, group, method, name, start, end in sorted(rows, key=lambda r: r[5]):
            call = self.live.get(tid)
            run = call.runs.get(tid) if call is not None and call.runs is not None else None
            if call is not None and run is not None:
                starts, ends = refreshed.setdefault(call, ({}, {}))
                if not run.exact:
                    starts.setdefault(run.start_s, start)
                    if run.end_s is not None:
                        ends.setdefault(run.end_s, end)
                call.runs[tid] = run._replace(start_s=start, end_s=end, end_lo_s=end, exact=True, start_hi_s=None)
                self._running.pop(tid, None)
                continue
            phase = phase_of_method(method)
            if phase is None or start < self.horizon_s or tid in self._running:
                continue
            call = self._place(group, method, name, phase, Run(tid, aid, start, end, end, True, None))
            if call is not None:
                touched.add(call)
                new += 1
        for c, (starts, ends) in refreshed.items():
            # ranks of one dispatch start together and end within a collective of each other: the runs the
            # polls saw start (end) in the same interval as one read exactly take its time as their estimate
            runs = c.runs
            if (starts or ends) and runs:
                for k, r in list(runs.items()):
                    if r[5]:  # exact
                        continue
                    st, en, hi = r[2], r[3], r[6]
                    ns = starts.get(st, st)
                    if hi is not None and hi < ns:
                        ns = hi
                    ne = ends.get(en, en) if en is not None else None
                    if ne is not None and ne < ns:
                        ne = ns
                    if ns != st or ne != en:
                        runs[k] = _new(Run, (r[0], r[1], ns, ne, r[4], False, hi))
            c.update()
        self._touch(touched | set(refreshed))
        return new

    def _place(self, group: str, method: str, name: str, phase: str, run: Run) -> Call | None:
        key = (group, method)
        lst = self.by_key.setdefault(key, [])
        call = None
        if lst and lst[-1].accepts(run.start_s, run.end_s):
            call = lst[-1]
        else:
            for c in reversed(lst):
                if c.runs is None:
                    if _overlaps(c, run):
                        return None  # a settled call: its summary is final
                elif c.accepts(run.start_s, run.end_s):
                    call = c
                    break
        if call is None:
            if name not in self.names:  # a method not seen before: steps already checked may lack it too
                self.names.add(name)
                self.new_names.add(name)
            call = Call(group, method, name, phase, run.start_s)
            lst.append(call)
            lst.sort(key=lambda c: c.start_s)
            self.calls.append(call)
        call.add(run)
        self.live[run.task_id] = call
        return call

    def _count(self, name: str, actor_id: str | None) -> None:
        for k in ((name, None), (name, actor_id), (None, actor_id)):
            if k in self.name_rows:
                self.name_rows[k] += 1

    def _touch(self, calls: set[Call]) -> None:
        if not calls:
            return
        self.version += 1
        if len(self.calls) > MAX_CALLS or len(self.calls) >= self._calls_at_trim + 16:
            self.trim()

    # ---------------------------------------------------------- reading

    def views(self) -> list[CallView]:
        return [c.view() for c in self.calls]

    def steps(self, now: float, rank_of: Callable[[str | None], int | None] | None = None,
              keep: int | None = None) -> tuple[Step, ...]:
        """The steps (oldest first, the last one running unless a later one began)."""
        return build_steps(self.views(), now, self.first_index, rank_of, keep or self.keep_steps)

    # ---------------------------------------------------------- bounds

    def trim(self) -> None:
        """Drop the calls of steps older than the last ``keep_steps`` (numbering continues), and settle the
        calls of finished steps once refined (their per-rank runs are no longer needed; after two more steps,
        anyway)."""
        segs = segment(self.views())
        drop = max(0, len(segs) - self.keep_steps)
        gone: set[Call] = set()
        for s in segs[:drop]:
            gone |= {_call(v) for v in s}
        if drop:
            self.first_index += drop
            self.horizon_s = segs[drop][0].start_s
        for i in range(drop, max(drop, len(segs) - 1)):
            for v in segs[i]:
                c = _call(v)
                if c.refined or i < len(segs) - 3:
                    self.settle(c)
        if len(self.calls) - len(gone) > MAX_CALLS:  # no steps to cut at: the oldest calls go
            oldest = sorted((c for c in self.calls if c not in gone), key=lambda c: c.start_s)
            oldest = oldest[: len(self.calls) - len(gone) - MAX_CALLS]
            gone |= set(oldest)
            self.horizon_s = max(self.horizon_s, max(c.start_s for c in oldest))
        self._calls_at_trim = len(self.calls) - len(gone)
        if not gone:
            return
        for c in gone:
            self.settle(c)
            self.by_key[(c.group, c.method)].remove(c)
        self.calls = [c for c in self.calls if c not in gone]
        self.by_key = {k: v for k, v in self.by_key.items() if v}
        self.version += 1

    def settle(self, c: Call) -> None:
        if c.runs is None:
            return
        c.view()  # its summary (exactness, the late rank) from the runs, before they go
        for tid in c.runs:
            self.live.pop(tid, None)
            self._running.pop(tid, None)
        c.runs = None

    # ---------------------------------------------------------- refinement

    def plan_current(self, max_queries: int = 24) -> tuple[list[Query], list[Call], float]:
        """As ``plan``, for the finished calls of the running step (one that runs far longer than usual: a
        hang, a late rank), once: its short phases, which the polls may have missed, and exact times for the
        phases before the one it is stuck in."""
        segs = segment(self.views())
        if len(segs) < 2:
            return [], [], self.checked_until_s
        cur, prev = segs[-1], segs[-2]
        t0, p0 = cur[0].start_s, prev[0].start_s
        reached = max(v.start_s for v in cur) - t0
        # what the step before ran up to the same point in its step
        before = {_call(v).name for v in prev if v.start_s - p0 <= reached} - {_call(v).name for v in cur}
        return self._queries([[v for v in cur if v.end_s is not None]], before, max_queries,
                             self.checked_until_s)

    def plan(self, max_queries: int = 24) -> tuple[list[Query], list[Call], float]:
        """What to read from Ray's finished tasks to make the completed, unchecked steps exact: ``(queries,
        the calls they cover, the time through which steps are then checked)``.

        Per task name: the ``name`` filter while Ray holds at most ``NAME_ROWS_BUDGET`` runs of it (it also
        finds calls no poll saw); else one rank's runs (``name`` + ``actor_id``) when a step lacks a call of a
        method run around it; else, for calls only the polls saw, single tasks by id (the first rank to
        start, the first and last to finish)."""
        segs = segment(self.views())
        first = next((i for i, s in enumerate(segs[:-1]) if s[0].start_s >= self.checked_until_s), None)
        learnt, self.new_names = self.new_names, set()
        if first is None:
            if not learnt or len(segs) < 2:
                return [], [], self.checked_until_s
            # a method first seen now: the steps already checked may hold calls of it no poll saw
            return self._queries([], set(), max_queries, self.checked_until_s, learnt)
        names = {_call(v).name for s in segs[max(0, first - 2):] for v in s}  # run around these steps
        return self._queries(segs[first:-1], names, max_queries, segs[-1][0].start_s, learnt)

    def _queries(self, done: list[list[CallView]], names: set[str], max_queries: int, through: float,
                 learnt: set[str] = frozenset()) -> tuple[list[Query], list[Call], float]:
        inexact: dict[str, list[Call]] = {}
        missing: set[str] = set(learnt)
        covered: list[Call] = []
        actors: dict[str, str] = {}  # group -> an actor of it
        for s in done:
            present = set()
            for v in s:
                c = _call(v)
                present.add(c.name)
                if c.late_actor_id:
                    actors.setdefault(c.group, c.late_actor_id)
                if c.refined:
                    continue
                covered.append(c)
                if not c.exact:
                    inexact.setdefault(c.name, []).append(c)
            missing |= names - present  # run around these steps, not in this one: a call no poll saw?
        queries: list[Query] = []
        # Once per group (and every RESCAN_ROUNDS rounds): one rank's whole history, which names every method
        # the group runs, those no poll saw and the seed missed included (what is never named is never read)
        self.rounds += 1
        for group, actor in sorted(actors.items()):
            if self.rounds - self.scanned.get(group, -RESCAN_ROUNDS) >= RESCAN_ROUNDS and \
                    self.name_rows.get((None, actor), 0) <= NAME_ROWS_BUDGET:
                self.scanned[group] = self.rounds
                queries.append(Query(actor_id=actor))
        tasks: list[Query] = []
        for name in sorted(set(inexact) | missing):
            rows = self.name_rows.get((name, None))
            if rows is None or rows <= NAME_ROWS_BUDGET:
                queries.append(Query(name=name))
                continue
            actor = self._an_actor(name)
            if name in missing and actor and self.name_rows.get((name, actor), 0) <= NAME_ROWS_BUDGET:
                queries.append(Query(name=name, actor_id=actor))
            for c in inexact.get(name, ()):
                tasks += [Query(task_id=t) for t in _extremes(c)]
        return (queries + tasks)[:max_queries], covered, through

    def _an_actor(self, name: str) -> str | None:
        for c in reversed(self.calls):
            if c.name == name and c.late_actor_id:
                return c.late_actor_id
        return None

    def refined(self, calls: Iterable[Call], through_s: float) -> None:
        """The planned reads were made (or failed): do not plan these again; their runs can go."""
        for c in calls:
            c.refined = True
            self.settle(c)
        self.checked_until_s = max(self.checked_until_s, through_s)
        self.version += 1

    def record_rows(self, name: str | None, actor_id: str | None, rows: int) -> None:
        """How many runs of ``name`` (of ``actor_id``) Ray holds, from an answer's total."""
        self.name_rows[(name, actor_id)] = rows

    def estimate_rows(self, sample: Iterable[str], total: int | None) -> None:
        """Rows Ray holds per task name, estimated from a sample of finished tasks (the start-up seed, cut by
        Ray at its limit after sorting by task id: a uniform sample) and their ``total``: so that the first
        refinement already knows which names are too many to read whole."""
        counts: dict[str, int] = {}
        n = 0
        for name in sample:
            counts[name] = counts.get(name, 0) + 1
            n += 1
        scale = (total / n) if total and n and total > n else 1.0
        for name, c in counts.items():
            self.name_rows.setdefault((name, None), round(c * scale))


def _call(v: CallView) -> Call:
    assert isinstance(v.ref, Call)
    return v.ref


def _overlaps(c: Call, run: Run) -> bool:
    end = INF if c.end_s is None else c.end_s
    return run.start_s <= end + EPS and (INF if run.end_s is None else run.end_s) + EPS >= c.start_s


def _extremes(c: Call) -> list[str]:
    """Task ids of the runs that bound a call: all of them when few, else the first to start and the first and
    last to finish (ties broken apart, so a call whose ranks all ended in one poll interval still gets two)."""
    if not c.runs:
        return []
    rs = [r for r in c.runs.values() if not r.exact]
    if len(rs) <= TASK_QUERIES_PER_CALL:
        return [r.task_id for r in rs]
    picks = [min(rs, key=lambda r: (r.start_s, r.task_id))]
    ended = [r for r in rs if r.end_s is not None]
    if ended:
        picks += [min(ended, key=lambda r: (r.end_s, r.task_id)), max(ended, key=lambda r: (r.end_s, r.task_id))]
    out: list[str] = []
    for r in picks:
        if r.task_id not in out:
            out.append(r.task_id)
    return out[:TASK_QUERIES_PER_CALL]
