"""The Textual app: owns the Collector (the one poller), turns its data into Snapshots, routes keys."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual.app import App
from textual.binding import Binding

from verltop.analysis.stalls import StallSettings
from verltop.model import Snapshot
from verltop.sources.config import Endpoint
from verltop.sources.poller import Collector, Intervals


class VerltopApp(App):
    CSS_PATH = "verltop.tcss"
    TITLE = "verltop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False, id="quit-ctrl-c")]

    def __init__(
        self,
        endpoint: Endpoint,
        intervals: Intervals | None = None,
        stall: StallSettings | None = None,
        use_local: bool = True,
        demo: Any = None,
        collector: Collector | None = None,
        clock: Any = None,
        autostart: bool = True,
    ) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.collector = collector or Collector(endpoint, intervals, stall, use_local=use_local)
        self.demo = demo
        self.snapshot: Snapshot | None = None
        self.clock = clock or time.time
        self.autostart = autostart
        self._refresh_pending = False
        self._last_rebuild = 0.0
        self._last_trim = time.monotonic()
        self.snapshots_built = 0
        self.last_build_ms = 0.0

    def on_mount(self) -> None:
        from verltop.ui.screens.main import MainScreen

        self.push_screen(MainScreen())
        if self.autostart:
            self.collector.start(self._source_updated)
        self.set_interval(1.0, self._tick)

    @property
    def min_rebuild_s(self) -> float:
        """Sources report at different moments; join them into one view per poll interval. Ages and
        clocks tick every second without a rebuild (``_tick``)."""
        return min(self.collector.iv.actors_s, self.collector.iv.tasks_s)

    def _source_updated(self) -> None:
        if self._refresh_pending or not (self.collector.changed or self.snapshot is None):
            return
        self._refresh_pending = True
        wait = max(0.1, self._last_rebuild + self.min_rebuild_s - time.monotonic())
        self.set_timer(wait, self.rebuild)

    async def rebuild(self) -> None:
        """A new Snapshot from the collector's data, published to the screens. The analysis (pure) runs
        in a thread, so keys keep answering while 10,000 actors are joined."""
        self._refresh_pending = False
        self._last_rebuild = time.monotonic()
        self.collector.changed = False
        if not self.collector.has_data and self.snapshot is None:
            self._publish(None)
            return
        from verltop.ui.screens.main import MainScreen

        t0 = time.perf_counter()
        snap = await self.collector.snapshot_async(self.clock())
        self.snapshot = snap
        # the table's rows are laid out in the thread too; the loop only swaps them in
        mains = [s for s in self.screen_stack if isinstance(s, MainScreen)]
        rows = {id(m): await asyncio.to_thread(m.table_rows, snap) for m in mains}
        self.last_build_ms = (time.perf_counter() - t0) * 1000
        self.snapshots_built += 1
        for m in mains:
            m.show_snapshot(snap, rows[id(m)])
        if time.monotonic() - self._last_trim > 60:
            self._last_trim = time.monotonic()
            _trim_heap()

    def _tick(self) -> None:
        """Between snapshots the clocks move: task ages, the progress clock, the data's age."""
        from verltop.ui.screens.main import MainScreen

        if self.snapshot is None:
            if not self.collector.has_data:
                self._publish(None)  # keeps "connecting…" / the error current
            return
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                screen.tick(self.clock())

    def _publish(self, snap: Snapshot | None) -> None:
        from verltop.ui.screens.main import MainScreen

        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                screen.show_snapshot(snap)

    async def on_unmount(self) -> None:
        await self.collector.stop()


def _trim_heap() -> None:
    """Hand freed heap back to the OS. Parsing multi-MB answers every few seconds, from several threads,
    fragments glibc's arenas: RSS crept ~1.5 MiB a minute with a constant number of live objects."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc
