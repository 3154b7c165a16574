"""Pending work, read cheaply: unplaced placement groups, tasks waiting for a node and the cluster's load.

Pending lists are small, and empty on a healthy job. They are read on the actor-poll cadence only while
something is pending (an unplaced placement group or a waiting task seen last time, an actor that is
PENDING_CREATION / DEPENDENCIES_UNREADY / RESTARTING, a controller with no worker yet); otherwise every
``slow_s``, to notice a new placement group. With nothing pending a read is two ~170-byte answers.

Actors restarting again and again: Ray keeps no death cause until it gives up (``death_cause`` is null
while the actor restarts), so the last incarnation's own stderr tail is read once per restart and reduced
to the line that says why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from verltop.analysis import roles as R
from verltop.analysis.pending import PENDING_ACTOR_STATES, UNPLACED_PG_STATES, PendingData
from verltop.model import ClusterLoad, RawActor, RawPendingTask, RawPlacementGroup
from verltop.sources import dashboard as D
from verltop.sources.causes import log_cause
from verltop.sources.http import DashboardClient

SLOW_S = 15.0
LOG_LINES = 60
MAX_CAUSE_READS = 4  # stderr tails per poll (a crash loop of a whole group must not flood the dashboard)

Record = Callable[[Any, D.Result], bool]


class PendingWatch:
    """The engine's pending-work source. ``state`` is the monitor's ``SourceState`` for it (its age and
    problem go to the header like any source's); ``record`` is the monitor's way of storing a result."""

    def __init__(self, client: DashboardClient, state: Any, timeout_s: float = 10.0, slow_s: float = SLOW_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.state = state
        self.timeout_s = timeout_s
        self.slow_s = slow_s
        self.clock = clock
        self.pgs: tuple[RawPlacementGroup, ...] = ()
        self.tasks: tuple[RawPendingTask, ...] = ()
        self.load: ClusterLoad | None = None
        self.first_seen: dict[str, float] = {}
        self.last_poll: float | None = None
        self.unsupported = False  # the dashboard has no placement-group list (404): stop asking
        self.polls = 0
        self.requests = 0
        # restart loops
        self._restarts: dict[str, tuple[int, int | None, str | None]] = {}  # actor → (count, pid, node)
        self.restarted_at: dict[str, float] = {}
        self.last_cause: dict[str, str] = {}
        self._dead_incarnations: list[tuple[str, int, str]] = []  # (actor, old pid, node) to read
        self._observed: Sequence[RawActor] | None = None
        self._busy_for: tuple[Sequence[RawActor] | None, bool] = (None, False)

    # ---------------------------------------------------------- when

    def busy(self, actors: Sequence[RawActor]) -> bool:
        """Anything pending, by what is already known (no request)?"""
        if any(p.state in UNPLACED_PG_STATES for p in self.pgs) or self.tasks or self._dead_incarnations:
            return True
        if actors is self._busy_for[0]:  # the monitor keeps the same list while nothing changed
            return self._busy_for[1]
        self._busy_for = (actors, self._actors_busy(actors))
        return self._busy_for[1]

    @staticmethod
    def _actors_busy(actors: Sequence[RawActor]) -> bool:
        controller = workers = False
        for a in actors:
            if a.state in PENDING_ACTOR_STATES or a.state == "RESTARTING":
                return True
            if a.state == "ALIVE" and not workers:
                if R.base_role(a.class_name, a.name) == "controller":
                    controller = True
                elif R.identity(a).worker_group:
                    workers = True
        # a controller with no worker yet is most likely waiting for its placement groups
        return controller and not workers

    def due(self, actors: Sequence[RawActor], now: float) -> bool:
        if self.unsupported:
            return False
        # a failed read is retried on the monitor's back-off, not after ``slow_s``
        return (self.last_poll is None or self.state.error is not None or now - self.last_poll >= self.slow_s
                or self.busy(actors))

    # ---------------------------------------------------------- reads

    async def poll(self, actors: Sequence[RawActor], record: Record, force: bool = False) -> bool:
        """One read if it is due (``force``: now). Returns whether anything was read."""
        now = self.clock()
        self.observe_restarts(actors, now)
        if not force and not self.due(actors, now):
            return False
        self.last_poll = now
        self.polls += 1
        pgs, tasks = await asyncio.gather(D.fetch_unplaced_placement_groups(self.client, self.timeout_s),
                                          D.fetch_pending_tasks(self.client, self.timeout_s))
        self.requests += 2
        if not pgs.ok and pgs.error is not None and pgs.error.kind == "not_found":
            self.unsupported = True
            return True
        if not record(self.state, pgs):
            return True
        self.pgs = tuple(p for p in pgs.value or () if p.state in UNPLACED_PG_STATES)
        self.tasks = tuple(tasks.value or ()) if tasks.ok else ()
        pending_actors = [a for a in actors if a.state in PENDING_ACTOR_STATES]
        if self.pgs or self.tasks or pending_actors:
            load = await D.fetch_cluster_load(self.client, self.timeout_s)
            self.requests += 1
            if load.ok:
                self.load = load.value
        else:
            self.load = None
        if not tasks.ok and tasks.error is not None:
            self.state.error = tasks.error.with_message(f"pending tasks: {tasks.error.message}")
        self._note_seen(pending_actors, now)
        await self._read_causes()
        return True

    def _note_seen(self, pending_actors: Sequence[RawActor], now: float) -> None:
        ids = [p.pg_id for p in self.pgs] + [t.task_id for t in self.tasks] + [a.actor_id for a in pending_actors]
        self.first_seen = {k: self.first_seen.get(k, now) for k in ids}

    # ---------------------------------------------------------- restart loops

    def observe_restarts(self, actors: Sequence[RawActor], now: float) -> None:
        """Note restart counts that rose, and the incarnation (pid, node) that ended."""
        if actors is self._observed:
            return
        self._observed = actors
        seen = {}
        for a in actors:
            n = a.num_restarts or 0
            prev = self._restarts.get(a.actor_id)
            if prev is not None and n > prev[0]:
                self.restarted_at[a.actor_id] = now
                if prev[1] and prev[2] and prev[1] != a.pid:
                    self._dead_incarnations.append((a.actor_id, prev[1], prev[2]))
            keep_pid = a.pid if a.pid else (prev[1] if prev else None)
            keep_node = a.node_id if a.node_id else (prev[2] if prev else None)
            seen[a.actor_id] = (n, keep_pid, keep_node)
        self._restarts = seen
        for d in (self.restarted_at, self.last_cause):
            for k in [k for k in d if k not in seen]:
                del d[k]

    async def _read_causes(self) -> None:
        todo, self._dead_incarnations = self._dead_incarnations[:MAX_CAUSE_READS], self._dead_incarnations[
            MAX_CAUSE_READS:]
        if not todo:
            return
        results = await asyncio.gather(*(D.fetch_process_log_tail(self.client, pid, node, "err", LOG_LINES,
                                                                  self.timeout_s) for _, pid, node in todo))
        self.requests += len(todo)
        for (aid, _, _), r in zip(todo, results, strict=True):
            cause = log_cause(r.value) if r.ok else None
            if cause:
                self.last_cause[aid] = cause

    # ---------------------------------------------------------- the view's input

    def data(self) -> PendingData:
        return PendingData(pgs=self.pgs, tasks=self.tasks, load=self.load, first_seen=dict(self.first_seen),
                           restarted_at=dict(self.restarted_at), last_cause=dict(self.last_cause))
