"""Analysed rows: one actor (with its stalls and processes) as the table shows it, and a source's health."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.model.problems import Problem
from verltop.model.raw import Resources


@dataclass(slots=True, eq=True)
class ProcRow:
    """A process below an actor (its descendant: an inference engine, a TP worker, a sandbox) or an orphan
    (it holds GPU memory, or was an actor's, and no live actor is above it). ``snapshot --json`` writes the
    first seven fields for ``actors[].processes`` and adds ``node_ip`` and ``actor_id`` for ``orphans``.

    Not frozen, like ``ActorRow`` and for the same reason (built by the thousand every snapshot); treat it as
    immutable all the same."""

    pid: int
    ppid: int | None
    title: str | None  # /proc/PID/cmdline's first field: what setproctitle set (VLLM::Worker_TP1)
    cpu_percent: float | None
    rss_bytes: int | None
    gpu_index: int | None  # the GPU where it holds the most memory
    gpu_mem_bytes: int | None  # its memory on every GPU
    depth: int = 1  # 1: a child of the actor, 2: a grandchild, ...; orphans: 1
    node_id: str | None = None
    node_ip: str | None = None
    # a descendant: its actor; an orphan: the actor it was last seen under (now gone), if known
    actor_id: str | None = None
    gpu_mem_total_bytes: int | None = None  # that GPU's total (bars)


@dataclass(frozen=True, slots=True)
class Stall:
    """Why a task looks stuck, as numbers; the sentence and the table's words are made from them in
    ``verltop.text.stalls``."""

    # "dead" | "peers" | "median" | "age" | "gpu_idle" | "gpu_spin" | "pending" | "cannot_start" | "restarting"
    rule: str
    running_s: float | None = None  # the task's age when the rule fired
    method: str | None = None
    median_s: float | None = None  # rule "median": the median of finished runs of this method
    ratio: float | None = None  # running_s / median_s (None when the median is zero)
    limit_s: float | None = None  # rule "age": --stall-after; rule "median": the limit that was passed
    peers: int | None = None  # rule "peers": how many peers finished this method since this task started
    peers_done_s: float | None = None  # rule "peers": seconds since the last of them finished
    state: str | None = None  # rule "dead": DEAD | RESTARTING; rule "ras": behind | mismatch | missing
    # rule "dead": Ray's death cause; rule "ras" mismatch: the peers' collective; rules "cannot_start",
    # "restarting": the line that says why
    cause: str | None = None
    op: str | None = None  # rule "ras": the collective type (NCCL's name, e.g. AllReduce)
    count: int | None = None  # rule "ras": how many of them this rank enqueued
    expected: int | None = None  # rule "ras": how many its peers enqueued
    restarts: int | None = None  # rules "restarting", "dead": how often Ray restarted the actor
    # rule "pending": what the actor waits for ("placement_group" | "resources" | "runtime_env" | "worker"),
    # which placement group (its name), the resources it demands, Ray's scheduling state, and for how long
    waits_for: str | None = None
    target: str | None = None
    scheduling_state: str | None = None
    waiting_s: float | None = None
    demand: Resources = ()  # waits_for "resources": the actor's demand


@dataclass(slots=True, eq=True)
class ActorRow:
    """One actor as shown in the table and in ``snapshot --json``.

    Not frozen, unlike the rest of the model, for speed: a 1,000-GPU job builds 1,000 of these every
    snapshot and frozen init costs 2x. Treat it as immutable all the same (``dataclasses.replace``).
    """

    actor_id: str
    actor_name: str | None
    class_name: str
    pid: int | None
    node_id: str | None
    node_ip: str | None
    state: str
    worker_group: str | None
    rank: int | None
    world_size: int | None
    role: str
    roles: tuple[str, ...]
    task: str | None
    task_id: str | None
    task_running_s: float | None
    gpu_index: int | None
    gpu_util_percent: float | None
    gpu_mem_bytes: int | None
    gpu_mem_total_bytes: int | None
    cpu_percent: float | None
    rss_bytes: int | None
    host_mem_total_bytes: int | None
    stalls: tuple[Stall, ...] = ()
    death_cause: str | None = None
    job_id: str | None = None
    # Flight Recorder file prefixes from the actor's runtime env (TORCH_FR_DUMP_TEMP_FILE or its older
    # name, TORCH_NCCL_DEBUG_INFO_PIPE_FILE); paths only, never shown with other env values
    fr_dump_prefix: str | None = None
    fr_pipe_prefix: str | None = None
    task_start_s: float | None = None  # lets a view tick ages without a new snapshot
    ras_addr: str | None = None  # NCCL_RAS_ADDR from the runtime env (where this rank's RAS thread listens)
    # its descendant processes (not its own), parents before children; their GPU memory is included in
    # gpu_mem_bytes above. ``processes_read_at``: when they were read; None = not read (a node verltop cannot
    # see into, or the actor is not alive): ``processes`` is then () and the JSON says null
    processes: tuple[ProcRow, ...] = ()
    processes_read_at: float | None = None
    death_text: str | None = None  # Ray's whole death cause (death_cause is its first line)
    num_restarts: int | None = None
    gpu_power_w: float | None = None
    # memory forensics (analysis/trends.py): high-water marks since first seen, growth over the trend ring
    gpu_mem_peak_bytes: int | None = None
    rss_peak_bytes: int | None = None
    gpu_mem_growth_bytes_per_min: float | None = None
    rss_growth_bytes_per_min: float | None = None
    trend: str | None = None  # a sparkline of the actor's memory (GPU memory if it has a GPU, else RSS)

    def running_s(self, now: float) -> float | None:
        """Task age at ``now`` (the table ticks every second between snapshots)."""
        if self.task_start_s is None:
            return self.task_running_s
        return max(0.0, now - self.task_start_s)

    @property
    def stalled(self) -> bool:
        return bool(self.stalls)


@dataclass(frozen=True, slots=True)
class SourceStatus:
    name: str
    age_s: float | None  # since its last good answer
    error: Problem | None
    # how old its data may get before it is stale: a few of its own poll intervals
    stale_after_s: float = 6.0

    def stale_at(self, extra_s: float = 0.0) -> bool:
        return self.age_s is not None and self.age_s + extra_s > self.stale_after_s
