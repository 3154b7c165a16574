"""The step timeline's memory: worker-group calls as the polls saw them, made exact by Ray's task events.

Finished tasks cannot be read by time (Ray 2.60 filters only ``=``/``!=`` on job, actor, name, state and
task id, and sorts by task id before cutting), so the timeline is built in three tiers:

1. **Observed**, for free: the engine's poll of RUNNING tasks. A run starts when first seen (the middle of
   that poll interval, unless a detail read gave its start) and ends between the last poll that saw it and
   the first that did not (the middle again: error at most half a poll).
2. **Exact**, when a step completes: per method, Ray's task events (start and end to the millisecond),
   read with the source-side filters within a budget of rows; which reads to make is planned in
   ``analysis.timeline_reads``, and their answers come back through ``add_exact``.
3. **Seeded** at start from the finished tasks the engine reads once.

Everything is bounded: the last ``KEEP_STEPS`` steps; per-rank runs only for calls not yet settled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from verltop.analysis.roles import phase_of_method
from verltop.analysis.steps import CallView, build_steps, segment
from verltop.model import Step

KEEP_STEPS = 32
MAX_CALLS = 2000  # a job whose calls never form steps (no updates) must not grow it
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
        # rows Ray held for (name, actor) at the last read ((name, None): every rank's; (None, actor): all its tasks)
        self.name_rows: dict[tuple[str | None, str | None], int] = {}
        self.version = 0
        self._calls_at_trim = 0
        self.names: set[str] = set()  # every task name a call was made of
        self.new_names: set[str] = set()  # of those, names learnt since the last plan

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
            gone |= {call_of(v) for v in s}
        if drop:
            self.first_index += drop
            self.horizon_s = segs[drop][0].start_s
        for i in range(drop, max(drop, len(segs) - 1)):
            for v in segs[i]:
                c = call_of(v)
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

    def settle_refined(self, calls: Iterable[Call]) -> None:
        """The reads planned for these calls were made (or failed): they are not planned again; their runs go."""
        for c in calls:
            c.refined = True
            self.settle(c)
        self.version += 1

    def take_new_names(self) -> set[str]:
        """The task names learnt since the last call (a plan looks for them in the steps already checked)."""
        out, self.new_names = self.new_names, set()
        return out

    def settle(self, c: Call) -> None:
        if c.runs is None:
            return
        c.view()  # its summary (exactness, the late rank) from the runs, before they go
        for tid in c.runs:
            self.live.pop(tid, None)
            self._running.pop(tid, None)
        c.runs = None

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


def call_of(v: CallView) -> Call:
    assert isinstance(v.ref, Call)
    return v.ref


def _overlaps(c: Call, run: Run) -> bool:
    end = INF if c.end_s is None else c.end_s
    return run.start_s <= end + EPS and (INF if run.end_s is None else run.end_s) + EPS >= c.start_s


