"""Who holds the memory: each rank's GPU memory and host RSS by phase and step, the phases that take memory
and keep it (growth), the headroom before the limit that kills it, what a colocated rollout engine still
holds, and the verdict when a rank runs out. Bytes throughout; unknown is None."""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_KINDS = ("gpu", "host")
# Where a limit comes from: the GPU's total less what other processes on it hold; the node's memory at
# Ray's memory-monitor threshold (RAY_memory_usage_threshold); the container's cgroup limit.
LIMIT_SOURCES = ("gpu_total", "ray_memory_threshold", "cgroup")
# How a rank was found to run out: its call raised torch's OutOfMemoryError; its worker log says so as it
# died; Ray's memory monitor killed it; it died of SIGKILL with its memory near the limit.
OOM_HOWS = ("task_error", "worker_log", "memory_monitor", "sigkill_near_limit")


@dataclass(frozen=True, slots=True)
class PhaseMemory:
    """One rank's memory inside one phase of one step, from the samples taken while its call ran (its
    child processes included). ``start_*``/``end_*`` are the first and last samples of the phase (what a
    leak is measured by), ``peak_*`` the highest. ``samples`` 0 means none was taken: the peaks are None."""

    worker_group: str
    role: str | None
    rank: int | None
    actor_name: str | None
    actor_id: str
    step: int
    phase: str
    peak_gpu_bytes: int | None
    peak_rss_bytes: int | None
    samples: int
    start_gpu_bytes: int | None = None
    end_gpu_bytes: int | None = None
    start_rss_bytes: int | None = None
    end_rss_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryGrowth:
    """Memory a phase takes and does not give back, step after step: ``bytes_per_step`` (the slope of the
    phase's end over the last ``steps`` steps, warm-up left out) against the median of its peers' rates."""

    worker_group: str
    role: str | None
    rank: int | None
    actor_name: str | None
    actor_id: str
    phase: str
    kind: str  # one of MEMORY_KINDS
    bytes_per_step: float
    steps: int
    peers_bytes_per_step: float | None


@dataclass(frozen=True, slots=True)
class Headroom:
    """A rank's peak against the limit that will kill it, and the steps left at its current growth (None
    when it does not grow)."""

    worker_group: str
    role: str | None
    rank: int | None
    actor_name: str | None
    actor_id: str
    kind: str  # one of MEMORY_KINDS
    peak_bytes: int | None
    limit_bytes: int | None
    limit_source: str | None  # one of LIMIT_SOURCES
    steps_to_limit: float | None

    @property
    def free_fraction(self) -> float | None:
        if self.peak_bytes is None or not self.limit_bytes:
            return None
        return max(0.0, 1.0 - self.peak_bytes / self.limit_bytes)


@dataclass(frozen=True, slots=True)
class EngineHold:
    """GPU memory a colocated rollout engine's processes still hold while the trainer's phase runs (it
    should fall once the engine sleeps), with the engine's own gauges where its /metrics answers."""

    actor_name: str | None
    actor_id: str
    phase: str
    gpu_bytes: int | None
    sleep_state: float | None = None  # vllm:engine_sleep_state (0 awake)
    kv_cache_usage: float | None = None  # vllm:kv_cache_usage_perc / sglang:token_usage, 0..1


@dataclass(frozen=True, slots=True)
class OomVerdict:
    """A rank that ran out of memory: which, in which phase and step, GPU or host, how it was found, and the
    lead-up (its memory in that phase over the last steps, its growth, its peers' peaks)."""

    worker_group: str | None
    role: str | None
    rank: int | None
    actor_name: str | None
    actor_id: str | None
    pid: int | None
    kind: str  # one of MEMORY_KINDS
    how: str  # one of OOM_HOWS
    at: float  # when it was seen (epoch seconds)
    step: int | None
    phase: str | None
    method: str | None
    message: str | None  # the error's own line ("CUDA out of memory. Tried to allocate 2.00 GiB …")
    lead_up: tuple[PhaseMemory, ...] = ()  # the rank's memory in that phase, oldest step first
    growth: MemoryGrowth | None = None
    peers_peak_bytes: tuple[tuple[int, int | None], ...] = ()  # (rank, peak in that phase) of its peers
    top_processes: tuple[tuple[int, str, int], ...] = ()  # (pid, name, bytes) as Ray's memory monitor listed


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What the engine knows of memory: the last steps by phase and rank, growth, headroom, engine holds and
    OOM verdicts. ``verl_peaks``: verl's own ``*/perf/max_memory_*`` at its last step (lifetime peaks, the
    max over ranks). ``note``: why something is missing (no history: a one-shot snapshot)."""

    by_phase: tuple[PhaseMemory, ...] = ()
    growth: tuple[MemoryGrowth, ...] = ()
    headroom: tuple[Headroom, ...] = ()
    engine_holds: tuple[EngineHold, ...] = ()
    oom: tuple[OomVerdict, ...] = ()
    verl_peaks: tuple[tuple[str, float], ...] = ()
    note: str | None = None
    # by_phase was not worked out: no view showed it (the TUI's main screen; ``Engine.show_memory_phases``)
    by_phase_skipped: bool = False
