"""What to read from Ray's finished tasks to make the step timeline exact (tier 2 of ``analysis.timeline``).

Finished tasks cannot be read by time (Ray 2.60 filters only ``=``/``!=`` on job, actor, name, state and
task id, and sorts by task id before cutting), so each completed step is made exact per method within a
budget of rows: the ``name`` filter while Ray holds few runs of that method, else one rank's runs (``name`` +
``actor_id``), else single tasks by id (the first rank to start, the first and last to finish). A call no
poll saw (shorter than a poll) is found only by the first two. Pure: it plans, the engine reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from verltop.analysis.steps import CallView, segment
from verltop.analysis.timeline import Call, StepTracker, call_of

NAME_ROWS_BUDGET = 256  # rows (about 2.3 KB each at detail=1) one finished-task query may match
TASK_QUERIES_PER_CALL = 3  # exact times for the extremes of a call no cheaper query covers
RESCAN_ROUNDS = 16  # a group's methods are listed again this many refinement rounds later (new ones: save)
INF = float("inf")


@dataclass(frozen=True, slots=True)
class Query:
    """A finished-task read that makes calls exact: by ``task_id``, or by task ``name`` (and ``actor_id``)."""

    name: str | None = None
    actor_id: str | None = None
    task_id: str | None = None


class ReadPlanner:
    """Plans the reads that make a ``StepTracker``'s completed steps exact, and remembers what was read."""

    def __init__(self, tracker: StepTracker) -> None:
        self.tracker = tracker
        self.checked_until_s = -INF  # completed steps that began before this were refined
        self.rounds = 0  # plans made
        self.scanned: dict[str, int] = {}  # group -> the round whose plan read one of its ranks' history

    def plan_current(self, max_queries: int = 24) -> tuple[list[Query], list[Call], float]:
        """As ``plan``, for the finished calls of the running step (one that runs far longer than usual: a
        hang, a late rank), once: its short phases, which the polls may have missed, and exact times for the
        phases before the one it is stuck in."""
        segs = segment(self.tracker.views())
        if len(segs) < 2:
            return [], [], self.checked_until_s
        cur, prev = segs[-1], segs[-2]
        t0, p0 = cur[0].start_s, prev[0].start_s
        reached = max(v.start_s for v in cur) - t0
        # what the step before ran up to the same point in its step
        before = {call_of(v).name for v in prev if v.start_s - p0 <= reached} - {call_of(v).name for v in cur}
        return self._queries([[v for v in cur if v.end_s is not None]], before, max_queries,
                             self.checked_until_s)

    def plan(self, max_queries: int = 24) -> tuple[list[Query], list[Call], float]:
        """What to read from Ray's finished tasks to make the completed, unchecked steps exact: ``(queries,
        the calls they cover, the time through which steps are then checked)``.

        Per task name: the ``name`` filter while Ray holds at most ``NAME_ROWS_BUDGET`` runs of it (it also
        finds calls no poll saw); else one rank's runs (``name`` + ``actor_id``) when a step lacks a call of a
        method run around it; else, for calls only the polls saw, single tasks by id (the first rank to
        start, the first and last to finish)."""
        segs = segment(self.tracker.views())
        first = next((i for i, s in enumerate(segs[:-1]) if s[0].start_s >= self.checked_until_s), None)
        learnt = self.tracker.take_new_names()
        if first is None:
            if not learnt or len(segs) < 2:
                return [], [], self.checked_until_s
            # a method first seen now: the steps already checked may hold calls of it no poll saw
            return self._queries([], set(), max_queries, self.checked_until_s, learnt)
        names = {call_of(v).name for s in segs[max(0, first - 2):] for v in s}  # run around these steps
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
                c = call_of(v)
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
                    self.tracker.name_rows.get((None, actor), 0) <= NAME_ROWS_BUDGET:
                self.scanned[group] = self.rounds
                queries.append(Query(actor_id=actor))
        tasks: list[Query] = []
        for name in sorted(set(inexact) | missing):
            rows = self.tracker.name_rows.get((name, None))
            if rows is None or rows <= NAME_ROWS_BUDGET:
                queries.append(Query(name=name))
                continue
            actor = self._an_actor(name)
            if name in missing and actor and self.tracker.name_rows.get((name, actor), 0) <= NAME_ROWS_BUDGET:
                queries.append(Query(name=name, actor_id=actor))
            for c in inexact.get(name, ()):
                tasks += [Query(task_id=t) for t in _extremes(c)]
        return (queries + tasks)[:max_queries], covered, through

    def _an_actor(self, name: str) -> str | None:
        for c in reversed(self.tracker.calls):
            if c.name == name and c.late_actor_id:
                return c.late_actor_id
        return None

    def refined(self, calls: Iterable[Call], through_s: float) -> None:
        """The planned reads were made (or failed): do not plan these again; their runs can go."""
        self.tracker.settle_refined(calls)
        self.checked_until_s = max(self.checked_until_s, through_s)


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
