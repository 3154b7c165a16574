"""`m`: who holds the memory — per worker group and rank, each phase's peak GPU memory and RSS in its last
step, the samples behind them and the last steps' trend; above, the OOM verdicts, the phases that keep
memory step after step, headroom and steps left, what a colocated engine holds, and verl's own peaks."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen

from verltop.model import Snapshot
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.memory_findings import MemoryFindings, findings_text
from verltop.ui.widgets.memory_table import MIN_SAMPLES, MemoryTable, memory_rows
from verltop.ui.widgets.text_line import TextLine


class MemoryScreen(Screen):
    BINDINGS = keymap.MEMORY

    def __init__(self) -> None:
        super().__init__()
        self.snap: Snapshot | None = None

    def compose(self) -> ComposeResult:
        yield TextLine(id="memory-header")
        with VerticalScroll(id="memory-findings-box"):
            yield MemoryFindings("", id="memory-findings")
        yield MemoryTable(id="memory-table")
        yield Footer()

    def on_mount(self) -> None:
        self.app.engine.show_memory_phases(True)  # type: ignore[attr-defined]
        self.query_one(MemoryTable).focus()
        if self.app.snapshot is not None:
            self.show_snapshot(self.app.snapshot)
        else:
            self.redraw()

    def show_snapshot(self, snap: Snapshot, rows: list | None = None) -> None:
        self.snap = snap
        self.redraw()

    def redraw(self) -> None:
        v = self.snap.memory if self.snap is not None else None
        wide = (self.size.width or 120) >= 120
        width = max(40, (self.size.width or 120) - 4)
        self.query_one("#memory-header", TextLine).show(self.header(wide))
        training = self.snap.training if self.snap is not None else None
        self.query_one(MemoryFindings).show(findings_text(v, training, width, all_headroom=wide))
        growing = {(g.actor_id, g.phase): g.kind for g in v.growth} if v is not None else {}
        table = self.query_one(MemoryTable)
        table.wide = wide
        table.show(v.by_phase if v is not None else (), growing)

    def header(self, wide: bool) -> Text:
        v = self.snap.memory if self.snap is not None else None
        t = Text("MEMORY", style="bold")
        if v is None or not v.by_phase:
            t.append("  working out each phase's memory…" if v is not None and v.by_phase_skipped
                     else "  no phase measured yet", style="grey70")
            return t
        rows = memory_rows(v.by_phase)
        ranks = len({p.actor_id for p in v.by_phase})
        steps = sorted({p.step for p in v.by_phase})
        procs = f"{ranks} process" if ranks == 1 else f"{ranks} processes"
        t.append(f"  {procs} · steps {steps[0]}–{steps[-1]}")
        if wide:
            t.append(" · peak per phase of its last step")
        few = sum(1 for _, last, _ in rows if last.samples < MIN_SAMPLES)
        if few:
            t.append(f" · {few} with < {MIN_SAMPLES} samples" + (" (N in yellow; ? = none)" if wide else ""),
                     style="yellow")
        if wide:
            t.append("   o: object store · Esc: back", style="grey70")
        return t

    def on_resize(self) -> None:
        self.redraw()

    def on_unmount(self) -> None:
        app = self.app
        app.engine.show_memory_phases(app.memory_phases)  # type: ignore[attr-defined]

    def action_object_store(self) -> None:
        from verltop.ui.screens.object_store import ObjectStoreScreen

        self.app.push_screen(ObjectStoreScreen())

    def action_down(self) -> None:
        self.query_one(MemoryTable).action_cursor_down()

    def action_up(self) -> None:
        self.query_one(MemoryTable).action_cursor_up()
