"""What every view talks to: the ``Engine`` interface. ``Monitor`` implements it on a live cluster; a
recording implements it for replay, and the screens cannot tell the two apart."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from verltop.model import Problem, Snapshot

if TYPE_CHECKING:
    from verltop.engine.dumps import DumpJob, ProgressFn
    from verltop.sources.pyspy import DumpOptions

Subscriber = Callable[[Snapshot], None]


class Engine(ABC):
    """A source of snapshots (published as they change), and the actions a view can ask for."""

    address: str = ""
    live: bool = True  # False when replaying: no new dumps, no demo keys

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.latest: Snapshot | None = None
        self.paused = False
        self._subscribers: list[Subscriber] = []

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

    def set_focus(self, node_ids: Iterable[str]) -> None:  # noqa: B027 - optional hint
        """The nodes whose rows a view shows (top first): their per-process figures are read first."""

    @property
    @abstractmethod
    def has_data(self) -> bool:
        """Has the cluster answered at least once?"""

    @abstractmethod
    def connection_problem(self) -> Problem | None:
        """Why there is no data at all yet (the dashboard is down, the token is wrong), if so."""

    # ---------------------------------------------------------- actions

    @abstractmethod
    def dump(self, snap: Snapshot, group: str | None, opts: DumpOptions,
             on_progress: ProgressFn | None = None) -> DumpJob:
        """A dump of ``group`` (every verl rank and the controller when ``None``), ready to ``run()``."""

    def trend(self, actor_id: str, now: float | None = None) -> Any:
        """The actor's trend rings (``analysis.trends.Trend``: GPU util, GPU memory, RSS, power), if kept."""
        return None

    @abstractmethod
    async def log_tail(self, actor_id: str, stream: str = "err", lines: int = 200) -> tuple[str | None, Problem | None]:
        """The last lines of an actor's stdout (``out``) or stderr (``err``), or why not."""
