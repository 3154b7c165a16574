"""The memory screen's sentences: OOM verdicts, what grows step after step, headroom (every rank's lowest,
and each low one), what a colocated engine still holds, and verl's own figures for what they are."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from verltop.model import MemoryView, TrainingView
from verltop.text.memory_rows import (
    growth_text,
    headroom_text,
    hold_text,
    low,
    verl_peak_text,
    verl_peaks,
)
from verltop.text.oom import verdict_line
from verltop.ui.render import hanging

NO_MEMORY = ("memory by phase needs the history of a running view: it fills in as the job runs its steps (a "
             "phase's peak after its first samples, growth after a few steps)")


def findings_text(v: MemoryView | None, training: TrainingView | None, width: int, all_headroom: bool = False) -> Text:
    t = Text()

    def line(s: str, style: str = "") -> None:
        t.append(f"{hanging(s, width, 2)}\n", style=style)

    if v is None:
        line(NO_MEMORY, "grey70")
    else:
        for o in v.oom:
            line(verdict_line(o), "bold red")
        for g in sorted(v.growth, key=lambda g: -g.bytes_per_step):
            line(f"GROWS  {growth_text(g)}", "bold yellow")
        lows = [h for h in v.headroom if low(h)]
        for h in sorted(lows, key=lambda h: (h.steps_to_limit if h.steps_to_limit is not None else 1e9)):
            line(f"LOW  {headroom_text(h)}", "yellow")
        rest = [h for h in v.headroom if not low(h) and h.free_fraction is not None]
        if all_headroom:
            for h in rest:
                line(f"headroom  {headroom_text(h)}")
        elif rest:
            worst = min(rest, key=lambda h: h.free_fraction or 1.0)
            line(f"headroom  lowest of {len(rest)}: {headroom_text(worst)}")
        for e in v.engine_holds:
            line(f"engine  {hold_text(e)}")
        if v.note:
            line(v.note, "grey70")
        if not (v.oom or v.growth or lows):
            line("no phase keeps memory step after step; no rank is near its limit", "green")
    peaks = verl_peaks(v.verl_peaks if v is not None else (), training)
    for key, value in peaks:
        line(f"verl  {verl_peak_text(key, value)}", "grey70")
    t.rstrip()
    return t


class MemoryFindings(Static):
    """Repaints only when its text changed."""

    def show(self, text: Text) -> None:
        if text != getattr(self, "_shown", None):
            self._shown = text
            self.update(text)
