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

# A resource demand or capacity: ``(("CPU", 10.0), ("GPU", 1.0))``, names as Ray spells them, sorted.
Resources = tuple[tuple[str, float], ...]


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
    death_cause: str | None = None  # the line that says why (see sources/causes.py)
    num_restarts: int | None = None
    placement_group_id: str | None = None
    # Ray's whole death cause (every context, not cut; credentials redacted): the death classifier reads it
    death_text: str | None = None
    death_kind: str | None = None  # runtime_env_failed | creation_task_failure | actor_died | oom ...
    required_resources: Resources = ()
    # the kinds of set-up its runtime env asks for (pip, conda, uv, container...): names only, never values
    env_setup: tuple[str, ...] = ()

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
    parent_task_id: str | None = None  # the submitter's task (an async actor's: its creation task)
    type: str | None = None  # NORMAL_TASK | ACTOR_CREATION_TASK | ACTOR_TASK | DRIVER_TASK


@dataclass(frozen=True, slots=True)
class RawObjectRef:
    """One row of /api/v0/objects: a reference held by ``owner_pid`` on ``owner_ip`` to the output of task
    ``task_id`` (the first 48 hex digits of the object id) that is not finished yet."""

    object_id: str
    task_status: str | None
    reference_type: str | None
    owner_pid: int | None
    owner_ip: str | None

    @property
    def task_id(self) -> str:
        return self.object_id[:48]


@dataclass(frozen=True, slots=True)
class RawJob:
    """A job's driver, from /api/v0/jobs (only these fields are read: never its runtime env)."""

    job_id: str
    status: str | None
    driver_pid: int | None
    driver_ip: str | None
    driver_node_id: str | None = None


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
    ppid: int | None = None  # set where the process tree was read (/proc here, a probe elsewhere)


@dataclass(frozen=True, slots=True)
class ProcTree:
    """One machine's processes below the given root pids (the live actors' processes there), and the loose
    ones that belong to no root: orphan candidates. Read from /proc here, through a probe on other nodes.

    ``procs``: every descendant of a root (``ppid`` set), parents before their children. ``loose``: processes
    under no root that were seen under one before (``left_by``: pid -> that root's pid), that carry an
    inference engine's title (``VLLM::…``, ``sglang::…``) with no live Ray worker above them, or that hold GPU
    memory (pids asked about by the caller)."""

    taken_at: float
    roots: tuple[int, ...]
    procs: tuple[ProcStat, ...] = ()
    loose: tuple[ProcStat, ...] = ()
    left_by: tuple[tuple[int, int], ...] = ()
    node_id: str | None = None  # the node a probe read it on; None: this machine (every local node)
    error: Problem | None = None


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
    resources_total: Resources = ()  # logical resources (CPU, GPU, memory, custom), from /api/v0/nodes


# ---------------------------------------------------------------- analysed rows


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

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "title": self.title, "cpu_percent": self.cpu_percent,
                "rss_bytes": self.rss_bytes, "gpu_index": self.gpu_index, "gpu_mem_bytes": self.gpu_mem_bytes}

    def orphan_json(self) -> dict[str, Any]:
        return {**self.to_json(), "node_ip": self.node_ip, "actor_id": self.actor_id}


@dataclass(frozen=True, slots=True)
class Stall:
    """Why a task looks stuck, as numbers; ``reason`` (the sentence) and ``tag`` (the table's words) are
    rendered from them by ``verltop.fmt``."""

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
    # which one (a placement group's name, a demand), Ray's scheduling state, and for how long
    waits_for: str | None = None
    target: str | None = None
    scheduling_state: str | None = None
    waiting_s: float | None = None

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
                "cause": self.cause, "op": self.op, "count": self.count, "expected": self.expected,
                "restarts": self.restarts, "waits_for": self.waits_for, "target": self.target,
                "scheduling_state": self.scheduling_state, "waiting_s": _round(self.waiting_s),
                "reason": self.reason}


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
            "processes": None if self.processes_read_at is None else [p.to_json() for p in self.processes],
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


