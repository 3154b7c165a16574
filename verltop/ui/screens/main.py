"""The main screen: header, filter line, the actor table, a message line and the footer."""

from __future__ import annotations

import re

from textual import on
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Input

from verltop.model import Snapshot
from verltop.ui import keymap
from verltop.ui.widgets.actor_table import GROUPINGS, SORTS, ActorTable, layout_rows
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.header_bar import HeaderBar
from verltop.ui.widgets.text_line import TextLine


class MainScreen(Screen):
    BINDINGS = keymap.MAIN

    def __init__(self) -> None:
        super().__init__()
        self.grouping = "group"
        self.sort = "rank"
        self.filter_rx: re.Pattern[str] | None = None
        self.filter_invert = False
        self.paused = False
        self._last: Snapshot | None = None

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield Input(placeholder="filter (regex; !regex inverts) — Enter to apply, Esc to clear", id="filter")
        yield ActorTable(id="actors")
        yield TextLine(id="selection")
        yield TextLine(id="message")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(HeaderBar).show_snapshot(None, False, self.app.engine.connection_problem())
        self.query_one(ActorTable).focus()
        if self.app.demo is not None:
            self.message("demo: press H to make one rank hang now, d to dump its group")
        if self.app.snapshot is not None:  # a screen pushed later starts from what the app has
            self.show_snapshot(self.app.snapshot)

    @property
    def table(self) -> ActorTable:
        return self.query_one(ActorTable)

    def message(self, text: str, style: str = "") -> None:
        self.query_one("#message", TextLine).show(text)
        self.query_one("#message", TextLine).set_class(style == "error", "-error")

    def table_rows(self, snap: Snapshot) -> list:
        """The table's rows for ``snap`` under the current grouping, sort and filter (pure: the app runs it
        off the UI loop)."""
        return layout_rows(snap, self.grouping, self.sort, self.filter_rx, self.filter_invert)

    def show_snapshot(self, snap: Snapshot, rows: list | None = None) -> None:
        header = self.query_one(HeaderBar)
        if self.paused:
            header.show_snapshot(self._last, True, self.app.engine.connection_problem())
            return
        self._last = snap
        header.show_snapshot(snap, False, self.app.engine.connection_problem())
        self.table.set_shape(snap)
        self.table.apply(rows if rows is not None else self.table_rows(snap), snap.taken_at)
        self._show_selection()
        node_of = {a.actor_id: a.node_id for a in snap.actors}
        self.app.engine.set_focus(node_of[k] for k in self.table.visible_actor_rows() if node_of.get(k))
        if not snap.actors and not snap.errors:
            self.message("no actors in this Ray cluster yet")

    def tick(self, now: float) -> None:
        """Once a second between snapshots: ages in the table, the header's clocks (or why there is no data)."""
        header = self.query_one(HeaderBar)
        if self._last is None:
            header.show_snapshot(None, False, self.app.engine.connection_problem())
            return
        if self.paused:
            return
        self.table.tick(now)
        header.show_snapshot(self._last, False, self.app.engine.connection_problem(), now)

    def _redraw(self) -> None:
        if self._last is not None:
            self.table.apply(self.table_rows(self._last))

    # ---------------------------------------------------------- actions

    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.table.action_cursor_up()

    def action_help(self) -> None:
        from verltop.ui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    def action_timeline(self) -> None:
        from verltop.ui.screens.timeline import TimelineScreen

        self.app.push_screen(TimelineScreen())

    def action_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self.message(f"sort: {self.sort}")
        self._redraw()

    def action_group(self) -> None:
        self.grouping = GROUPINGS[(GROUPINGS.index(self.grouping) + 1) % len(GROUPINGS)]
        self.message(f"group by: {'worker group' if self.grouping == 'group' else self.grouping}")
        self._redraw()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.message("paused: the table is frozen (polling goes on); p resumes" if self.paused else "resumed")
        if self._last is not None:
            self.show_snapshot(self._last if self.paused else (self.app.snapshot or self._last))

    def action_filter(self) -> None:
        inp = self.query_one("#filter", Input)
        inp.display = True
        inp.focus()

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        invert = text.startswith("!")
        pat = text[1:].strip() if invert else text
        if not pat:
            self.filter_rx = None
        else:
            try:
                self.filter_rx = re.compile(pat, re.IGNORECASE)
            except re.error as e:
                self.message(f"bad filter {pat!r}: {e}", "error")
                return
        self.filter_invert = invert
        event.input.display = pat != ""
        self.table.focus()
        self.message(f"filter: {'not ' if invert else ''}/{pat}/" if pat else "filter cleared")
        self._redraw()

    def action_clear_filter(self) -> None:
        inp = self.query_one("#filter", Input)
        if self.filter_rx is None and not inp.display:
            return
        inp.value = ""
        inp.display = False
        self.filter_rx = None
        self.filter_invert = False
        self.table.focus()
        self.message("filter cleared")
        self._redraw()

    def action_details(self) -> None:
        aid = self.table.selected_actor()
        if aid is None or self._last is None:
            return
        row = next((a for a in self._last.actors if a.actor_id == aid), None)
        if row is None:
            return
        from verltop.ui.screens.details import DetailsScreen

        self.app.push_screen(DetailsScreen(row))

    @on(ActorTable.Highlighted)
    def _highlighted(self, event: ActorTable.Highlighted) -> None:
        self._show_selection()

    def _show_selection(self) -> None:
        from verltop.ui.widgets.actor_table import selection_text

        aid = self.table.selected_actor()
        row = next((a for a in self._last.actors if a.actor_id == aid), None) if self._last and aid else None
        self.query_one("#selection", TextLine).show(selection_text(row) if row else "")

    @on(ActorTable.ActorSelected)
    def _selected(self, event: ActorTable.ActorSelected) -> None:
        self.action_details()

    def _dump(self, group: str | None, all_: bool) -> None:
        if self._last is None:
            self.message("no data yet: nothing to dump", "error")
            return
        from verltop.ui.screens.stacks import StackScreen

        self.app.push_screen(StackScreen(self._last, group=None if all_ else group))

    def action_dump_group(self) -> None:
        aid = self.table.selected_actor()
        row = next((a for a in (self._last.actors if self._last else ()) if a.actor_id == aid), None)
        if row is None or not row.worker_group:
            key = self.table.selected_key() or ""
            grp = key.split(":", 2)[2] if key.startswith("grp:group:") else None
            if grp and self._last and any(a.worker_group == grp for a in self._last.actors):
                self._dump(grp, False)
                return
            self.message("select a worker rank (or its group row) to dump its group; D dumps everything")
            return
        self._dump(row.worker_group, False)

    def action_dump_all(self) -> None:
        self._dump(None, True)

    def action_inject_hang(self, kind: str = "collective") -> None:
        demo = self.app.demo
        if demo is None:
            self.message(f"{'H' if kind == 'collective' else 'L'} only works in `verltop demo`")
            return
        try:
            demo.request_hang(kind=kind)
        except OSError as e:
            self.message(f"could not request the hang: {e}", "error")
            return
        if kind == "late":
            self.message("demo: one rank will finish the next update_actor late — t shows its skew growing")
        else:
            self.message("demo: hang requested — one rank will stop at the next update_actor; watch it stall")

    def action_inject_late(self) -> None:
        self.action_inject_hang("late")
