"""`t`: the last training steps, one per line, each phase placed where it ran and labelled with its time;
the selected step's phases, ranks and arrival skew below. The current step moves every second."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.model import Snapshot, Step
from verltop.text.cells import duration
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.step_chart import (
    SHORT,
    header_text,
    legend,
    scale_s,
    step_detail,
    step_line,
    worst_skew,
)
from verltop.ui.widgets.text_line import TextLine


class TimelineScreen(Screen):
    BINDINGS = keymap.TIMELINE

    def __init__(self) -> None:
        super().__init__()
        self.steps: tuple[Step, ...] = ()
        self.selected: int | None = None  # a step index; None follows the current step
        self.now: float | None = None

    def compose(self) -> ComposeResult:
        yield TextLine(id="timeline-header")
        yield TextLine(id="timeline-legend")
        with VerticalScroll(id="timeline-box"):
            yield Static("", id="timeline-steps")
        yield Static("", id="timeline-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#timeline-legend", TextLine).show(legend())
        if self.app.snapshot is not None:
            self.show_snapshot(self.app.snapshot)
        else:
            self.redraw()

    def show_snapshot(self, snap: Snapshot, rows: list | None = None) -> None:
        self.steps = snap.steps
        self.now = snap.taken_at
        self.redraw()

    def tick(self, now: float) -> None:
        """The current step's length and its running phase move every second."""
        self.now = now
        if self.steps and self.steps[-1].running:
            self.redraw()

    @property
    def current(self) -> Step | None:
        if not self.steps:
            return None
        if self.selected is not None:
            for s in self.steps:
                if s.index == self.selected:
                    return s
        return self.steps[-1]

    def redraw(self) -> None:
        now = self.now or self.app.clock()
        self.query_one("#timeline-header", TextLine).show(header_text(self.steps, now, (self.size.width or 120) < 100))
        width = max(40, (self.size.width or 120) - 4)
        cur = self.current
        if not self.steps:
            self.query_one("#timeline-steps", Static).update(Text(
                "Steps appear here as the job's worker groups run their step methods (WorkerDict calls such as "
                "actor_rollout_generate_sequences … update_actor). A step begins with the first call before "
                "training that follows the previous step's update.", style="grey70"))
            self.query_one("#timeline-detail", Static).update("")
            return
        scale = scale_s(self.steps, now)
        notes = {s.index: w for s in self.steps if (w := worst_skew(s)) is not None}
        room = min(24, width // 4) if notes else 0  # the late-rank note after the bar, when there is one
        lines = []
        for s in self.steps:
            line = step_line(s, width - room, scale, now, selected=cur is not None and s.index == cur.index)
            w = notes.get(s.index)
            if w is not None:
                who = f"r{w.late_rank}" if w.late_rank is not None else "last"
                line.append(f" ⚠ {SHORT.get(w.phase, w.phase)} {who} +{duration(w.skew_s)}", style="bold red")
            line.truncate(width, overflow="ellipsis")
            lines.append(line)
        self.query_one("#timeline-steps", Static).update(Text("\n").join(lines))
        self.query_one("#timeline-detail", Static).update(step_detail(cur, now, width) if cur else "")
        if self.selected is None:
            self.query_one("#timeline-box", VerticalScroll).scroll_end(animate=False)

    # ---------------------------------------------------------- keys

    def _move(self, d: int) -> None:
        if not self.steps:
            return
        idx = [s.index for s in self.steps]
        cur = self.current.index if self.current else idx[-1]
        pos = max(0, min(len(idx) - 1, idx.index(cur) + d)) if cur in idx else len(idx) - 1
        self.selected = None if pos == len(idx) - 1 else idx[pos]
        self.redraw()

    def action_up(self) -> None:
        self._move(-1)

    def action_down(self) -> None:
        self._move(1)

    def action_last(self) -> None:
        self.selected = None
        self.redraw()

