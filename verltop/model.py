"""Plain, frozen dataclasses that every layer passes around.

Units are in the names (`_bytes`, `_s`, `_percent`, `_ms`); unknown is ``None``. Raw rows come from the
sources (``Raw*``); the analysis layer turns them into ``ActorRow`` and ``Snapshot``, which map one to one
onto the JSON contracts in the README.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from verltop import fmt

# The verl step phases in step order (the one definition: roles, the header and the timeline use it).
# "other" is the part of a step that no worker-group call covers (driver work: advantages, data loading).
PHASES = ("gen", "reward", "old_log_prob", "ref", "values", "update_critic", "update_actor", "weight_sync", "save",
          "other")


# ---------------------------------------------------------------- problems (errors as data)


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that went wrong, as data: a ``kind`` to branch on, a one-line ``message`` and, when the user
    can fix it, a ``remedy``. Code tests ``kind``; people read ``text``."""

    kind: str
    message: str
    remedy: str | None = None
    status: int | None = None  # HTTP status, when there was one

    @property
    def text(self) -> str:
        return f"{self.message}; {self.remedy}" if self.remedy else self.message

    def __str__(self) -> str:
        return self.text

    def with_message(self, message: str) -> Problem:
        return Problem(self.kind, message, self.remedy, self.status)


# ---------------------------------------------------------------- raw rows (parsed dashboard JSON)


@dataclass(frozen=True, slots=True)
class RawActor:
    """One row of /api/v0/actors?detail=1, reduced to what verltop uses.

    ``env`` holds only the rank keys of the runtime env (see ``sources.parse.RANK_ENV_KEYS``).
    """

    actor_id: str
    class_name: str
    state: str
    name: str | None
    node_id: str | None
    pid: int | None
    job_id: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    death_cause: str | None = None
    num_restarts: int | None = None
    placement_group_id: str | None = None

    def env_get(self, key: str) -> str | None:
        for k, v in self.env:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class RawTask:
    """One RUNNING (or recently seen) task of /api/v0/tasks?detail=1."""

    task_id: str
    name: str
    func_name: str
    state: str
    actor_id: str | None
    node_id: str | None
    worker_pid: int | None
    start_time_ms: float | None
    end_time_ms: float | None = None
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of a node."""

    index: int
    name: str | None
    util_percent: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    uuid: str | None = None
    # pid -> (gpu memory bytes or None, sm util percent or None)
    processes: tuple[tuple[int, int | None, float | None], ...] = ()
    power_w: float | None = None  # board power draw (NVML, or the dashboard's powerMw)


@dataclass(frozen=True, slots=True)
class ProcStat:
    """Host-side stats of one process (psutil on the local node, dashboard workers[] elsewhere)."""

    pid: int
    cpu_percent: float | None
    rss_bytes: int | None
    create_time_s: float | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Node:
    node_id: str
    ip: str | None
    hostname: str | None
    state: str = "ALIVE"
    is_head: bool = False
    cpu_percent: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    gpus: tuple[Gpu, ...] = ()
    # age of the node agent's own data (its `now` field), seconds; None when unknown
    stats_age_s: float | None = None
    procs: tuple[ProcStat, ...] = ()
    # Ray's object store on the node (raylet stats, refreshed every 15 s); spilled is cumulative
    object_store_used_bytes: int | None = None
    object_store_total_bytes: int | None = None
    object_store_spilled_bytes: int | None = None


# ---------------------------------------------------------------- analysed rows


@dataclass(frozen=True, slots=True)
class Stall:
    """Why a task looks stuck, as numbers; ``reason`` (the sentence) and ``tag`` (the table's words) are
    rendered from them by ``verltop.fmt``."""

    rule: str  # "dead" | "peers" | "median" | "age" | "gpu_idle" | "gpu_spin"
    running_s: float | None = None  # the task's age when the rule fired
    method: str | None = None
    median_s: float | None = None  # rule "median": the median of finished runs of this method
    ratio: float | None = None  # running_s / median_s (None when the median is zero)
    limit_s: float | None = None  # rule "age": --stall-after; rule "median": the limit that was passed
    peers: int | None = None  # rule "peers": how many peers finished this method since this task started
    peers_done_s: float | None = None  # rule "peers": seconds since the last of them finished
    state: str | None = None  # rule "dead": DEAD | RESTARTING
    cause: str | None = None  # rule "dead": Ray's death cause

    @property
    def reason(self) -> str:
        return fmt.stall_reason(self)

    @property
    def tag(self) -> str:
        return fmt.stall_tag(self)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "running_s": _round(self.running_s), "method": self.method,
                "median_s": _round(self.median_s), "ratio": _round(self.ratio), "limit_s": _round(self.limit_s),
                "peers": self.peers, "peers_done_s": _round(self.peers_done_s), "state": self.state,
                "cause": self.cause, "reason": self.reason}


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

    @property
    def stall_reason(self) -> str | None:
        return "; ".join(s.reason for s in self.stalls) if self.stalls else None

    def to_json(self) -> dict[str, Any]:
        return {
            "actor_id": self.actor_id,
            "actor_name": self.actor_name,
            "class_name": self.class_name,
            "pid": self.pid,
            "node_ip": self.node_ip,
            "state": self.state,
            "worker_group": self.worker_group,
            "rank": self.rank,
            "world_size": self.world_size,
            "role": self.role,
            "roles": list(self.roles),
            "task": self.task,
            "task_running_s": _round(self.task_running_s),
            "gpu_index": self.gpu_index,
            "gpu_util_percent": self.gpu_util_percent,
            "gpu_mem_bytes": self.gpu_mem_bytes,
            "cpu_percent": self.cpu_percent,
            "rss_bytes": self.rss_bytes,
            "stalled": self.stalled,
            "stall_reason": self.stall_reason,
            "stalls": [st.to_json() for st in self.stalls],
            "num_restarts": self.num_restarts,
            "gpu_power_w": self.gpu_power_w,
            "gpu_mem_peak_bytes": self.gpu_mem_peak_bytes,
            "rss_peak_bytes": self.rss_peak_bytes,
            "gpu_mem_growth_bytes_per_min": _round(self.gpu_mem_growth_bytes_per_min),
            "rss_growth_bytes_per_min": _round(self.rss_growth_bytes_per_min),
        }


@dataclass(frozen=True, slots=True)
class SourceStatus:
    name: str
    age_s: float | None  # since its last good answer
    error: Problem | None
    # how old its data may get before it is stale: a few of its own poll intervals
    stale_after_s: float = 6.0

    def stale_at(self, extra_s: float = 0.0) -> bool:
        return self.age_s is not None and self.age_s + extra_s > self.stale_after_s


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
    steps: tuple[Step, ...] = ()  # the last training steps, oldest first; the last may be running
    work: tuple[GroupWork, ...] = ()  # pending and retried tasks per worker group

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

    def to_json(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at,
            "source": {"address": self.address, "age_s": _round(self.age_s), "errors": self.errors},
            "nodes": [node_json(n) for n in self.nodes],
            "actors": [a.to_json() for a in self.actors],
            "phase": self.phase,
            "steps": [st.to_json() for st in self.steps],
        }


def node_json(n: Node) -> dict[str, Any]:
    return {
        "node_id": n.node_id,
        "ip": n.ip,
        "hostname": n.hostname,
        "cpu_percent": n.cpu_percent,
        "mem_used_bytes": n.mem_used_bytes,
        "mem_total_bytes": n.mem_total_bytes,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "util_percent": g.util_percent,
                "mem_used_bytes": g.mem_used_bytes,
                "mem_total_bytes": g.mem_total_bytes,
                "power_w": g.power_w,
            }
            for g in n.gpus
        ],
        "object_store_used_bytes": n.object_store_used_bytes,
        "object_store_total_bytes": n.object_store_total_bytes,
        "object_store_spilled_bytes": n.object_store_spilled_bytes,
    }


# ---------------------------------------------------------------- stacks


class Frame(NamedTuple):
    """One stack frame. A named tuple: stacks of thousands of ranks are hashed and compared in C."""

    func: str
    file: str
    line: int | None
    module: str | None = None

    def short(self) -> str:
        base = self.file.rsplit("/", 1)[-1]
        # `create_colocated_worker_cls.<locals>.WorkerDict.update` reads better as `WorkerDict.update`
        func = self.func.rsplit("<locals>.", 1)[-1]
        return f"{base}:{self.line} {func}" if self.line else f"{base} {func}"

    def to_json(self) -> dict[str, Any]:
        return {"func": self.func, "file": self.file, "line": self.line}


@dataclass(frozen=True, slots=True)
class ThreadStack:
    thread_id: int | None
    name: str | None
    active: bool | None
    owns_gil: bool | None
    frames: tuple[Frame, ...]  # innermost first, as py-spy prints them


@dataclass(frozen=True, slots=True)
class ProcessDump:
    """One py-spy sample of one process (or the reason there is none)."""

    pid: int
    threads: tuple[ThreadStack, ...] = ()
    error: Problem | None = None
    native: bool = False
    taken_at: float | None = None
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class BlockedOn:
    op: str
    frame: str | None
    evidence: tuple[str, ...] = ()
    gpu_wait: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "frame": self.frame}


@dataclass(frozen=True, slots=True)
class CollectiveInfo:
    source: str  # "flight_recorder" | "watchdog_log"
    op: str | None
    seq: int | None
    last_enqueued: int | None
    last_completed: int | None
    numel: int | None
    pg: str | None = None
    timeout_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "op": self.op,
            "seq": self.seq,
            "last_enqueued": self.last_enqueued,
            "last_completed": self.last_completed,
            "numel": self.numel,
        }


@dataclass(frozen=True, slots=True)
class RankDump:
    """One rank of a cross-rank dump, joined to its actor row and analysed."""

    actor: ActorRow
    samples: tuple[ProcessDump, ...]
    main: ThreadStack | None = None
    blocked_on: BlockedOn | None = None
    stuck: bool | None = None
    collective: CollectiveInfo | None = None
    error: Problem | None = None

    @property
    def stack(self) -> tuple[Frame, ...]:
        return self.main.frames if self.main else ()

    def to_json(self) -> dict[str, Any]:
        a = self.actor
        return {
            "actor_id": a.actor_id,
            "actor_name": a.actor_name,
            "class_name": a.class_name,
            "pid": a.pid,
            "node_ip": a.node_ip,
            "state": a.state,
            "worker_group": a.worker_group,
            "rank": a.rank,
            "world_size": a.world_size,
            "role": a.role,
            "roles": list(a.roles),
            "task": a.task,
            "task_running_s": _round(a.task_running_s),
            "blocked_on": self.blocked_on.to_json() if self.blocked_on else None,
            "collective": self.collective.to_json() if self.collective else None,
            "stuck": self.stuck,
            "stack": [f.to_json() for f in self.stack],
            "error": self.error.text if self.error else None,
        }


@dataclass(frozen=True, slots=True)
class Suspect:
    actor_id: str
    worker_group: str | None
    rank: int | None
    reason: str
    score: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"actor_id": self.actor_id, "worker_group": self.worker_group, "rank": self.rank,
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class StackGroup:
    """An equivalence class: ranks whose main-thread stacks are identical."""

    ranks: tuple[str, ...]  # labels such as "a1B2c3:3" or "controller"
    blocked_on: BlockedOn | None
    frames: tuple[Frame, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks),
            "blocked_on": self.blocked_on.to_json() if self.blocked_on else None,
            "frames": [f.short() for f in self.frames],
        }


@dataclass(frozen=True, slots=True)
class DumpReport:
    taken_at: float
    ranks: tuple[RankDump, ...]
    groups: tuple[StackGroup, ...]
    suspects: tuple[Suspect, ...]
    native: bool = False
    samples: int = 1
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at,
            "ranks": [r.to_json() for r in self.ranks],
            "groups": [g.to_json() for g in self.groups],
            "suspects": [s.to_json() for s in self.suspects],
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------- Flight Recorder


@dataclass(frozen=True, slots=True)
class FrEntry:
    """One collective of one rank's Flight Recorder dump."""

    pg: str
    seq: int
    op: str | None
    profiling_name: str | None
    input_sizes: Any
    state: str | None


@dataclass(frozen=True, slots=True)
class FrRank:
    """One rank's Flight Recorder state for one process group."""

    rank: int
    last_enqueued: int | None
    last_completed: int | None
    entries: tuple[FrEntry, ...]


# ---------------------------------------------------------------- steps (the timeline)


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

    def to_json(self) -> dict[str, Any]:
        ph, sk = dict(self.phases), dict(self.skew_s)
        return {"index": self.index, "started_at": round(self.started_at, 3), "duration_s": _round(self.duration_s),
                "phases": {p: _round(ph.get(p)) for p in PHASES},
                "skew_s": {p: _round(sk.get(p)) for p in PHASES if p != "other"}}


@dataclass(frozen=True, slots=True)
class GroupWork:
    """Work waiting in a worker group: pending tasks (submitted, not running yet) and retries (attempts past
    the first, running, pending or failed), and the actors that restarted."""

    group: str
    pending: int = 0
    retries: int = 0
    restarts: int = 0  # sum of num_restarts over its actors


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)
