"""The main screen: header, filter line, the actor table, a message line and the footer."""

from __future__ import annotations

import re
import time

from textual import on
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Input

from verltop.analysis.marks import live_marks
from verltop.model import ActorRow, Snapshot
from verltop.text.marks import MARK, mark_sentence, mark_tag
from verltop.text.oom import verdict_tag
from verltop.text.pending import pending_reason
from verltop.ui import keymap
from verltop.ui.widgets import process_rows as PR
from verltop.ui.widgets.actor_table import ActorTable
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.header_bar import HeaderBar
from verltop.ui.widgets.table_rows import GROUPINGS, SORTS, RowMemo, group_of, layout_rows
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
        self._rows_memo = RowMemo()  # the last layout's actor rows, reused while their actor is the same
        self.toggled: dict[str, bool] = {}  # process trees the user opened or closed, by actor id
        # counts the layouts asked for (filter, sort, grouping, trees): rows worked out off the UI loop before
        # the last one are stale, not shown
        self.layout_gen = 0

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield Input(placeholder="filter (regex; !regex inverts) — Enter to apply, Esc to clear", id="filter")
        yield ActorTable(id="actors")
        yield TextLine(id="selection")
        yield TextLine(id="message")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self._header(None, False)
        self.query_one(ActorTable).focus()
        if self.app.demo is not None:
            # one line at 80 columns: the rest is in the footer and under ?
            leak = getattr(self.app.demo, "leak", None)
            if leak:
                self.message(f"demo: rank {leak['rank']} keeps +{leak['mib']} MiB per update_actor (stops at "
                             f"{leak['cap_mib'] // 1024} GiB); m: memory")
            else:
                self.message("demo: H hangs a rank, L makes one late, T hangs TP worker 1; ? lists every key")
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
        return layout_rows(snap, self.grouping, self.sort, self.filter_rx, self.filter_invert, dict(self.toggled),
                           live_marks(self.app.marks, snap.actors, snap.taken_at), self._rows_memo)

    def _header(self, snap: Snapshot | None, paused: bool, now: float | None = None) -> None:
        engine = self.app.engine
        self.query_one(HeaderBar).show_snapshot(snap, paused, engine.connection_problem(), now, engine.playback())

    def show_snapshot(self, snap: Snapshot, rows: list | None = None) -> None:
        if self.paused:
            self._header(self._last, True)
            return
        self._last = snap
        self._header(snap, False)
        marks = live_marks(self.app.marks, snap.actors, snap.taken_at)
        ooms = [f"{MARK} {verdict_tag(v)}" for v in (snap.memory.oom if snap.memory is not None else ())]  # width
        self.table.set_shape(snap, max((*(len(mark_tag(m)) for m in marks.values()), *map(len, ooms)), default=0))
        self.table.apply(rows if rows is not None else self.table_rows(snap), snap.taken_at)
        self._show_selection()
        self.app.engine.set_focus(self.table.visible_actor_nodes())
        if not snap.actors and not snap.errors and not snap.pending:
            self.message("no actors in this Ray cluster yet")

    def tick(self, now: float) -> None:
        """Once a second between snapshots: ages in the table, the header's clocks (or why there is no data)."""
        if self._last is None:
            self._header(None, False)
            return
        if self.paused:
            return
        self.table.tick(now)
        self._header(self._last, False, now)

    def _redraw(self) -> None:
        self.layout_gen += 1
        if self._last is not None:
            self.table.apply(self.table_rows(self._last))

    def redraw(self) -> None:
        """Lay the table out again (the marks of a new dump: STALLED may need more room) and say so under it."""
        self.layout_gen += 1
        if self._last is not None and not self.paused:
            self.show_snapshot(self._last)
        else:
            self._redraw()
            self._show_selection()

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

    def action_memory(self) -> None:
        from verltop.ui.screens.memory import MemoryScreen

        self.app.push_screen(MemoryScreen())

    def action_object_store(self) -> None:
        from verltop.ui.screens.object_store import ObjectStoreScreen

        self.app.push_screen(ObjectStoreScreen())

    def action_health(self) -> None:
        from verltop.ui.screens.health import HealthScreen

        self.app.push_screen(HealthScreen())

    def action_inject_nan(self) -> None:
        demo = self.app.demo
        if demo is None:
            self.message("N only works in `verltop demo`")
            return
        try:
            demo.request_nan()
        except OSError as e:
            self.message(f"could not plant the NaN: {e}", "error")
            return
        self.message("demo: the next step logs a NaN actor/grad_norm — h shows it, the header tags it")

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
        pend = self.table.selected_pending()
        if pend is not None:
            from verltop.ui.screens.pending_details import PendingDetailsScreen

            self.app.push_screen(PendingDetailsScreen(pend, self.app.engine.clock()))
            return
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
        from verltop.ui.widgets.table_cells import process_selection_text, selection_text

        pend = self.table.selected_pending()
        if pend is not None:
            self.query_one("#selection", TextLine).show(f"{pend.name or pend.id}: {pending_reason(pend)}")
            return
        r = self.table.selected_row()
        if r is not None and r.proc is not None:
            self.query_one("#selection", TextLine).show(process_selection_text(r))
            return
        aid = self.table.selected_actor()
        row = next((a for a in self._last.actors if a.actor_id == aid), None) if self._last and aid else None
        mark = live_marks(self.app.marks, self._last.actors, self._last.taken_at).get(aid) \
            if self._last and aid else None
        said = mark_sentence(mark, time.strftime("%H:%M:%S", time.localtime(mark.taken_at))) if mark else None
        self.query_one("#selection", TextLine).show(selection_text(row, said) if row else "")

    @on(ActorTable.ActorSelected)
    def _selected(self, event: ActorTable.ActorSelected) -> None:
        self.action_details()

    def _dump(self, scope: str | None, all_: bool) -> None:
        if self._last is None:
            self.message("no data yet: nothing to dump", "error")
            return
        from verltop.ui.screens.stacks import StackScreen

        self.app.push_screen(StackScreen(self._last, scope=None if all_ else scope))

    def action_dump_group(self) -> None:
        aid = self.table.selected_actor()
        row = next((a for a in (self._last.actors if self._last else ()) if a.actor_id == aid), None)
        if row is None or not row.worker_group:
            key = self.table.selected_key() or ""
            grp = key.split(":", 2)[2] if key.startswith("grp:group:") else None
            if grp and self._last and any(a.worker_group == grp for a in self._last.actors):
                self._dump(grp, False)
                return
            if row is not None:  # a rollout server, an agent loop...: that actor and its processes
                self._dump(row.actor_id, False)
                return
            self.message("select a worker rank (or its group row) to dump its group; D dumps everything")
            return
        self._dump(row.worker_group, False)

    def action_dump_all(self) -> None:
        self._dump(None, True)

    def _actor(self, actor_id: str | None) -> ActorRow | None:
        if actor_id is None or self._last is None:
            return None
        return next((a for a in self._last.actors if a.actor_id == actor_id), None)

    def action_toggle_tree(self) -> None:
        """Open or close the selected actor's process tree (every tree of a selected group); a tree on a
        node verltop has not read yet is read first, through a probe."""
        snap = self._last
        r = self.table.selected_row()
        if snap is None or r is None:
            return
        defaults = PR.default_open(snap.actors)
        if r.header is not None:
            name = r.key.split(":", 2)[-1]
            members = [a for a in snap.actors if group_of(a, self.grouping) == name]
            trees = [a for a in members if a.processes]
            unread = [a for a in members if a.processes_read_at is None and a.state == "ALIVE"]
            if not trees and not unread:
                self.message("no child processes in this group")
                return
            opened = not all(PR.is_open(a, self.toggled, defaults) for a in trees) if trees else True
            for a in (*trees, *unread):
                self.toggled[a.actor_id] = opened
            if unread:
                self._read_remote(unread)
            self.message(f"{'showing' if opened else 'hiding'} the processes of {name}")
            self._redraw()
            return
        a = r.parent or r.actor
        if a is None:
            return
        if a.processes_read_at is None:
            if a.state != "ALIVE":
                self.message(f"{a.actor_name or a.class_name} is {a.state}: no processes to show")
                return
            self.toggled[a.actor_id] = True
            self._read_remote([a])
            return
        if not a.processes:
            self.message(f"{a.actor_name or a.class_name} has no child processes")
            return
        opened = not PR.is_open(a, self.toggled, defaults)
        self.toggled[a.actor_id] = opened
        self._redraw()
        if not opened:  # closing from a child row: the cursor goes to its actor
            i = self.table.row_index(a.actor_id)
            if i is not None:
                self.table.move_cursor(i)

    def _read_remote(self, actors: list[ActorRow]) -> None:
        nodes = sorted({a.node_id for a in actors if a.node_id})
        started = self.app.engine.want_processes(nodes)
        ips = sorted({a.node_ip or (a.node_id or "?")[:8] for a in actors})
        where = ", ".join(ips[:3]) + (f" and {len(ips) - 3} more" if len(ips) > 3 else "")
        if started:
            self.message(f"reading the processes on {where} through a probe actor (a few seconds the first time)")
        elif self.app.engine.live:
            self.message(f"the processes on {where} are being read: they show with a coming refresh "
                         "(a probe's problem shows in the header)")
        else:
            self.message("processes were not recorded here")

    def action_inject_tp_hang(self) -> None:
        demo = self.app.demo
        if demo is None:
            self.message("T only works in `verltop demo`")
            return
        try:
            demo.request_hang("tp1")
        except OSError as e:
            self.message(f"could not request the hang: {e}", "error")
            return
        self.message("demo: hang requested — TP worker 1 of vllm_server_0_0 will stop loading weights at the "
                     "next weight sync (its processes are under the server's row: c opens or closes them)")

    def action_nodes(self) -> None:
        from verltop.ui.screens.nodes import NodesScreen

        self.app.push_screen(NodesScreen())

    def action_inject_hang(self, kind: str = "rank") -> None:
        demo = self.app.demo
        if demo is None:
            self.message(f"{'H' if kind == 'rank' else 'L'} only works in `verltop demo`")
            return
        try:
            demo.request_hang(kind)
        except OSError as e:
            self.message(f"could not request the hang: {e}", "error")
            return
        if kind == "late":
            self.message("demo: one rank will finish the next update_actor late — t shows its skew growing")
        else:
            self.message("demo: hang requested — one rank will stop at the next update_actor; watch it stall")

    def action_inject_late(self) -> None:
        self.action_inject_hang("late")
