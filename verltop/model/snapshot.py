"""One frame: everything the UI (or one ``snapshot --json``) shows."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.model.memory import MemoryView
from verltop.model.pending import PendingItem
from verltop.model.raw import Node
from verltop.model.rollout import RolloutLoad
from verltop.model.rows import ActorRow, ProcRow, SourceStatus
from verltop.model.steps import GroupWork, Step
from verltop.model.training import SlowRank, TrainingView


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one frame of the UI (or one ``snapshot --json``) shows."""

    taken_at: float
    address: str
    nodes: tuple[Node, ...]
    actors: tuple[ActorRow, ...]
    phase: str | None
    sources: tuple[SourceStatus, ...] = ()
    # seconds since any verl task last finished (None until one was seen)
    progress_s: float | None = None
    truncated: str | None = None
    gpu_note: str | None = None  # why this machine's GPUs are not read (no NVML), if so
    # processes with no live actor above them (an engine left behind by a dead server); None: no node's
    # processes were read
    orphans: tuple[ProcRow, ...] | None = None
    pending: tuple[PendingItem, ...] = ()  # placement groups, actors and tasks Ray has not placed yet
    steps: tuple[Step, ...] = ()  # the last training steps, oldest first; the last may be running
    work: tuple[GroupWork, ...] = ()  # pending and retried tasks per worker group
    training: TrainingView | None = None  # verl's logged metrics and their anomalies, once found
    slow_ranks: tuple[SlowRank, ...] = ()  # workers that end a phase last, step after step
    rollout: tuple[RolloutLoad, ...] = ()  # each rollout server's load, from its own /metrics
    memory: MemoryView | None = None  # by phase and rank, growth, headroom, OOM verdicts (needs history)

    @property
    def age_s(self) -> float | None:
        ages = [s.age_s for s in self.sources if s.age_s is not None]
        return max(ages) if ages else None

    def stale_sources(self, extra_s: float = 0.0) -> list[SourceStatus]:
        """Sources whose last good data is older than their own stale limit (``extra_s`` later)."""
        return [s for s in self.sources if s.stale_at(extra_s)]

    @property
    def errors(self) -> list[str]:
        return [f"{s.name}: {s.error.text}" for s in self.sources if s.error]
