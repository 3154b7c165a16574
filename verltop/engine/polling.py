"""The state the monitor's pollers share, each source's ``SourceState`` and the poll intervals."""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verltop.analysis import roles as R
from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import BuildMemo, ClusterData, group_key
from verltop.analysis.stalls import StallSettings
from verltop.engine.base import Engine
from verltop.engine.memory_book import MemoryWatch
from verltop.engine.oom_book import OomBook
from verltop.engine.pending import PendingWatch
from verltop.engine.rollout_load import RolloutWatch
from verltop.engine.timeline import Timeline, TrendStore, Work
from verltop.engine.trees import RemoteTrees
from verltop.model import ActorRow, Node, Problem, RawActor, RawTask, Snapshot, SourceStatus
from verltop.sources import dashboard as D
from verltop.sources.config import Endpoint
from verltop.sources.http import DashboardClient
from verltop.sources.local import LocalSampler, local_addresses
from verltop.sources.probe_connect import watch_cluster_of

if TYPE_CHECKING:  # a dump's and RAS's model: loaded when one is made
    from verltop.model import DumpReport, RasReport

DETAIL_REFRESH_S = 30.0  # detail rows are re-read at least this often
_ID = operator.attrgetter("actor_id")
ROLES_EVERY_S = 15.0  # how often groups whose roles are unknown are looked up
FIRST_FRAME_GRACE_S = 1.0  # the first snapshot waits this long at most for sources slower than the actors
MAX_BACKOFF_S = 10.0  # a failing source is retried after 2, 4, 8, then every 10 s (unless Ray says when)


def backoff(prev_s: float) -> float:
    """The wait before a failing source's next try: a dashboard that is down is retried calmly, not hammered."""
    return min(MAX_BACKOFF_S, max(2.0, prev_s * 2 or 2.0))


@dataclass(frozen=True, slots=True)
class Intervals:
    actors_s: float = 2.0
    tasks_s: float = 2.0
    # The dashboard's node agents report every 5 s (REPORTER_UPDATE_INTERVAL_MS): nodes whose actors are
    # on screen are read every 5 s (/nodes/{id}: GPUs and per-worker CPU/RSS, ~0.1 MB); the all-node
    # summary (2.4 MB on 128 nodes) only feeds the header totals and rows off screen, every 15 s.
    nodes_s: float = 15.0
    node_detail_s: float = 5.0
    local_s: float = 1.0
    timeout_s: float = 10.0
    max_node_details: int = 8  # remote /nodes/{id} calls per cycle
    waiting_s: float = 5.0  # tasks waiting to run (per group, with retries)
    # process trees of other nodes (through a probe): only nodes asked about, while on screen
    trees_s: float = 10.0
    rollout_s: float = 5.0  # the rollout servers' own /metrics (this machine's)

    @classmethod
    def every(cls, interval_s: float, timeout_s: float = 10.0) -> Intervals:
        """Intervals for a user's ``--interval`` (node reads never faster than the agents report)."""
        return cls(actors_s=interval_s, tasks_s=interval_s, nodes_s=max(interval_s, 15.0),
                   node_detail_s=max(interval_s, 5.0), timeout_s=timeout_s)


@dataclass(slots=True)
class SourceState:
    name: str
    interval_s: float = 2.0
    value: Any = None
    ok_at: float | None = None
    error: Problem | None = None
    tries: int = 0
    backoff_s: float = 0.0

    def status(self, now: float) -> SourceStatus:
        return SourceStatus(self.name, None if self.ok_at is None else max(0.0, now - self.ok_at), self.error,
                            stale_after_s=2 * self.interval_s + 3.0)


@dataclass(slots=True)
class _Sources:
    actors: SourceState = field(default_factory=lambda: SourceState("actors"))
    tasks: SourceState = field(default_factory=lambda: SourceState("tasks"))
    nodes: SourceState = field(default_factory=lambda: SourceState("nodes"))
    local: SourceState = field(default_factory=lambda: SourceState("local"))
    engine: SourceState = field(default_factory=lambda: SourceState("engine"))  # verltop's own helper polls

    def all(self) -> list[SourceState]:
        return [self.actors, self.tasks, self.nodes, self.local, self.engine]


