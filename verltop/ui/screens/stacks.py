"""`d` / `D`: every rank's stack at once — progress, suspects, per-rank table, the merged tree."""

from __future__ import annotations

import json
import time

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static

from verltop.analysis.collectives import collective_pending
from verltop.analysis.dump import analyse, analyse_rank, dump_targets
from verltop.analysis.merge import build_tree, compact_labels, rank_label, render_tree
from verltop.model import ActorRow, DumpReport, ProcessDump, RankDump, Snapshot
from verltop.sources.stacks import DumpOptions, StackCapture
from verltop.ui.widgets.footer import Footer

RANK_COLUMNS = (("group", "GROUP", 10), ("rank", "RANK", 5), ("role", "ROLE", 14), ("node", "NODE", 15),
                ("op", "WAITS IN", 34), ("frame", "CALLING FRAME", 48), ("motion", "MOTION", 7),
                ("note", "ERROR / NOTE", 60))


def rank_cells(r: RankDump, suspect: bool) -> tuple:
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
    frame = (r.blocked_on.frame if r.blocked_on else None) or (r.stack[0].short() if r.stack else "-")
    motion = Text("-" if r.stuck is None else ("stuck" if r.stuck else "moving"),
                  style="red" if r.stuck else "green" if r.stuck is False else "grey50")
    note = Text(r.error or "", style="yellow")
    group = Text(a.worker_group or ("controller" if a.role == "controller" else "-"))
    if suspect:
        group = Text("▶ " + group.plain, style="bold red")
    return (group, "-" if a.rank is None else str(a.rank), a.role, a.node_ip or "-", op, frame or "-", motion, note)


class StackScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back / cancel", id="back"),
        Binding("enter", "rank_stack", "Full stack", id="rank-stack"),
        Binding("w", "write", "Write dump", id="write-dump"),
        Binding("r", "again", "Dump again", id="dump-again"),
        Binding("f", "flight_recorder", "Flight Recorder", id="flight-recorder"),
        Binding("j", "down", "Down", show=False, id="down"),
        Binding("k", "up", "Up", show=False, id="up"),
    ]

    def __init__(self, snap: Snapshot, group: str | None = None, opts: DumpOptions | None = None) -> None:
        super().__init__()
        self.snap = snap
        self.group = group
        self.opts = opts or DumpOptions(samples=2, interval_s=1.0)
        self.targets: list[ActorRow] = dump_targets(snap.actors, group)
        self.report: DumpReport | None = None
        self.samples: dict[str, list[ProcessDump]] = {}
        self.partial: dict[str, RankDump] = {}
        self.started = 0.0
        self.first_rank_ms: float | None = None
        self.done_ms: float | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="stack-status")
        yield Static("", id="suspects")
        yield DataTable(id="ranks", cursor_type="row")
        with VerticalScroll(id="tree-box"):
            yield Static("", id="tree")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#ranks", DataTable)
        for key, label, width in RANK_COLUMNS:
            t.add_column(label, key=key, width=width)
        t.focus()
        self.action_again()

    # ---------------------------------------------------------- capture

    def _status(self, text: Text | str) -> None:
        self.query_one("#stack-status", Static).update(text)

    def action_again(self) -> None:
        what = f"worker group {self.group}" if self.group else "every verl rank"
        if not self.targets:
            self._status(Text(f"nothing to dump: no {what} in the current snapshot", style="yellow"))
            return
        self.report = None
        self.partial.clear()
        t = self.query_one("#ranks", DataTable)
        t.clear()
        self.query_one("#suspects", Static).update("")
        self.query_one("#tree", Static).update("")
        self.started = time.perf_counter()
        self.first_rank_ms = None
        live = sum(1 for a in self.targets if a.state == "ALIVE")
        self._status(f"dumping {what}: 0/{live * self.opts.samples} stacks…  (Esc cancels)")
        self.capture()

    @work(exclusive=True, group="stacks", exit_on_error=False)
    async def capture(self) -> None:
        col = self.app.collector
        cap = StackCapture(col.client, col.local_node_ids(), self.opts)
        live = sum(1 for a in self.targets if a.state == "ALIVE")
        total = live * max(1, self.opts.samples)
        samples: dict[str, list[ProcessDump]] = {}

        def progress(a: ActorRow, d: ProcessDump, done: int, n: int) -> None:
            samples.setdefault(a.actor_id, []).append(d)
            rd = analyse_rank(a, samples[a.actor_id])
            self._show_rank(rd)
            if self.first_rank_ms is None:
                self.first_rank_ms = (time.perf_counter() - self.started) * 1000
            self._status(f"dumping: {done}/{n} stacks  ({len(samples)}/{live} ranks)…  (Esc cancels)")

        got = await cap.capture(self.targets, progress)
        self._status(f"read {total}/{total} stacks; reading NCCL watchdog lines from the worker logs…")
        from verltop.sources.watchdog import collective_evidence

        collectives, fr_notes = await collective_evidence(col.client, self.targets, got, True,
                                                          col.local_node_ids())
        self.samples = got
        self.report = analyse(self.targets, got, time.time(), collectives, native=self.opts.native,
                              notes=tuple(cap.notes) + tuple(fr_notes))
        self.done_ms = (time.perf_counter() - self.started) * 1000
        self._show_report(self.report)

    def _show_rank(self, rd: RankDump, suspect: bool = False) -> None:
        t = self.query_one("#ranks", DataTable)
        self.partial[rd.actor.actor_id] = rd
        cells = rank_cells(rd, suspect)
        key = rd.actor.actor_id
        if key in t.rows:
            for (ck, _, _), v in zip(RANK_COLUMNS, cells, strict=True):
                t.update_cell(key, ck, v)
        else:
            t.add_row(*cells, key=key)

    def _show_report(self, r: DumpReport) -> None:
        ok = sum(1 for x in r.ranks if x.error is None)
        st = Text(f"{ok}/{len(r.ranks)} ranks dumped, {r.samples} samples ~1 s apart, "
                  f"in {self.done_ms / 1000:.1f} s", style="bold")
        if r.notes:
            st.append("   " + "; ".join(r.notes), style="yellow")
        st.append("   Enter: full stack · w: write · r: again · Esc: back", style="grey70")
        self._status(st)
        sus = self.query_one("#suspects", Static)
        ids = {s.actor_id for s in r.suspects}
        if r.suspects:
            txt = Text("SUSPECTS — most likely first\n", style="bold red")
            for s in r.suspects:
                who = f"{s.worker_group}:{s.rank}" if s.worker_group else s.actor_id[:12]
                txt.append(f" ▶ {who}  ", style="bold")
                txt.append(s.reason + "\n")
            sus.update(txt)
            sus.set_class(False, "-none")
        else:
            sus.update(Text("No suspect: no rank stands apart from its peers.", style="green"))
            sus.set_class(True, "-none")
        t = self.query_one("#ranks", DataTable)
        t.clear()
        order = sorted(r.ranks, key=lambda x: (x.actor.actor_id not in ids, x.actor.role != "controller",
                                               x.actor.worker_group or "", x.actor.rank or 0))
        for x in order:
            t.add_row(*rank_cells(x, x.actor.actor_id in ids), key=x.actor.actor_id)
        self.query_one("#tree", Static).update(tree_rich(r))

    # ---------------------------------------------------------- actions

    def action_flight_recorder(self) -> None:
        if self.report is None:
            self.notify("wait for the dump to finish", severity="warning")
            return
        self._status("asking each rank for a Flight Recorder dump through its debug-info pipe…")
        self.fr_refresh()

    @work(exclusive=True, group="fr", exit_on_error=False)
    async def fr_refresh(self) -> None:
        from verltop.sources.flight_recorder import trigger_and_read

        col = self.app.collector
        local = [a for a in self.targets if a.node_id in col.local_node_ids() and a.role != "controller"]
        infos, notes = await trigger_and_read(local)
        if not infos:
            self._status(Text("Flight Recorder: " + ("; ".join(notes) or "no dump came back"), style="yellow"))
            return
        old = {r.actor.actor_id: r.collective for r in self.report.ranks if r.collective}
        old.update(infos)
        self.report = analyse(self.targets, self.samples, time.time(), old, native=self.opts.native,
                              notes=merge_notes(self.report.notes, notes))
        self._show_report(self.report)

    def action_back(self) -> None:
        self.workers.cancel_group(self, "stacks")
        self.app.pop_screen()

    def action_down(self) -> None:
        self.query_one("#ranks", DataTable).action_cursor_down()

    def action_up(self) -> None:
        self.query_one("#ranks", DataTable).action_cursor_up()

    def _selected(self) -> RankDump | None:
        t = self.query_one("#ranks", DataTable)
        if t.row_count == 0:
            return None
        key = t.coordinate_to_cell_key((t.cursor_row, 0)).row_key.value
        if self.report is not None:
            return next((x for x in self.report.ranks if x.actor.actor_id == key), None)
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
        from verltop.save import write_dump
        from verltop.text import dump_text, full_stacks_text

        try:
            txt, js = write_dump(self.report.to_json(), dump_text(self.report) + "\n\n" + full_stacks_text(self.report))
        except OSError as e:
            self.notify(f"could not write the dump: {e.strerror or e}", severity="error")
            return
        self.notify(f"wrote {txt} and {js.name} (mode 0600)", timeout=8)
        self._status(Text(f"wrote {txt.resolve()} and {js.name}", style="bold green"))


def merge_notes(old: tuple[str, ...], new: list[str]) -> tuple[str, ...]:
    """The report's notes after ``f``: the same cross-rank finding read again is shown once."""
    return tuple(dict.fromkeys((*old, *new)))


def tree_rich(r: DumpReport) -> Text:
    stacks = {rank_label(x): x.stack for x in r.ranks if x.main is not None}
    lines = render_tree(build_tree(stacks))
    suspects = {rank_label(x) for x in r.ranks if x.actor.actor_id in {s.actor_id for s in r.suspects}}
    total = len(stacks)
    t = Text("MERGED STACKS — outermost frame first; [ranks] (count)\n", style="bold")
    for depth, text, ranks in lines:
        small = len(ranks) < total and ranks <= suspects
        t.append("  " * depth)
        t.append(f"[{compact_labels(ranks)}]", style="bold red" if small else "cyan")
        t.append(f" ({len(ranks)}) ", style="grey50")
        t.append(text + "\n", style="bold" if small else "")
    return t


def report_json(r: DumpReport) -> str:
    return json.dumps(r.to_json(), indent=1)
