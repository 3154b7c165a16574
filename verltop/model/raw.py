"""Raw rows: the dashboard's JSON (and the local node's reads), parsed and reduced to what verltop uses."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.model.problems import Problem

# A resource demand or capacity: ``(("CPU", 10.0), ("GPU", 1.0))``, names as Ray spells them, sorted.
Resources = tuple[tuple[str, float], ...]


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

    def __hash__(self) -> int:
        # by its id alone (equal rows have equal ids): the roles' caches hash every actor on every poll, and
        # hashing all sixteen fields was a twentieth of the refresh at 1,024 actors
        return hash(self.actor_id)

    def env_get(self, key: str) -> str | None:
        for k, v in self.env:
            if k == key:
                return v
        return None


@dataclass(slots=True, unsafe_hash=True)
class RawTask:
    """One RUNNING (or recently seen) task of /api/v0/tasks?detail=1.

    Not frozen, for speed (a frozen init costs 3.5x: 1,024 of these each time the ranks' calls change). Treat
    it as immutable all the same (``evolve``); it hashes by value, as a frozen one does.
    """

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
    error: str | None = None  # a FAILED task's error: the exception's line of Ray's message (detail rows)


@dataclass(frozen=True, slots=True)
class RawObjectRef:
    """One row of /api/v0/objects: a reference held by ``owner_pid`` on ``owner_ip`` to the output of task
    ``task_id`` (the first 48 hex digits of the object id) that is not finished yet."""

    object_id: str
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
    submission_id: str | None = None  # jobs started with `ray job submit` (their driver's log is served)


@dataclass(slots=True, unsafe_hash=True)
class Gpu:
    """One GPU of a node. Not frozen, for speed (each node report makes eight); treat it as immutable."""

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
