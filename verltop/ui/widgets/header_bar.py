"""The header: cluster totals, the verl phase, the progress clock and the data's freshness."""

from __future__ import annotations

from rich.text import Text

from verltop.model import Snapshot
from verltop.text import fmt_age, fmt_bytes
from verltop.ui.render import bar
from verltop.ui.widgets.text_line import TextLine


def header_text(s: Snapshot | None, paused: bool, width: int = 160, first_error: str | None = None,
                now: float | None = None) -> Text:
    """``now`` (later than the snapshot) moves the progress clock and the data's age on."""
    late = max(0.0, now - s.taken_at) if s is not None and now is not None else 0.0
    t = Text()
    if s is None:
        t.append("verltop ", style="bold")
        t.append(first_error if first_error else "connecting to the dashboard…",
                 style="grey70" if not first_error else "bold yellow")
        return t
    alive_nodes = [n for n in s.nodes if n.state == "ALIVE"]
    gpus = [g for n in alive_nodes for g in n.gpus]
    cpu_vals = [n.cpu_percent for n in alive_nodes if n.cpu_percent is not None]
    mem_used = sum(n.mem_used_bytes or 0 for n in alive_nodes)
    mem_total = sum(n.mem_total_bytes or 0 for n in alive_nodes)
    t.append("verltop ", style="bold")
    t.append(s.address, style="grey70")
    t.append(f"   nodes {len(alive_nodes)}", style="bold")
    if len(alive_nodes) != len(s.nodes):
        t.append(f" ({len(s.nodes) - len(alive_nodes)} dead)", style="red")
    t.append(f"   GPUs {len(gpus)}", style="bold")
    if not gpus and s.gpu_note:
        t.append(f" ({s.gpu_note})", style="grey50")
    if gpus:
        utils = [g.util_percent for g in gpus if g.util_percent is not None]
        if utils:
            t.append("  ")
            t.append_text(bar(sum(utils) / len(utils), 8, "gpu"))
    t.append("   actors ", style="bold")
    t.append(str(len(s.actors)))
    stalled = sum(1 for a in s.actors if a.stalled)
    if stalled:
        t.append(f"  {stalled} stalled", style="bold red")
    t.append("\n")
    t.append("CPU ", style="bold")
    t.append_text(bar(sum(cpu_vals) / len(cpu_vals) if cpu_vals else None, 8, "cpu"))
    t.append("   MEM ", style="bold")
    t.append_text(bar(mem_used / mem_total * 100 if mem_total else None, 8, "mem",
                      label=f"{fmt_bytes(mem_used)}/{fmt_bytes(mem_total)}" if mem_total else None))
    t.append("   phase ", style="bold")
    t.append(s.phase or "-", style="bold magenta" if s.phase else "grey50")
    t.append("   last progress ", style="bold")
    if s.progress_s is None:
        t.append("-", style="grey50")
    else:
        p = s.progress_s + late
        t.append(f"{fmt_age(p)} ago", style="bold red" if p > 60 else "green")
    if paused:
        t.append("   PAUSED", style="bold reverse yellow")
    stale = s.stale_sources(late)
    errs = s.errors
    if errs or stale or s.truncated:
        t.append("\n")
        if stale:
            oldest = max(stale, key=lambda x: x.age_s or 0)
            t.append(f"{oldest.name} data {fmt_age((oldest.age_s or 0) + late)} old (stale) ", style="bold yellow")
        if errs:
            t.append(" · ".join(errs)[: max(40, width - 30)], style="yellow")
        if s.truncated:
            t.append(" " + s.truncated, style="yellow")
    return t


class HeaderBar(TextLine):
    """Three lines; repainted only when its text changes, never re-laid out."""

    def show_snapshot(self, s: Snapshot | None, paused: bool, first_error: str | None = None,
                      now: float | None = None) -> None:
        self.show(header_text(s, paused, self.size.width or 160, first_error, now))
        late = max(0.0, now - s.taken_at) if s is not None and now is not None else 0.0
        stale = s is not None and (bool(s.errors) or bool(s.stale_sources(late)))
        self.set_class(stale, "-stale")
