"""The Textual app: shows what its engine publishes and routes keys. It never polls anything itself."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.timer import Timer

from verltop.analysis.marks import SuspectMark, suspect_marks
from verltop.engine import Engine
from verltop.engine.heap import HeapTrim, fit_gc, settle_gc
from verltop.model import DumpReport, Snapshot

TICK_S = 1.0  # the clocks on screen (task ages, the data's age) move once a second
TICK_SKIP_S = 0.35  # a tick this close before the next snapshot is left to it
STOP_WAIT_S = 10.0  # quitting waits this long for the engine's stop (its probes, connections), then goes

log = logging.getLogger("verltop.ui")


class VerltopApp(App):
    CSS_PATH = "verltop.tcss"
    TITLE = "verltop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False, id="quit-ctrl-c")]

    def __init__(self, engine: Engine, demo: Any = None, autostart: bool = True, memory_phases: bool = False) -> None:
        """``engine``: a live ``Monitor`` or a recording; ``demo``: the demo's handle (the H key);
        ``memory_phases``: every snapshot with the memory by phase (a recording of the session keeps them),
        not only while the memory screen is open."""
        super().__init__()
        self.engine = engine
        self.stop_wait_s = STOP_WAIT_S
        self.memory_phases = memory_phases
        self.clock = engine.clock
        self.demo = demo
        self.snapshot: Snapshot | None = None
        self.autostart = autostart
        self._heap = HeapTrim()
        self._unsubscribe = engine.subscribe(self._on_snapshot)
        self._showing: asyncio.Future | None = None
        self._pending: Snapshot | None = None
        self.snapshots_shown = 0
        self.last_layout_ms = 0.0
        self.marks: tuple[SuspectMark, ...] = ()  # the last dump's suspects, marked on the main screen
        self._shown_at: float | None = None  # monotonic time of the last snapshot shown
        self._gaps: tuple[float, ...] = ()  # the last few gaps between snapshots shown
        self._skipped = False  # the last tick was left to a snapshot due
        self._ticker: Timer | None = None

    @classmethod
    def live(cls, endpoint: Any, intervals: Any = None, stall: Any = None, use_local: bool = True, demo: Any = None,
             clock: Any = None, autostart: bool = True, prefetch: Any = None) -> VerltopApp:
        """The app on a live cluster: a ``Monitor`` of ``endpoint`` (a ``sources.config.Endpoint``).
        ``prefetch``: its first reads, sent before the app was imported (``engine.prefetch.prefetch_tui``)."""
        from verltop.engine import Monitor

        mon = Monitor(endpoint, intervals, stall, use_local=use_local, clock=clock or time.time)
        mon.client.prefetch = prefetch
        return cls(mon, demo=demo, autostart=autostart)

    def on_mount(self) -> None:
        from verltop.ui.screens.main import MainScreen

        if self.engine.live:
            self.engine.show_memory_phases(self.memory_phases)
            self.push_screen(MainScreen())
        else:
            from verltop.ui.screens.replay import ReplayScreen

            self.push_screen(ReplayScreen())
        if self.autostart:
            self.engine.start()
        self._ticker = self.set_interval(TICK_S, self._tick)

    def _on_snapshot(self, snap: Snapshot) -> None:
        """The engine published: lay the table out off the UI loop, then swap it in. A snapshot that arrives
        while the previous is still being laid out replaces it (only the newest is shown)."""
        self._pending = snap
        if self._showing is None or self._showing.done():
            self._showing = asyncio.ensure_future(self._show())

    async def _show(self) -> None:
        from verltop.ui.screens.main import MainScreen

        while self._pending is not None:
            snap, self._pending = self._pending, None
            t0 = time.perf_counter()
            mains = [s for s in self.screen_stack if isinstance(s, MainScreen)]
            gens = {id(m): m.layout_gen for m in mains}
            rows = {id(m): await asyncio.to_thread(m.table_rows, snap) for m in mains}
            try:
                for m in mains:
                    # a filter typed (or a sort chosen) while the rows were worked out: theirs are stale
                    m.show_snapshot(snap, rows[id(m)] if m.layout_gen == gens[id(m)] else None)
                for other in self.screen_stack:  # the step timeline and other views of the snapshot
                    if not isinstance(other, MainScreen) and hasattr(other, "show_snapshot"):
                        other.show_snapshot(snap)
            except NoMatches:
                return  # the app closing while the rows were worked out off the loop: its screens' widgets are gone
            self.snapshot = snap  # what is on screen now
            self.last_layout_ms = (time.perf_counter() - t0) * 1000
            self.snapshots_shown += 1
            self._rephase_ticks()
        if self.snapshots_shown == 2:  # past the first frame: the collection below does not delay it
            settle_gc()
        if self.snapshot is not None:
            fit_gc(len(self.snapshot.actors))
        self._heap.tick()

    async def show_now(self) -> None:
        """Show the engine's latest snapshot at once (tests)."""
        if self.engine.latest is not None:
            self._pending = self.engine.latest
            await self._show()

    def remember(self, report: DumpReport) -> None:
        """A dump finished (or a recorded one was read): its suspects are marked on the main screen from now
        on, in place of the last dump's."""
        from verltop.ui.screens.main import MainScreen

        marks = suspect_marks(report)
        if marks == self.marks:
            return
        self.marks = marks
        for m in self.screen_stack:
            if isinstance(m, MainScreen):
                m.redraw()

    def _rephase_ticks(self) -> None:
        """The clocks tick a whole second after each snapshot shown, not on a phase of their own, and a tick
        that the next snapshot would follow within ``TICK_SKIP_S`` is left to it: a snapshot every 2 s then
        costs two repaints (itself and one tick), not three."""
        now = time.monotonic()
        if self._shown_at is not None:
            self._gaps = (*self._gaps[-4:], now - self._shown_at)
        self._shown_at = now
        if self._ticker is not None and self.engine.live:
            self._ticker.stop()
            self._ticker = self.set_interval(TICK_S, self._tick)

    def _snapshot_due(self) -> bool:
        """The next snapshot is expected within ``TICK_SKIP_S`` (by the last few gaps between them)."""
        if self._showing is not None and not self._showing.done():
            return True
        if self._shown_at is None or len(self._gaps) < 2:
            return False
        gap = sorted(self._gaps)[len(self._gaps) // 2]
        return time.monotonic() - self._shown_at >= gap - TICK_SKIP_S

    def _tick(self) -> None:
        """Between snapshots the clocks move: task ages, the progress clock, the data's age."""
        from verltop.ui.screens.main import MainScreen

        # never two in a row: a snapshot that does not come (no news) leaves the clocks one second behind at most
        if not self._skipped and self.engine.live and self._snapshot_due():
            self._skipped = True
            return
        self._skipped = False
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen) or hasattr(screen, "tick"):
                try:
                    screen.tick(self.clock())
                except NoMatches:
                    pass  # the app closing: this screen's widgets are gone before its timers

    async def on_unmount(self) -> None:
        self._unsubscribe()
        if self._showing is not None:
            self._showing.cancel()  # a snapshot half shown: the screens are going
        # q always quits: an engine whose stop hangs (a bug) is left behind, said in the log
        stopping = asyncio.ensure_future(self.engine.stop())
        done, _ = await asyncio.wait((stopping,), timeout=self.stop_wait_s)
        if not done:
            log.error("the engine did not stop within %g s; quitting without it", self.stop_wait_s)
            stopping.cancel()
        elif not stopping.cancelled() and stopping.exception() is not None:
            log.error("stopping the engine failed", exc_info=stopping.exception())