# ---------------------------------------------------------------- pending work (raw rows and analysed items)


@dataclass(frozen=True, slots=True)
class RawPlacementGroup:
    """One row of /api/v0/placement_groups?detail=1. Ray gives no strategy here (see ``ClusterLoad``)."""

    pg_id: str
    name: str | None
    state: str  # PENDING | RESCHEDULING | CREATED | REMOVED
    scheduling_state: str | None  # stats.scheduling_state: INFEASIBLE | NO_RESOURCES | QUEUED | ... | FINISHED
    bundles: tuple[Resources, ...]  # unit_resources of each bundle
    bundle_nodes: tuple[str | None, ...] = ()  # where each bundle sits (None until placed)
    job_id: str | None = None
    created_s: float | None = None  # stats.creation_request_received_ns, as wall-clock seconds
    attempts: int | None = None  # stats.scheduling_attempt
    detached: bool = False


@dataclass(frozen=True, slots=True)
class RawPendingTask:
    """A task Ray has not given a node yet (PENDING_NODE_ASSIGNMENT): a normal task or an actor's creation."""

    task_id: str
    name: str
    func_name: str
    type: str | None  # NORMAL_TASK | ACTOR_CREATION_TASK | ACTOR_TASK
    state: str
    job_id: str | None = None
    actor_id: str | None = None
    placement_group_id: str | None = None
    demand: Resources = ()
    created_s: float | None = None  # creation_time_ms, as seconds


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node's logical resources: ``(name, total, available)`` per resource."""

    node_id: str
    resources: tuple[tuple[str, float, float], ...]


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """What /api/cluster_status says: per-node use of logical resources and the strategies of the pending
    placement-group demands (``(bundles, strategy)``, bundles as in ``RawPlacementGroup.bundles``, sorted)."""

    nodes: tuple[NodeLoad, ...] = ()
    pg_strategies: tuple[tuple[tuple[Resources, ...], str], ...] = ()


@dataclass(frozen=True, slots=True)
class Capacity:
    """A demand against the cluster, as numbers: the resource that does not fit, how much of it one node
    would need, and the node that comes closest (its total and what is free on it)."""

    verdict: str  # "infeasible" (no node could ever hold it) | "busy" (held by others) | "fits" | "unknown"
    resource: str | None = None
    need: float | None = None
    node_ip: str | None = None
    node_total: float | None = None
    node_free: float | None = None
    nodes: int = 0  # live nodes compared
    # what ``need`` is for: "node" (all bundles together, STRICT_PACK) | "bundle" (the ``bundle``-th one to
    # place) | "nodes" (STRICT_SPREAD: ``need`` nodes; ``node_total``/``node_free`` count those that could / can)
    per: str = "node"
    bundle: int | None = None
    taken: float | None = None  # per "bundle": how much of ``resource`` the bundles before it take on that node

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "resource": self.resource, "need": self.need, "node_ip": self.node_ip,
                "node_total": self.node_total, "node_free": self.node_free, "nodes": self.nodes}


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A placement group, actor or task that Ray has not placed yet, with why (``reason`` is rendered from
    the numbers by ``verltop.fmt``)."""

    kind: str  # "placement_group" | "actor" | "task"
    id: str
    name: str | None
    worker_group: str | None
    state: str | None
    scheduling_state: str | None
    demand: tuple[Resources, ...]  # per bundle for a placement group; one entry for an actor or task
    strategy: str | None
    waiting_s: float | None
    since_s: float | None = None  # wall-clock start of the wait (lets a view tick it)
    capacity: Capacity | None = None
    waits_for: str | None = None  # actors: "placement_group" | "resources" | "runtime_env" | "worker"
    target: str | None = None  # actors: the placement group (name) they wait for
    detail: str | None = None  # an extra fact for the reason (the runtime env kinds being set up)
    job_id: str | None = None  # the Ray job that asked for it (its driver may be the one waiting)

    @property
    def reason(self) -> str:
        return fmt.pending_reason(self)

    def waited_s(self, now: float) -> float | None:
        return self.waiting_s if self.since_s is None else max(0.0, now - self.since_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "name": self.name,
            "worker_group": self.worker_group,
            "state": self.state,
            "scheduling_state": self.scheduling_state,
            "demand": [dict(b) for b in self.demand],
            "strategy": self.strategy,
            "waiting_s": _round(self.waiting_s),
            "reason": self.reason,
        }


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
            "orphans": None if self.orphans is None else [o.orphan_json() for o in self.orphans],
            "pending": [p.to_json() for p in self.pending],
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
class Death:
    """Why a process died, classified from Ray's cause and its own last log lines."""

    kind: str  # nccl_timeout | cuda_oom | host_oom | exception | signal | exit | unknown
    detail: str | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ChildProc:
    """A descendant process of an actor (a vLLM engine core or TP worker, an SGLang scheduler, a sandbox),
    as a dump covers it."""

    actor_id: str
    pid: int
    ppid: int | None
    title: str | None  # the first NUL-separated field of its cmdline (setproctitle's title)


@dataclass(frozen=True, slots=True)
class RankDump:
    """One rank of a cross-rank dump, joined to its actor row and analysed. A descendant process of an actor
    is a RankDump too: ``actor`` is its actor's row with the child's pid, ``process`` its title."""

    actor: ActorRow
    samples: tuple[ProcessDump, ...]
    main: ThreadStack | None = None
    blocked_on: BlockedOn | None = None
    stuck: bool | None = None
    collective: CollectiveInfo | None = None
    error: Problem | None = None
    process: str | None = None  # a child's title; None on the actor's own entry
    parent_pid: int | None = None  # a child's parent process
    death: Death | None = None

    @property
    def stack(self) -> tuple[Frame, ...]:
        return self.main.frames if self.main else ()

    @property
    def key(self) -> str:
        """Unique per dumped process: the actor id, ``actor_id:pid`` for a child, ``driver:job`` for a driver."""
        return f"{self.actor.actor_id}:{self.actor.pid}" if self.process is not None else self.actor.actor_id

    @property
    def is_driver(self) -> bool:
        return self.actor.role == "driver"

    def to_json(self) -> dict[str, Any]:
        a = self.actor
        return {
            "actor_id": None if self.is_driver else a.actor_id,
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
            "process": self.process,
            "parent_pid": self.parent_pid,
            "blocked_on": self.blocked_on.to_json() if self.blocked_on else None,
            "collective": self.collective.to_json() if self.collective else None,
            "stuck": self.stuck,
            "stack": [f.to_json() for f in self.stack],
            "error": self.error.text if self.error else None,
            "death": self.death.to_json() if self.death else None,
        }


@dataclass(frozen=True, slots=True)
class Suspect:
    actor_id: str
    worker_group: str | None
    rank: int | None
    reason: str
    score: float = 0.0
    pid: int | None = None  # the process: the actor's own, or one of its children
    placement_group_id: str | None = None  # set when the suspect is a placement group Ray cannot place

    def to_json(self) -> dict[str, Any]:
        return {"actor_id": self.actor_id or None, "worker_group": self.worker_group, "rank": self.rank,
                "pid": self.pid, "reason": self.reason, "placement_group_id": self.placement_group_id}


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One hop of a wait chain: a task (or a process) that waits on the next hop."""

    actor_id: str | None
    actor_name: str | None
    task: str | None  # the Ray task, or a child process's title
    pid: int | None

    def to_json(self) -> dict[str, Any]:
        return {"actor_id": self.actor_id, "actor_name": self.actor_name, "task": self.task, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class ChainEnd:
    """Where a wait chain ends: a process that waits on nothing we can see."""

    pid: int | None
    process: str | None  # its title when it is a child process
    frame: str | None
    reason: str
    # a wait on workers that do not exist yet ends in the placement group Ray has not placed for them
    placement_group_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "process": self.process, "frame": self.frame, "reason": self.reason,
                "placement_group_id": self.placement_group_id}


@dataclass(frozen=True, slots=True)
class Chain:
    """Who waits on whom, from the top (the driver or the controller) down to the process holding it up."""

    path: tuple[ChainLink, ...]
    ends_in: ChainEnd

    def to_json(self) -> dict[str, Any]:
        return {"path": [p.to_json() for p in self.path], "ends_in": self.ends_in.to_json()}


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
    chains: tuple[Chain, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at,
            "ranks": [r.to_json() for r in self.ranks],
            "groups": [g.to_json() for g in self.groups],
            "suspects": [s.to_json() for s in self.suspects],
            "chains": [c.to_json() for c in self.chains],
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


# ---------------------------------------------------------------- doctor (pre-flight checks, one column per node)

CheckValue = str | int | float | bool | None  # None: could not be read on that node


@dataclass(frozen=True, slots=True)
class DoctorNode:
    """One node's column: each check's value by name, or why the node could not be checked (``error``)."""

    node_id: str
    ip: str | None
    hostname: str | None
    label: str  # the column's name and the key in mismatches: the IP (+ the node id's start where IPs repeat)
    is_head: bool = False
    checks: tuple[tuple[str, CheckValue], ...] = ()
    error: Problem | None = None

    def get(self, name: str) -> CheckValue:
        for k, v in self.checks:
            if k == name:
                return v
        return None

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "ip": self.ip, "hostname": self.hostname, "label": self.label,
                "is_head": self.is_head, "checks": dict(self.checks), "error": self.error.text if self.error else None}


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A check whose value is not the same on every node; ``deviants`` are the labels of the nodes that differ
    from the majority (all of them when no value has one)."""

    check: str
    values: tuple[tuple[str, CheckValue], ...]  # node label -> value, nodes that have one
    majority: CheckValue
    deviants: tuple[str, ...]
    problem: Problem  # the sentence and its fix

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "values": dict(self.values), "majority": self.majority,
                "deviants": list(self.deviants), "text": self.problem.text}


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem on some nodes (a check over its limit, a node that did not answer), with its fix."""

    check: str | None
    nodes: tuple[str, ...]  # labels
    problem: Problem

    @property
    def text(self) -> str:
        return self.problem.text


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """``verltop doctor``: every node's checks, what differs between nodes, and what is wrong."""

    taken_at: float
    nodes: tuple[DoctorNode, ...]
    checks: tuple[str, ...]  # the rows, in display order
    mismatches: tuple[Mismatch, ...] = ()
    problems: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    path: str | None = None
    elapsed_s: float | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"taken_at": self.taken_at, "nodes": [n.to_json() for n in self.nodes],
                "mismatches": [m.to_json() for m in self.mismatches], "problems": [p.text for p in self.problems],
                "notes": list(self.notes), "path": self.path, "elapsed_s": _round(self.elapsed_s)}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


# ---------------------------------------------------------------- NCCL RAS


@dataclass(frozen=True, slots=True)
class RasRank:
    """One rank of a communicator as NCCL's RAS reports it (answering, or missing)."""

    rank: int | None
    host: str | None
    pid: int | None
    cuda_dev: int | None
    counts: tuple[tuple[str, int], ...] = ()  # collective type → operations enqueued ("AllReduce", 6)
    missing: bool = False  # listed under missing ranks: its process did not answer
    unresponsive: bool | None = None
    considered_dead: bool | None = None
    abort: bool | None = None  # the communicator was aborted in this rank
    async_error: int | None = None

    def count(self, op: str) -> int | None:
        for k, v in self.counts:
            if k == op:
                return v
        return None


@dataclass(frozen=True, slots=True)
class RasComm:
    """One NCCL communicator: its ranks that answered and the ones that did not."""

    hash: str
    size: int | None
    ranks: tuple[RasRank, ...]
    missing: tuple[RasRank, ...] = ()


@dataclass(frozen=True, slots=True)
class RasReport:
    """One RAS status answer (all communicators of every NCCL process of the job that one RAS thread knows)."""

    nccl_version: str | None
    comms: tuple[RasComm, ...]
    missing_processes: tuple[tuple[int | None, str | None], ...] = ()  # (pid, host) of job processes not answering
    source: str = "json"  # "json" | "text"
