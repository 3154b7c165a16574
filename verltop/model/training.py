"""verl's own training metrics (what its ``Tracking`` logger writes each step), the anomalies found in them,
and the ranks that finish a phase last."""

from __future__ import annotations

from dataclasses import dataclass, field

# Anomaly kinds, one rule each (docs/training.md).
ANOMALY_KINDS = ("nan", "spike", "collapse", "clipped", "slow_step", "throughput_drop", "growing")


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One metric that looks wrong at one step. ``value`` is what was logged (NaN/inf as such; None when a
    recording stored a non-finite value), ``baseline`` what the rule compared it with (a robust median of the
    steps before, a limit, or the value ``window`` steps earlier for ``growing``). ``detail`` is a fact for
    the sentence, not a sentence: the spelling of a non-finite value ("nan", "inf", "-inf")."""

    step: int
    metric: str
    kind: str  # one of ANOMALY_KINDS
    value: float | None
    baseline: float | None
    detail: str | None = None
    window: int = 0  # steps the baseline spans (growing: the steps between baseline and value)


@dataclass(frozen=True, slots=True)
class TrainingView:
    """The training metrics of the job, as verl logged them. ``source`` says where they were read:
    "actor_log" (the trainer actor's worker log, the console backend), "job_log" (the driver's log),
    "file" (the file backend's JSONL). ``metrics`` maps each numeric key to its last values,
    ``(step, value)`` oldest first (a bounded window); NaN and inf are kept as floats (None in a
    recording, which stores them as null)."""

    source: str
    actor_name: str | None
    last_step: int | None
    metrics: dict[str, tuple[tuple[int, float | None], ...]] = field(default_factory=dict)
    anomalies: tuple[Anomaly, ...] = ()
    path: str | None = None  # the JSONL file, for "file"

    def series(self, name: str) -> tuple[tuple[int, float | None], ...]:
        return self.metrics.get(name, ())

    def latest(self, name: str) -> float | None:
        """The value ``name`` had at the last step, None when it was not logged then."""
        s = self.metrics.get(name)
        return s[-1][1] if s and s[-1][0] == self.last_step else None


@dataclass(frozen=True, slots=True)
class SlowRank:
    """A worker (agent-loop worker, rollout server, DP rank) that ended ``phase`` last in ``steps`` of the
    last ``of_steps`` steps, ``lag_s`` (median) after the rank before it. ``detail``: a fact for the
    sentence, not a sentence ("gpu_idle": its GPU was held but idle while its task ran; "collective": its
    peers ended with it in a collective, so the lag is how long they waited for it to start)."""

    actor_id: str | None
    actor_name: str | None
    worker_group: str | None
    rank: int | None
    phase: str
    method: str | None
    steps: int
    lag_s: float
    of_steps: int = 0
    detail: str | None = None