class PollState(Engine):
    """What the monitor's pollers share: the sources' last values, the task history they feed, and the
    event that tells the publisher something changed. Each poller (``poll_*.py``) is a mixin over it."""

    def __init__(
        self,
        endpoint: Endpoint,
        intervals: Intervals | None = None,
        stall: StallSettings | None = None,
        use_local: bool = True,
        use_nvml: bool | None = True,
        clock: Callable[[], float] = time.time,
        ras_addrs: tuple[str, ...] = (),
        timeline: bool = True,
    ) -> None:
        super().__init__(clock)
        self.endpoint = endpoint
        self.address = endpoint.address
        watch_cluster_of(endpoint.address)
        self.iv = intervals or Intervals()
        self.stall = stall or StallSettings()
        self.client = DashboardClient(endpoint)
        self.hist = TaskHistory()
        self.oom_book = OomBook()  # the OOM verdicts' memory of deaths
        self.src = _Sources()
        for st, iv in ((self.src.actors, self.iv.actors_s), (self.src.tasks, self.iv.tasks_s),
                       (self.src.nodes, self.iv.nodes_s), (self.src.local, self.iv.local_s)):
            st.interval_s = iv
        self.node_details: dict[str, Node] = {}
        self.pending = PendingWatch(self.client, SourceState("pending", interval_s=max(self.iv.nodes_s, 15.0)),
                                    self.iv.timeout_s)
        self.use_local = use_local
        self.sampler = LocalSampler(use_nvml=use_nvml) if use_local else None
        self._local_addrs = local_addresses(fqdn=False) if use_local else set()
        self._tasks: list[asyncio.Task] = []
        self.remote = RemoteTrees(interval_s=self.iv.trees_s)
        self._detail_cursor = 0
        self.truncated: str | None = None
        self.tasks_truncated: str | None = None  # the running tasks' list: cut at Ray's limit, or events lost
        self.seeded = False
        self._actor_cache: dict[str, RawActor] = {}
        self._states_synced = False  # the last base columns read were checked against the detail rows
        self._index: tuple[list[RawActor], dict[str, RawActor], dict[str, list[RawActor]]] | None = None
        self._row_memo = BuildMemo()  # what the last build worked out, reused where nothing changed
        # node id → (summary node, detail node, the two merged): the same merged object while neither changed,
        # so that the rows on it are reused as they are (a new Node each build made every row look changed)
        self._merged_nodes: dict[str, tuple[Node, Node, Node]] = {}
        self._actor_detail_at: float | None = None
        self._task_starts: dict[str, float] = {}
        self._task_objs: dict[str, RawTask] = {}
        self._task_detail_at: float | None = None
        self._last_task_poll: float | None = None
        self._failure_reads: dict[str, float] = {}  # method → when its FAILED calls were last read
        self._short_handed: dict[str, str | None] = {}  # methods a group runs on fewer ranks than it has
        self._group_sizes: tuple[dict, dict[str, int]] | None = None  # (the actors' map, its groups' live ranks)
        self._focus: dict[str, None] = {}  # node ids on screen, top first
        self._internal: dict[str, Problem] = {}  # helper polls that failed with a bug, until they succeed
        self._hist_free = asyncio.Event()
        self._hist_free.set()
        self._building = asyncio.Lock()  # one build at a time: builds share the history, trends and memos
        self._dirty = asyncio.Event()  # a poll brought something new
        self._dirty.set()
        self.memory_phases = True  # work out the memory view's by_phase (``show_memory_phases``)
        self._last_build = 0.0
        self.snapshots_built = 0
        self._first_built = asyncio.Event()  # the history seed waits for it (monitor.py)
        self.last_build_ms = 0.0
        self.ras_addrs = ras_addrs  # NCCL RAS addresses given by the user (else from the ranks' runtime env)
        self.ras: RasReport | None = None
        self.ras_problems: list[Problem] = []
        self.timeline = Timeline(self.client, self.iv.timeout_s, enabled=timeline)
        self.timeline.on_finished = self._feed_medians
        self.trends = TrendStore()
        self.memory = MemoryWatch()  # memory by phase and step (fed by the process reads)
        self.work = Work()
        self.waiting: list[RawTask] = []  # tasks submitted and not running (per-group counts)
        self.last_dump: DumpReport | None = None  # the latest dump of the whole job (its suspects may stick)
        # rollout servers on other nodes are found through their node's probe: on nodes whose processes were
        # asked for (as trees are), or on every node when ``rollout_probe`` (a watch that exports metrics)
        self.rollout_probe = False
        self.rollout = RolloutWatch(timeout_s=min(2.0, self.iv.timeout_s), find=self._rollout_sockets)

    def _record(self, st: SourceState, r: D.Result) -> bool:
        st.tries += 1
        if not r.unchanged or st.error is not None:
            self._dirty.set()
        if r.ok:
            st.value = r.value
            st.ok_at = r.taken_at
            st.error = None
            st.backoff_s = 0.0
            return True
        st.error = r.error
        if r.retry_after_s:
            st.backoff_s = r.retry_after_s
        else:
            st.backoff_s = backoff(st.backoff_s)
        return False

    def _feed_medians(self, tasks: list[RawTask]) -> None:
        """Finished runs the timeline read: the ones no poll saw end join the stall medians (called between
        the history's users: the timeline's round holds the history's gate)."""
        actors = self._actor_map()
        rows = [(t.task_id, t.actor_id, group_key(R.identity(a), a.class_name), R.method_of(t.func_name) or t.name,
                 t.start_time_ms / 1000, t.end_time_ms / 1000) for t in tasks
                if t.start_time_ms and t.end_time_ms and (a := actors.get(t.actor_id or "")) is not None
                and (R.method_of(t.func_name) or t.name) != "__init__"]
        if rows and self.hist.add_finished(rows):
            self._dirty.set()

    def _actor_index(self) -> tuple[dict[str, RawActor], dict[str, list[RawActor]]]:
        """The actors by id, and the live ones by node, worked out once per actors' list (the list itself is
        kept: its id could be a freed one's). Each node's detail read asks for both: at 10,000 actors, 32
        reads a cycle scanned 640,000 actors."""
        acts = self.src.actors.value or []
        c = self._index
        if c is None or c[0] is not acts:
            on: dict[str, list[RawActor]] = {}
            for a in acts:
                if a.state == "ALIVE" and a.node_id:
                    on.setdefault(a.node_id, []).append(a)
            c = self._index = (acts, dict(zip(map(_ID, acts), acts, strict=True)), on)
        return c[1], c[2]

    def _actor_map(self) -> dict[str, RawActor]:
        """Every actor by id (shared: read only)."""
        return self._actor_index()[0]

    def _actors_on(self, node_ids: frozenset[str] | set[str]) -> list[RawActor]:
        """The live actors on these nodes, in the actors' order."""
        on = self._actor_index()[1]
        if len(node_ids) == 1:
            return list(on.get(next(iter(node_ids)), ()))
        return [a for a in (self.src.actors.value or []) if a.node_id in node_ids and a.state == "ALIVE"]

    def _known_nodes(self) -> set[str]:
        return {n.node_id for n in (self.src.nodes.value or [])} | {a.node_id or "" for a in (self.src.actors.value or [])}

    async def _rollout_sockets(self, node_id: str, pids: list[int]
                               ) -> tuple[dict[int, list[tuple[str, int]]] | None, str | None]:
        """The listening sockets of rollout servers on another node, through its probe (where allowed)."""
        if not (self.rollout_probe or node_id in self.remote.asked):
            return None, None
        from verltop.sources.rollout import listening_many

        value, problem = await self.remote.call(node_id, 10.0, listening_many, pids)
        return (value, None) if problem is None else (None, f"its node's probe: {problem.text}")

    async def _hist_ready(self) -> None:
        await self._hist_free.wait()

    if TYPE_CHECKING:  # provided by the other mixins and Monitor
        def local_node_ids(self) -> frozenset[str]: ...
        def candidate_local_ids(self) -> frozenset[str]: ...
        def snapshot(self, now: float | None = None) -> Snapshot: ...
        def data(self, now: float | None = None) -> ClusterData: ...
        def ras_addresses(self, actors: tuple[ActorRow, ...] | list[ActorRow], gpu_host: bool = False
                          ) -> list[tuple[str, int]]: ...
        async def _guarded(self, fn: Callable, st: SourceState | None) -> None: ...
        async def read_failures(self, name: str | None = None) -> list[str]: ...
