"""Enter on a pending line: what a placement group or task asks for, against the cluster, and why it waits."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.model import PendingItem
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.pending_rows import details_text


class PendingDetailsScreen(Screen):
    BINDINGS = keymap.PENDING

    def __init__(self, item: PendingItem, now: float | None = None) -> None:
        super().__init__()
        self.item = item
        self.now = now

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details-box"):
            yield Static(details_text(self.item, self.now), id="facts")
        yield Footer()

    def on_resize(self) -> None:
        self.query_one("#facts", Static).update(details_text(self.item, self.now, (self.size.width or 160) - 4))
