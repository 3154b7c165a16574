"""What every view talks to: the ``Engine`` interface. ``Monitor`` implements it on a live cluster; a
recording implements it for replay, and the screens cannot tell the two apart."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verltop.model import Problem, Snapshot

if TYPE_CHECKING:
    from verltop.engine.doctor import DoctorJob
    from verltop.engine.doctor import ProgressFn as DoctorProgressFn
    from verltop.engine.dumps import DumpJob, ProgressFn
    from verltop.model import DumpReport, ObjectStoreReport
    from verltop.sources.pyspy import DumpOptions

Subscriber = Callable[[Snapshot], None]
DumpSubscriber = Callable[["DumpReport", "str | None"], None]


@dataclass(frozen=True, slots=True)
class Playback:
    """Where a replay stands (``Engine.playback()``; ``None`` on a live cluster)."""

    at_s: float  # the recorded time shown
    start_s: float
    end_s: float
    speed: float
    paused: bool
    ended: bool = False
    name: str = ""  # what is replayed (file or incident)


class Engine(ABC):
    """A source of snapshots (published as they change), and the actions a view can ask for."""

    address: str = ""
    live: bool = True  # False when replaying: no new dumps, no demo keys

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.latest: Snapshot | None = None
        self.paused = False
        self._subscribers: list[Subscriber] = []
        self._dump_subscribers: list[DumpSubscriber] = []

    # ---------------------------------------------------------- lifecycle

    @abstractmethod
    def start(self) -> None:
        """Begin polling (or playing) in the running event loop."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop every loop and release connections; safe to call twice."""

    # ---------------------------------------------------------- snapshots

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """``fn(snapshot)`` after each new snapshot (in the event loop). Returns the unsubscribe function."""
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def _publish(self, snap: Snapshot) -> None:
        self.latest = snap
        for fn in list(self._subscribers):
            fn(snap)

    def subscribe_dumps(self, fn: DumpSubscriber) -> Callable[[], None]:
        """``fn(report, scope)`` after each finished dump (a recording keeps them). Returns the unsubscribe."""
        self._dump_subscribers.append(fn)
        return lambda: self._dump_subscribers.remove(fn) if fn in self._dump_subscribers else None

    def _publish_dump(self, report: DumpReport, group: str | None) -> None:
        for fn in list(self._dump_subscribers):
            fn(report, group)

    def playback(self) -> Playback | None:
        """Where a replay stands; ``None`` on a live cluster."""
        return None

    def set_focus(self, node_ids: Iterable[str]) -> None:  # noqa: B027 - optional hint
        """The nodes whose rows a view shows (top first): their per-process figures are read first."""

    def show_memory_phases(self, on: bool) -> None:  # noqa: B027 - optional hint
        """Whether a view shows the memory by phase (``MemoryView.by_phase``): a live view that shows none
        (the TUI's main screen) leaves it out, the costliest part of the memory view at thousands of actors.
        Snapshots have it by default."""

    def want_processes(self, node_ids: Iterable[str]) -> list[str]:
        """Read the process trees of these nodes too (other nodes are not read until asked). Returns the
        nodes that will be read now; an engine that cannot read processes returns none."""
        return []

    @property
    @abstractmethod
    def has_data(self) -> bool:
        """Has the cluster answered at least once?"""

    @abstractmethod
    def connection_problem(self) -> Problem | None:
        """Why there is no data at all yet (the dashboard is down, the token is wrong), if so."""

    # ---------------------------------------------------------- actions

    @abstractmethod
    def dump(self, snap: Snapshot, scope: str | None, opts: DumpOptions,
             on_progress: ProgressFn | None = None) -> DumpJob:
        """A dump of ``scope`` — a worker group's prefix, or one actor's name or id (``d`` on a rollout server);
        every verl rank and the controller when ``None`` — ready to ``run()``."""

    def trend(self, actor_id: str, now: float | None = None) -> Any:
        """The actor's trend rings (``analysis.trends.Trend``: GPU util, GPU memory, RSS, power), if kept."""
        return None

    @abstractmethod
    async def log_tail(self, actor_id: str, stream: str = "err", lines: int = 200) -> tuple[str | None, Problem | None]:
        """The last lines of an actor's stdout (``out``) or stderr (``err``), or why not."""

    async def object_store(self, limit: int = 10000, timeout_s: float = 30.0) -> ObjectStoreReport | None:
        """Ray's object store read once (every raylet is asked: only on demand); ``None`` where this engine
        cannot read one (a recording)."""
        return None

    def doctor(self, path: str | None = None, node_timeout_s: float = 30.0,
               on_progress: DoctorProgressFn | None = None) -> DoctorJob | None:
        """A check of every node (versions, GPUs, NCCL environment, disks, clocks, ``path``), ready to
        ``run()``; ``None`` where this engine cannot run one (a recording)."""
        return None
