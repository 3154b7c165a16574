"""`d` / `D`: every rank's stack at once — progress, suspects, per-rank table, the merged tree."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState

from verltop.analysis.chains import group_chains
from verltop.analysis.collectives import calling_frame, collective_pending
from verltop.analysis.merge import build_tree, compact_labels, label_title, rank_label, render_tree
from verltop.engine import DumpJob, DumpOptions, DumpProgress
from verltop.model import DumpReport, RankDump, Snapshot
from verltop.text.cells import shorten
from verltop.text.chains import end_text, hop_text
from verltop.text.dump import dumped_text
from verltop.text.pending import not_placed
from verltop.text.processes import narrow_title
from verltop.text.suspects import suspect_reason
from verltop.ui import keymap
from verltop.ui.render import hanging
from verltop.ui.widgets.footer import Footer

RANK_COLUMNS = (("group", "GROUP / ACTOR", 18), ("rank", "RANK", 5), ("role", "ROLE / PROCESS", 26), ("node", "NODE", 15),
                ("op", "WAITS IN", 34), ("frame", "CALLING FRAME", 48), ("motion", "MOTION", 7),
                ("note", "ERROR / NOTE", 60))
_CELL = {k: i for i, (k, _, _) in enumerate(RANK_COLUMNS)}


SHORT_BELOW = 40  # fewer lines: the chain and suspect boxes give way to the table and the merged stacks
WRAP_BELOW = 130  # narrower: the text columns narrow, and every dump's cells wrap rather than be cut
WRAP_ROWS = 300  # wider: cells wrap in dumps of at most this many processes (rows of many lines cost time)


def fit_rank_columns(width: int, multi_node: bool) -> tuple[tuple[str, str, int], ...]:
    """The rank table's columns for ``width`` cells: NODE only when the dump spans nodes and there is room;
    narrow text columns on a narrow terminal (their cells wrap); CALLING FRAME takes the rest; ERROR / NOTE
    only where it fits (a rank's error is also on its full stack, Enter). Never wider than ``width``."""
    wide = width >= WRAP_BELOW
    narrow = width < 100
    cols = [("group", "GROUP / ACTOR" if wide else "GROUP", 18 if wide else 10 if narrow else 11), ("rank", "RANK", 4),
            ("role", "ROLE / PROCESS" if wide else "ROLE", 22 if wide else 13 if narrow else 14)]
    if multi_node and width >= 150:
        cols.append(("node", "NODE", 15))
    cols.append(("op", "WAITS IN", 28 if wide else 14 if narrow else 17))
    cols.append(("motion", "MOTION", 6))
    used = sum(w + 2 for _, _, w in cols) + 2  # cell padding, and the scrollbar
    rest = max(12, width - used - 2)
    if width >= 170:
        frame = min(52, rest // 2)
        cols.insert(-1, ("frame", "CALLING FRAME", frame))
        cols.append(("note", "ERROR / NOTE", max(20, rest - frame - 2)))
    else:
        cols.insert(-1, ("frame", "CALLING FRAME", rest))
    return tuple(cols)


def rank_cells(r: RankDump, suspect: bool, cols: tuple[tuple[str, str, int], ...] = ()) -> tuple:
    """A rank's cells; with ``cols`` (the table's), names wider than their column are shortened from the
    middle (``agent_lo…worker_0``, ``└ Worker_TP1``), the rest wraps."""
    width = {k: w for k, _, w in cols}
    a = r.actor
    op = Text("-", style="grey50")
    if r.blocked_on:
        op = Text(r.blocked_on.op, style="yellow" if r.blocked_on.op.startswith("ray.") else "cyan")
        if r.blocked_on.gpu_wait:
            op.append(" (GPU)", style="grey70")
    if r.collective and r.collective.op:
        c = r.collective
        pending = collective_pending(c)  # a completed one is the rank's last collective, not its wait
        op.append(f" {c.op}#{c.seq}" if c.seq is not None else f" {c.op}", style="magenta" if pending else "grey50")
        if not pending:
            op.append(" done", style="grey50")
    frame = calling_frame(r.blocked_on, r.stack)
    motion = Text("-" if r.stuck is None else ("stuck" if r.stuck else "moving"),
                  style="red" if r.stuck else "green" if r.stuck is False else "grey50")
    note = Text(r.error.text if r.error else "", style="yellow")
    if r.death is not None:
        note.append(f" {r.death.kind}: {r.death.detail or '-'}", style="bold red")
    name = a.worker_group or ("controller" if a.role == "controller" else a.actor_name or "-")
    if "group" in width:
        name = shorten(name, width["group"] - (2 if suspect else 0))
    who = Text(("▶ " if suspect else "") + name, style="bold red" if suspect else "")
    # a child process sits under its actor, by its title (the role is its actor's)
    if r.process is not None:
        title = label_title(r.process)
        if "role" in width and len(title) + 3 > width["role"]:
            title = shorten(narrow_title(r.process), width["role"] - 2)
            role = Text(f"└ {title}", style="cyan")
        else:
            role = Text(f" └ {title}", style="cyan")
    else:
        role = Text(shorten(a.role, width["role"]) if "role" in width else a.role)
    return (who, "-" if a.rank is None else str(a.rank), role, a.node_ip or "-", op, frame or "-", motion, note)


class StackScreen(Screen):
    """A dump of ``scope`` (every verl rank when None) taken now; or, with ``report``, a finished dump shown
    as it is (a saved or recorded one), with nothing taken until ``r`` asks a live engine for a new one."""

    BINDINGS = keymap.STACKS

    def __init__(self, snap: Snapshot, scope: str | None = None, opts: DumpOptions | None = None,
                 report: DumpReport | None = None, title: str | None = None) -> None:
        super().__init__()
        self.snap = snap
        self.scope = scope
        self.opts = opts or DumpOptions(samples=2, interval_s=1.0)
        self.job: DumpJob | None = None
        self.report: DumpReport | None = report
        self.title = title  # where a finished report comes from ("recorded dump of 03:12:58")
        self.partial: dict[str, RankDump] = {}

    @property
    def targets(self) -> list:
        return self.job.targets if self.job else []

    def compose(self) -> ComposeResult:
        yield Static("", id="stack-status")
        with VerticalScroll(id="chains-box"):  # long chains and reasons scroll (Tab) on a short terminal
            yield Static("", id="chains")
        with VerticalScroll(id="suspects-box"):
            yield Static("", id="suspects")
        yield DataTable(id="ranks", cursor_type="row")
        with VerticalScroll(id="tree-box"):
            yield Static("", id="tree")
        yield Footer()

    def on_mount(self) -> None:
        self._cols: tuple[tuple[str, str, int], ...] = ()
        self._layout()
        self.set_class((self.size.height or 50) < SHORT_BELOW, "-short")
        self.query_one("#ranks", DataTable).focus()
        if self.report is not None:
            self._show_report(self.report)
        else:
            self.action_again()

    def _multi_node(self) -> bool:
        return len({a.node_id for a in self.snap.actors if a.node_id}) > 1

    def _layout(self) -> bool:
        """(Re)build the table's columns for this terminal's width; True when they changed."""
        cols = fit_rank_columns(self.size.width or 160, self._multi_node())
        if cols == self._cols:
            return False
        self._cols = cols
        t = self.query_one("#ranks", DataTable)
        t.clear(columns=True)
        for key, label, width in cols:
            t.add_column(label, key=key, width=width)
        return True

    def on_resize(self) -> None:
        self.set_class((self.size.height or 50) < SHORT_BELOW, "-short")
        if getattr(self, "_cols", None) is not None and self._layout():
            if self.report is not None:
                self._show_report(self.report)
            else:
                for rd in list(self.partial.values()):
                    self._show_rank(rd)

    def _cells(self, r: RankDump, suspect: bool) -> list:
        cells = rank_cells(r, suspect, self._cols)
        return [cells[_CELL[k]] for k, _, _ in self._cols]

    @property
    def _wrap(self) -> bool:
        return (self.size.width or 160) < WRAP_BELOW

    def _add_row(self, t: DataTable, cells: list, key: str) -> None:
        # a frame wraps rather than lose its function's name (a huge dump keeps one line a rank: it is faster)
        auto = self._wrap or len(self.partial) + (len(self.report.ranks) if self.report else 0) <= WRAP_ROWS
        t.add_row(*cells, key=key, height=None if auto else 1)

    # ---------------------------------------------------------- capture

    def _status(self, text: Text | str) -> None:
        self.query_one("#stack-status", Static).update(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A recording cannot take dumps nor ask ranks: its footer offers neither."""
        return self.app.engine.live or action not in ("again", "flight_recorder")

    def action_again(self) -> None:
        if not self.app.engine.live:
            self.notify("a recording cannot take new dumps", severity="warning")
            return
        one = next((a for a in self.snap.actors if a.actor_id == self.scope), None)
        what = (f"{one.actor_name or one.class_name} and its processes" if one else
                f"worker group {self.scope}" if self.scope else "every process of the job")
        self.job = self.app.engine.dump(self.snap, self.scope, self.opts, self._progress)
        if not self.job.targets and not self.job.waiting_jobs:
            pgs = [p for p in self.snap.pending if p.kind == "placement_group"]
            why = "".join(f"\n{not_placed(p)}" for p in pgs[:3])
            self._status(Text(f"nothing to dump: no {what} in the current snapshot{' yet' if why else ''}{why}",
                              style="yellow"))
            return
        self.report = None
        self.partial.clear()
        self.query_one("#ranks", DataTable).clear()
        self.query_one("#suspects", Static).update("")
        self.query_one("#chains", Static).update("")
        self.query_one("#tree", Static).update("")
        self._status(f"dumping {what}: 0/{self.job.total} stacks…  (Esc cancels)")
        self.capture(self.job)

    @work(exclusive=True, group="stacks", exit_on_error=False)
    async def capture(self, job: DumpJob) -> None:
        report = await job.run()
        if job is not self.job:
            return  # an older dump, replaced by `r`
        if report is None:
            problem = job.problem.text if job.problem else "unknown error"
            self._status(Text(f"the dump failed: {problem}  (r: try again · Esc: back)", style="bold red"))
            return
        self.report = report
        self._show_report(report)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A bug in showing a dump must say so on this screen, not leave "dumping…" there for ever."""
        if event.state == WorkerState.ERROR and event.worker.group in ("stacks", "fr"):
            self._status(Text(f"the dump failed: {event.worker.error!r}  (r: try again · Esc: back)",
                              style="bold red"))

    def _progress(self, p: DumpProgress) -> None:
        if p.stage == "stacks" and p.rank is not None:
            self._show_rank(p.rank)
            self._status(f"dumping: {p.done}/{p.total} stacks  ({p.ranks_seen}/{p.ranks_live} ranks)…  (Esc cancels)")
        elif p.stage == "evidence":
            self._status(f"read {p.total}/{p.total} stacks; reading NCCL watchdog lines and Flight Recorder "
                         "dumps…  (Esc cancels)")

    def _show_rank(self, rd: RankDump, suspect: bool = False) -> None:
        t = self.query_one("#ranks", DataTable)
        self.partial[rd.key] = rd
        cells = self._cells(rd, suspect)
        key = rd.key
        if key in t.rows:
            for (ck, _, _), v in zip(self._cols, cells, strict=True):
                t.update_cell(key, ck, v)
        else:
            self._add_row(t, cells, key)

    def _show_report(self, r: DumpReport) -> None:
        self.app.remember(r)  # its suspects stay marked on the main screen
        took = f", in {self.job.elapsed_s:.1f} s" if self.job and self.job.elapsed_s is not None else ""
        st = Text(style="bold")
        if self.title:
            st.append(f"{self.title}: ", style="cyan")
        apart = f"{r.samples} samples ~1 s apart" if r.samples != 1 else "1 sample"
        st.append(f"{dumped_text(r)}, {apart}{took}")
        if r.notes:
            st.append("   " + "; ".join(r.notes), style="yellow")
        if (self.size.width or 160) >= WRAP_BELOW:  # a narrow terminal has them in the footer only
            keys = "Enter: full stack · w: write · r: again · Esc: back" if self.app.engine.live else \
                "Enter: full stack · w: write · Esc: back"
            st.append("   " + keys, style="grey70")
        self._status(st)
        chains = chains_rich(r)
        chains.rstrip()  # the box as tall as its lines
        self.query_one("#chains", Static).update(chains)
        self.query_one("#chains-box").display = bool(r.chains)
        sus = self.query_one("#suspects", Static)
        if r.suspects:
            from verltop.text.dump import suspect_label

            txt = Text("SUSPECTS — most likely first", style="bold red")
            width = max(30, (self.size.width or 160) - 6)  # inside the box's border, padding and scrollbar
            for s in r.suspects:
                label = f" ▶ {suspect_label(s, r)}  "
                txt.append("\n" + label, style="bold")
                txt.append(hanging(suspect_reason(s), width, len(label)))
            sus.update(txt)
            self.query_one("#suspects-box").set_class(False, "-none")
        else:
            sus.update(Text("No suspect: no rank stands apart from its peers.", style="green"))
            self.query_one("#suspects-box").set_class(True, "-none")
        self._fill(r)
        self.query_one("#tree", Static).update(tree_rich(r, (self.size.width or 160) - 6))

    def _fill(self, r: DumpReport) -> None:
        """The rank table of a finished dump: suspects first, each child process right under its actor."""
        ids = {(s.actor_id, s.pid) for s in r.suspects}
        t = self.query_one("#ranks", DataTable)
        t.clear()

        def sus(x: RankDump) -> bool:
            return (x.actor.actor_id, x.actor.pid) in ids

        order = sorted(r.ranks, key=lambda x: (not sus(x), x.actor.role != "controller", x.actor.worker_group or "",
                                               x.actor.rank or 0, x.actor.actor_id, x.process is not None,
                                               x.actor.pid or 0))
        for x in order:
            self._add_row(t, self._cells(x, sus(x)), x.key)

    # ---------------------------------------------------------- actions

    def action_flight_recorder(self) -> None:
        if self.report is not None and self.job is None:
            self.notify("this dump was not taken here: r takes a new one, then f asks its ranks"
                        if self.app.engine.live else "a recording cannot ask ranks for Flight Recorder dumps",
                        severity="warning")
            return
        if self.report is None or self.job is None:
            self.notify("wait for the dump to finish", severity="warning")
            return
        self._status("asking each rank for a Flight Recorder dump through its debug-info pipe…")
        self.fr_refresh(self.job)

    @work(exclusive=True, group="fr", exit_on_error=False)
    async def fr_refresh(self, job: DumpJob) -> None:
        report, notes = await job.refresh_flight_recorder()
        if report is None:
            self._status(Text("Flight Recorder: " + ("; ".join(notes) or "no dump came back"), style="yellow"))
            return
        self.report = report
        self._show_report(report)

    def action_back(self) -> None:
        self.workers.cancel_group(self, "stacks")
        self.app.pop_screen()

    def action_down(self) -> None:
        """j: down the rank table, then on into the merged stacks; in a box, scroll it."""
        t = self.query_one("#ranks", DataTable)
        box = self.focused
        if isinstance(box, VerticalScroll):
            box.scroll_down(animate=False)
        elif t.row_count and t.cursor_row >= t.row_count - 1:
            self.query_one("#tree-box").focus()
        else:
            t.action_cursor_down()

    def action_up(self) -> None:
        """k: up the rank table; from the top of the merged stacks, back into the table."""
        box = self.focused
        if isinstance(box, VerticalScroll):
            if box.id == "tree-box" and box.scroll_y <= 0:
                self.query_one("#ranks", DataTable).focus()
            else:
                box.scroll_up(animate=False)
            return
        self.query_one("#ranks", DataTable).action_cursor_up()

    def _selected(self) -> RankDump | None:
        t = self.query_one("#ranks", DataTable)
        if t.row_count == 0:
            return None
        key = t.coordinate_to_cell_key((t.cursor_row, 0)).row_key.value
        if self.report is not None:
            return next((x for x in self.report.ranks if x.key == key), None)
        return self.partial.get(key or "")

    def action_rank_stack(self) -> None:
        rd = self._selected()
        if rd is None:
            return
        from verltop.ui.screens.rank_stack import RankStackScreen

        self.app.push_screen(RankStackScreen(rd))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_rank_stack()

    def action_write(self) -> None:
        if self.report is None:
            self.notify("the dump is not finished yet", severity="warning")
            return
        from verltop.engine.save import write_dump

        try:
            txt, js = write_dump(self.report)
        except OSError as e:
            self.notify(f"could not write the dump: {e.strerror or e}", severity="error")
            return
        self.notify(f"wrote {txt} and {js.name} (mode 0600)", timeout=8)
        self._status(Text(f"wrote {txt.resolve()} and {js.name}", style="bold green"))


def tree_rich(r: DumpReport, width: int = 160) -> Text:
    """The merged stacks, one line a frame; a line longer than ``width`` wraps under its frame, not at the
    left edge."""
    stacks = {rank_label(x): x.stack for x in r.ranks if x.main is not None}
    lines = render_tree(build_tree(stacks))
    suspects = {rank_label(x) for x in r.ranks if (x.actor.actor_id, x.actor.pid) in {(s.actor_id, s.pid)
                                                                                     for s in r.suspects}}
    total = len(stacks)
    t = Text("MERGED STACKS — outermost frame first; [ranks] (count)\n", style="bold")
    for depth, text, ranks in lines:
        small = len(ranks) < total and ranks <= suspects
        pad, count = 2 * depth, f" ({len(ranks)}) "
        labels = hanging(f"[{compact_labels(ranks)}]", width, pad + 1, pad)
        t.append(" " * pad)
        t.append(labels, style="bold red" if small else "cyan")
        t.append(count, style="grey50")
        used = len(labels.rsplit("\n", 1)[-1]) + (pad if "\n" not in labels else 0) + len(count)
        t.append(hanging(text, width, pad + 4, used) + "\n", style="bold" if small else "")
    return t


def chains_rich(r: DumpReport) -> Text:
    """Wait chains, top down: every hop, then where it ends, in red when it did not move."""
    t = Text("WAIT CHAINS — who waits on whom, from the top\n", style="bold")
    for c, n in group_chains(r.chains):
        for i, link in enumerate(c.path):
            if i:
                t.append(" → ", style="grey50")
            last = i == len(c.path) - 1
            t.append(hop_text(link, i == 0), style="bold red" if last else "cyan")
        end = end_text(c.ends_in)
        t.append(f": {end}", style="yellow" if "did not move" in end else "")
        t.append(f"  (×{n})\n" if n > 1 else "\n", style="grey50")
    return t
