"""Bounded memory of what ran: finished-task durations, peer finish times, GPU use during a task.

Ray's State API has no cheap "recently finished" query, so finishes are observed: a task that was RUNNING
in one poll and is gone in the next finished between the two. The error is at most one poll interval.
Everything is keyed by ``(group, method)`` and bounded, so a week-long job does not grow it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from verltop.analysis.oom import FailedCall, oom_kind
from verltop.analysis.peer_failures import collective_error

MAX_SAMPLES = 64  # durations kept per (group, method)
MAX_KEYS = 512  # (group, method) pairs kept
MAX_PEER_RUNS = 256  # finished runs kept per (group, method) for the peer rule
MAX_ACTOR_METHODS = 64  # method names remembered per actor (roles of colocated workers)
MAX_OOMS = 64  # calls that failed with an OOM, kept (newest)


@dataclass(slots=True)
class Running:
    actor_id: str | None
    group: str
    method: str
    start_s: float
    gpu_samples: int = 0
    gpu_max_percent: float = 0.0


@dataclass(slots=True, unsafe_hash=True)
class FinishedRun:
    """A call that ended (not frozen, for speed: every rank's at each phase's end; treat it as immutable)."""

    actor_id: str | None
    start_s: float
    end_s: float
    error: str | None = None  # a failed call's error (``failures`` only)


@dataclass(slots=True)
class TaskHistory:
    running: dict[str, Running] = field(default_factory=dict)
    durations: OrderedDict[tuple[str, str], deque[float]] = field(default_factory=OrderedDict)
    runs: OrderedDict[tuple[str, str], deque[FinishedRun]] = field(default_factory=OrderedDict)
    methods_by_actor: dict[str, OrderedDict[str, None]] = field(default_factory=dict)
    last_method: dict[str, str] = field(default_factory=dict)
    last_finish_s: float | None = None
    # task ids whose duration is in ``durations``: a finished run read later (the timeline's reads) is added
    # once, so calls shorter than a poll, which no poll sees running, keep feeding the medians
    known: OrderedDict[str, None] = field(default_factory=OrderedDict)
    # calls that failed in a collective (a timeout, an abort), per (group, method): peers that gave up waiting
    failures: OrderedDict[tuple[str, str], deque[FinishedRun]] = field(default_factory=OrderedDict)
    failed_ids: OrderedDict[str, tuple[str, str, FinishedRun]] = field(default_factory=OrderedDict)  # (group, method, run)
    # calls that failed with an OOM (torch's OutOfMemoryError, Ray's memory monitor), by task id, oldest first
    ooms: OrderedDict[str, FailedCall] = field(default_factory=OrderedDict)
    methods_gen: int = 0  # bumped when an actor's set of methods changes (a build's roles stand while it holds)

    def observe(
        self,
        running: list[tuple[str, str | None, str, str, float | None]],
        now: float,
        complete: bool = True,
    ) -> None:
        """Record one poll of running tasks: ``(task_id, actor_id, group, method, start_s)``.

        ``complete=False`` (the list was truncated) keeps vanished tasks instead of calling them finished.
        """
        seen = set()
        for task_id, actor_id, group, method, start_s in running:
            seen.add(task_id)
            if actor_id:
                self.remember_method(actor_id, method)
            if task_id not in self.running:
                self.running[task_id] = Running(actor_id, group, method, start_s if start_s is not None else now)
        if not complete:
            return
        for task_id in [t for t in self.running if t not in seen]:
            r = self.running.pop(task_id)
            self._know(task_id)
            self._finish(r, now)

    def remember_method(self, actor_id: str, method: str) -> None:
        ms = self.methods_by_actor.setdefault(actor_id, OrderedDict())
        if method not in ms:
            self.methods_gen += 1
        ms[method] = None
        ms.move_to_end(method)
        while len(ms) > MAX_ACTOR_METHODS:
            ms.popitem(last=False)
        self.last_method[actor_id] = method

    def _finish(self, r: Running, now: float) -> None:
        key = (r.group, r.method)
        d = self.durations.get(key)
        if d is None:
            d = self.durations[key] = deque(maxlen=MAX_SAMPLES)
        d.append(max(0.0, now - r.start_s))
        self.durations.move_to_end(key)
        runs = self.runs.get(key)
        if runs is None:
            runs = self.runs[key] = deque(maxlen=MAX_PEER_RUNS)
        runs.append(FinishedRun(r.actor_id, r.start_s, now))
        self.runs.move_to_end(key)
        while len(self.durations) > MAX_KEYS:
            self.durations.popitem(last=False)
        while len(self.runs) > MAX_KEYS:
            self.runs.popitem(last=False)
        if self.last_finish_s is None or now > self.last_finish_s:
            self.last_finish_s = now

    def note_failed(self, failed: list[tuple[str, str | None, str, str, float, float, str]]) -> list[str]:
        """Record failed calls ``(task_id, actor_id, group, method, start_s, end_s, error)`` whose error is a
        collective's (``failures``) or an OOM (``ooms``); the task ids not seen before."""
        new = []
        for task_id, actor_id, group, method, start_s, end_s, error in sorted(failed, key=lambda f: f[5]):
            if task_id not in self.ooms and oom_kind(error) is not None:
                self.ooms[task_id] = FailedCall(task_id, actor_id, method, start_s, end_s, error)
                while len(self.ooms) > MAX_OOMS:
                    self.ooms.popitem(last=False)
                new.append(task_id)
                continue
            if task_id in self.failed_ids or not collective_error(error):
                continue
            run = FinishedRun(actor_id, start_s, end_s, error)
            self.failed_ids[task_id] = (group, method, run)
            while len(self.failed_ids) > MAX_PEER_RUNS * 4:
                self.failed_ids.popitem(last=False)
            key = (group, method)
            d = self.failures.get(key)
            if d is None:
                d = self.failures[key] = deque(maxlen=MAX_PEER_RUNS)
            d.append(run)
            self.failures.move_to_end(key)
            while len(self.failures) > MAX_KEYS:
                self.failures.popitem(last=False)
            new.append(task_id)
        return new

    def note_gpu(self, task_id: str, util_percent: float | None) -> None:
        r = self.running.get(task_id)
        if r is None or util_percent is None:
            return
        r.gpu_samples += 1
        r.gpu_max_percent = max(r.gpu_max_percent, util_percent)

    def forget_actors(self, alive: set[str]) -> None:
        """Drop per-actor memory of actors no longer listed (bounded across restarts of the job)."""
        for aid in [a for a in self.methods_by_actor if a not in alive]:
            self.methods_gen += 1
            self.methods_by_actor.pop(aid, None)
            self.last_method.pop(aid, None)

    def _know(self, task_id: str) -> None:
        self.known[task_id] = None
        while len(self.known) > MAX_KEYS * MAX_SAMPLES:
            self.known.popitem(last=False)

    def add_finished(self, finished: list[tuple[str, str | None, str, str, float, float]]) -> int:
        """Finished runs read after they ended ``(task_id, actor_id, group, method, start_s, end_s)``: those not
        recorded yet (never seen running, or not yet seen ending) join the durations. How many did."""
        n = 0
        for task_id, actor_id, group, method, start_s, end_s in sorted(finished, key=lambda f: f[5]):
            if task_id in self.known or task_id in self.running:
                continue
            self._know(task_id)
            self._finish(Running(actor_id, group, method, start_s), end_s)
            n += 1
        return n

    def seed(self, finished: list[tuple[str, str | None, str, str, float, float]]) -> None:
        """Seed from finished tasks ``(task_id, actor_id, group, method, start_s, end_s)`` read once at start;
        their ids are known, so the timeline's later reads of the same runs do not count them twice."""
        for _, actor_id, _, method, _, _ in sorted(finished, key=lambda f: f[5]):
            if actor_id:
                self.remember_method(actor_id, method)
        self.add_finished(finished)
