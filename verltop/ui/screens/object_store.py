"""`o`: Ray's object store, read when the screen opens and on `r` — never polled (the objects list asks every
raylet, which asks every worker). Each node's store (used, spilled, restored), then the references grouped
by holder (actor and rank, driver, task worker) and call site, largest first, then what is missing or cut."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.model import ObjectStoreReport
from verltop.text.object_store import notes, store_line, summary_line
from verltop.ui import keymap
from verltop.ui.render import hanging
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.object_groups import ObjectGroups
from verltop.ui.widgets.text_line import TextLine

READING = "reading Ray's object store (every raylet is asked; up to 30 s)…  Esc: back"


class ObjectStoreScreen(Screen):
    BINDINGS = keymap.OBJECT_STORE

    def __init__(self) -> None:
        super().__init__()
        self.report: ObjectStoreReport | None = None
        self.reads = 0

    def compose(self) -> ComposeResult:
        yield TextLine(id="objects-status")
        yield Static("", id="objects-nodes")
        yield ObjectGroups(id="objects-table")
        with VerticalScroll(id="objects-notes-box"):
            yield Static("", id="objects-notes")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(ObjectGroups).focus()
        self.action_again()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A recording has no object store: its footer does not offer a read."""
        return self.app.engine.live or action != "again"

    def _status(self, t: Text | str) -> None:
        self.query_one("#objects-status", TextLine).show(t)

    def action_again(self) -> None:
        if not self.app.engine.live:
            self._status(Text("a recording has no object store (it is read live, on demand)", style="yellow"))
            return
        self._status(READING)
        self.read()

    @work(exclusive=True, group="objects", exit_on_error=False)
    async def read(self) -> None:
        report = await self.app.engine.object_store()
        if report is None:
            self._status(Text("this view cannot read the object store", style="yellow"))
            return
        self.reads += 1
        self.report = report
        self.show_report(report)

    def show_report(self, r: ObjectStoreReport) -> None:
        width = max(30, (self.size.width or 120) - 4)
        wide = (self.size.width or 120) >= 100
        st = Text("OBJECT STORE  " if wide else "", style="bold")
        st.append(summary_line(r), style="bold red" if r.problem and not r.groups else "")
        if wide:
            st.append("   r: read again · Esc: back", style="grey70")
        self._status(st)
        nodes = [store_line(n) for n in r.nodes] or ["no node reported its store"]
        self.query_one("#objects-nodes", Static).update(Text("\n".join(hanging(n, width, 2) for n in nodes)))
        self.query_one(ObjectGroups).show(r.groups, wide=wide)
        t = Text()
        for n in notes(r):
            t.append(f"• {hanging(n, width, 2)}\n", style="yellow")
        t.rstrip()
        self.query_one("#objects-notes", Static).update(t)

    def on_resize(self) -> None:
        if self.report is not None:
            self.show_report(self.report)

    def action_back(self) -> None:
        self.workers.cancel_group(self, "objects")
        self.app.pop_screen()

    def action_down(self) -> None:
        self.query_one(ObjectGroups).action_cursor_down()

    def action_up(self) -> None:
        self.query_one(ObjectGroups).action_cursor_up()
