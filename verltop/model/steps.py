"""Training steps (the timeline): each step's phases, and the work waiting in each worker group."""

from __future__ import annotations

from dataclasses import dataclass

# The verl step phases in step order (the one definition: roles, the header and the timeline use it).
# "other" is the part of a step that no worker-group call covers (driver work: advantages, data loading).
PHASES = ("gen", "reward", "old_log_prob", "ref", "values", "update_critic", "update_actor", "weight_sync", "save",
          "other")


@dataclass(frozen=True, slots=True)
class PhaseRun:
    """One phase of one step: a worker-group call (every rank's run of one method), or several calls of the
    same phase. ``skew_s`` is the arrival skew across ranks: from the first rank to finish to the last (to
    ``now`` while some ranks finished and others still run); ``late_rank`` is the last one (or the one still
    running)."""

    phase: str
    group: str
    method: str
    start_s: float
    end_s: float | None  # None while running
    ranks: int  # runs seen (one per rank)
    running: int = 0  # of them still running
    skew_s: float | None = None
    late_rank: int | None = None
    late_actor_id: str | None = None
    exact: bool = False  # times from Ray's task events, not from what the polls saw

    def duration_s(self, now: float) -> float:
        return max(0.0, (self.end_s if self.end_s is not None else now) - self.start_s)


@dataclass(frozen=True, slots=True)
class Step:
    """One training step: its phases in the order they began. ``duration_s`` is None while it runs (its
    length so far is ``now - started_at``). ``phases`` and ``skew_s`` hold a value for every phase of
    ``PHASES`` that ran in the step (seconds covered, overlaps counted once; ``other``: the rest)."""

    index: int
    started_at: float
    duration_s: float | None
    runs: tuple[PhaseRun, ...]
    phases: tuple[tuple[str, float], ...]
    skew_s: tuple[tuple[str, float], ...] = ()
    exact: bool = False  # every run's times came from Ray's task events

    @property
    def running(self) -> bool:
        return self.duration_s is None

    def phase_s(self, phase: str) -> float | None:
        return next((v for k, v in self.phases if k == phase), None)


@dataclass(frozen=True, slots=True)
class GroupWork:
    """Work waiting in a worker group: pending tasks (submitted, not running yet) and retries (attempts past
    the first, running, pending or failed), and the actors that restarted."""

    group: str
    pending: int = 0
    retries: int = 0
    restarts: int = 0  # sum of num_restarts over its actors
