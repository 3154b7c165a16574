"""Stacks and dumps: py-spy samples, what each rank waits in, wait chains and suspects, and why (as data:
``verltop.text.chains`` and ``verltop.text.suspects`` put the reasons in words)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from verltop.model.memory import OomVerdict
from verltop.model.pending import PendingItem
from verltop.model.problems import Problem
from verltop.model.ras import RasFinding
from verltop.model.rows import ActorRow


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


@dataclass(frozen=True, slots=True)
class Death:
    """Why a process died, classified from Ray's cause and its own last log lines."""

    kind: str  # nccl_timeout | cuda_oom | host_oom | exception | signal | exit | unknown
    detail: str | None


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


@dataclass(frozen=True, slots=True)
class EndWhy:
    """Why a wait chain stops at a process: it waits on nothing a dump can see."""

    # dead | unreadable (no stack) | own_code | http | children (none dumped or at work) | zmq
    # | not_dumped (a ray.get on tasks no dumped process runs) | peers (a collective none of its peers is outside)
    # | idle | not_placed (a ray.get on workers that do not exist yet) | said (a sentence an older verltop wrote)
    kind: str
    frame: str | None = None  # where it waits (``file:line func``)
    what: str | None = None  # what it waits in (``ray.get``, ``all_reduce #5``, ``recv_multipart``)
    stuck: bool | None = None  # its stack did not move between samples; False: it moved; None: not known
    state: str | None = None  # dead: DEAD or RESTARTING
    death: Death | None = None  # dead: why it died
    error: str | None = None  # unreadable: why its stack could not be read
    pending: PendingItem | None = None  # not_placed: the placement group Ray has not placed
    text: str | None = None  # said: the recorded sentence


@dataclass(frozen=True, slots=True)
class Peers:
    """The ranks of a group a reason measures a suspect against: their numbers (where known) and how many."""

    ranks: tuple[int, ...]
    count: int


@dataclass(frozen=True, slots=True)
class Fate:
    """How a rank died, as a reason quotes it: its classified death, else Ray's death cause."""

    state: str  # DEAD | RESTARTING
    death: Death | None = None
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class Where:
    """Where a suspect is while its peers wait."""

    kind: str  # at (in ``task`` at ``frame``) | waits (in ``op`` at ``frame``) | unreadable | elsewhere
    task: str | None = None
    op: str | None = None
    frame: str | None = None
    error: str | None = None  # unreadable: why its stack could not be read


@dataclass(frozen=True, slots=True)
class SuspectWhy:
    """One reason a process (or a placement group) is a suspect."""

    # dead_waited: it died while its live peers wait in ``op``
    # dead_live_on: it died while its peers live on
    # died_first: the whole group died; it of its own cause, ``after`` of theirs
    # timed_out: NCCL's watchdog killed it in ``op``; no live rank is outside it
    # mismatch: it waits in ``op`` while its peers wait in ``ops``
    # not_in / not_seen: its peers wait in ``op``, it is ``where`` (not_seen: its stack was not read)
    # controller: the controller waits in ray.get at ``frame``; its peers finished, it is ``where``
    # tp: a TP worker (``process``) not in ``ops`` with its TP peers of ``owner`` (children of ``pid``)
    # chain_end: the end of ``chain`` | not_placed: ``pending`` (``role`` waits on it in ``op`` at ``frame``)
    # ras: what NCCL RAS says of it (``finding``) | said: a sentence an older verltop recorded (``text``)
    # peers_failed: ``peers`` of ``group`` failed in their call ``op`` ``ago_s`` ago with a collective's
    # timeout or abort (``text``) while it never entered the collective: it is ``where``
    # oom: it ran out of memory (``oom``, the verdict) while ``peers`` of ``group`` wait for it in ``op``
    kind: str
    group: str | None = None  # the worker group
    op: str | None = None
    ops: tuple[str, ...] = ()
    peers: Peers | None = None
    where: Where | None = None
    stuck: bool | None = None
    fate: Fate | None = None
    after: tuple[Fate, ...] = ()  # died_first: the ranks that died after it
    after_peers: Peers | None = None
    timed_out: Peers | None = None  # not_in / not_seen: the ranks NCCL's watchdog killed in ``op``
    seq: int | None = None  # not_in: the collective its peers reached and it never did (NCCL's count) ...
    enqueued: int | None = None  # ... and the last one it enqueued
    frame: str | None = None
    controller_waits: bool = False  # the controller waits on it in ray.get (at ``controller_at``)
    controller_at: str | None = None
    process: str | None = None
    owner: str | None = None
    pid: int | None = None
    role: str | None = None  # not_placed: who waits ("driver" | "controller")
    chain: Chain | None = None
    pending: PendingItem | None = None
    finding: RasFinding | None = None
    text: str | None = None  # said: the sentence; peers_failed: the peers' error
    ago_s: float | None = None  # peers_failed: how long ago the last of them failed
    still: bool = False  # named by an earlier dump with the same task and stack (``analysis.sticky``)
    oom: OomVerdict | None = None  # oom: the verdict


@dataclass(frozen=True, slots=True)
class Suspect:
    """A process (or a placement group) that holds the others up, and why (one reason or several)."""

    actor_id: str
    worker_group: str | None
    rank: int | None
    why: tuple[SuspectWhy, ...]
    score: float = 0.0
    pid: int | None = None  # the process: the actor's own, or one of its children
    placement_group_id: str | None = None  # set when the suspect is a placement group Ray cannot place


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One hop of a wait chain: a task (or a process) that waits on the next hop."""

    actor_id: str | None
    actor_name: str | None
    task: str | None  # the Ray task, or a child process's title
    pid: int | None


@dataclass(frozen=True, slots=True)
class ChainEnd:
    """Where a wait chain ends: a process that waits on nothing we can see."""

    pid: int | None
    process: str | None  # its title when it is a child process
    frame: str | None
    why: EndWhy
    # a wait on workers that do not exist yet ends in the placement group Ray has not placed for them
    placement_group_id: str | None = None


@dataclass(frozen=True, slots=True)
class Chain:
    """Who waits on whom, from the top (the driver or the controller) down to the process holding it up."""

    path: tuple[ChainLink, ...]
    ends_in: ChainEnd


@dataclass(frozen=True, slots=True)
class StackGroup:
    """An equivalence class: ranks whose main-thread stacks are identical."""

    ranks: tuple[str, ...]  # labels such as "a1B2c3:3" or "controller"
    blocked_on: BlockedOn | None
    frames: tuple[Frame, ...]


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
