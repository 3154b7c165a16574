"""Text of the step timeline: one line per step (its phases as coloured spans on a shared time scale, labelled
with their durations), the header (step, seconds per step, a sparkline of step times), and what a step's
phases took and who arrived last. Pure: Rich ``Text`` from ``Step`` values."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from verltop.analysis.steps import median_step_s, union_s
from verltop.analysis.trends import spark
from verltop.model import PHASES, PhaseRun, Step
from verltop.text.cells import duration
from verltop.ui.render import hanging

# one colour per phase (background of its span); "other" is the controller's own time
PHASE_STYLE = {
    "gen": "#3d7cc9", "reward": "#9a6cc8", "old_log_prob": "#2f9a92", "ref": "#5cb8c4", "values": "#c9a83a",
    "update_critic": "#d9822b", "update_actor": "#c8553d", "weight_sync": "#5e9e44", "save": "#8d6e55",
    "other": "#3a3a3a",
}
SHORT = {"gen": "gen", "reward": "rew", "old_log_prob": "logp", "ref": "ref", "values": "val",
         "update_critic": "crit", "update_actor": "actor", "weight_sync": "sync", "save": "save", "other": ""}
LEFT = 17  # "▸ #12345  12.3s "
NOTABLE_SKEW_S = 1.0  # skews under this (and under 10 % of the phase) are not called out on the line


def phase_at(runs: Sequence[PhaseRun], a: float, b: float, now: float) -> str | None:
    """The phase that covers most of ``[a, b]`` (the later phase on a tie: it is the one that moved on)."""
    best, cover = None, 0.0
    for r in runs:
        e = r.end_s if r.end_s is not None else now
        c = min(b, e) - max(a, r.start_s)
        if c > cover or (c == cover and c > 0 and best is not None and PHASES.index(r.phase) > PHASES.index(best)):
            best, cover = r.phase, c
    return best


def scale_s(steps: Sequence[Step], now: float) -> float:
    """Seconds the full bar width stands for: the longest step shown, but at most 3x the median (a hung
    step runs off the end rather than squashing every other bar)."""
    lens = [s.duration_s if s.duration_s is not None else now - s.started_at for s in steps]
    if not lens:
        return 1.0
    med = median_step_s(steps)
    top = max(lens)
    if med:
        top = min(top, 3 * med)
    return max(top, 1e-3)


def step_line(s: Step, width: int, scale: float, now: float, selected: bool = False) -> Text:
    """``▸ #12  10.2s ███gen 3.1s███▌…`` with the phases placed where they ran in the step."""
    t = Text(no_wrap=True, overflow="crop")
    t.append("▸ " if selected else "  ", style="bold")
    t.append(f"#{s.index:<6}", style="bold" if selected else "")
    dur = s.duration_s if s.duration_s is not None else now - s.started_at
    t.append(f"{duration(dur):>7} ", style="bold yellow" if s.running else "")
    bar_w = max(4, width - LEFT - 1)
    length = dur / scale * bar_w
    cells = min(bar_w, max(1, round(length)))
    overflow = length > bar_w + 0.5
    per = scale / bar_w
    spans: list[tuple[str | None, int]] = []  # (phase, cells)
    for i in range(cells):
        ph = phase_at(s.runs, s.started_at + i * per, s.started_at + (i + 1) * per, now) or "other"
        if spans and spans[-1][0] == ph:
            spans[-1] = (ph, spans[-1][1] + 1)
        else:
            spans.append((ph, 1))
    secs = dict(s.phases) if not s.running else live_phases(s, now)
    for k, (ph, n) in enumerate(spans):
        label = _label(ph or "other", secs.get(ph or "other"), n)
        style = f"black on {PHASE_STYLE.get(ph or 'other', '#3a3a3a')}"
        if ph == "other":
            style = f"grey70 on {PHASE_STYLE['other']}"
        label = label.ljust(n)[:n]
        if overflow and k == len(spans) - 1:
            label = label[: n - 1] + "»"  # the step runs on past the scale
        t.append(label, style=style)
    if s.running:
        t.append("◀", style="bold yellow")
    return t


def live_phases(s: Step, now: float) -> dict[str, float]:
    """A running step's phase times at ``now`` (its ``phases`` were taken when the snapshot was built)."""
    per: dict[str, list[tuple[float, float]]] = {}
    for r in s.runs:
        per.setdefault(r.phase, []).append((r.start_s, r.end_s if r.end_s is not None else now))
    return {p: union_s(v) for p, v in per.items()}


def _label(phase: str, secs: float | None, cells: int) -> str:
    """The longest label that fits: ``gen 3.1s``, ``3.1s``, ``gen``, or nothing."""
    if phase == "other":
        return ""
    d = duration(secs) if secs is not None else ""
    for cand in (f" {SHORT[phase]} {d}", f" {d}", f" {SHORT[phase]}"):
        if len(cand) <= cells:
            return cand
    return ""


def worst_skew(s: Step) -> PhaseRun | None:
    """The phase run whose last rank came in latest relative to its peers, when that is worth a look."""
    runs = [r for r in s.runs if r.skew_s is not None and r.phase != "other"]
    if not runs:
        return None
    r = max(runs, key=lambda r: r.skew_s or 0.0)
    return r if (r.skew_s or 0.0) >= NOTABLE_SKEW_S else None


def header_text(steps: Sequence[Step], now: float, narrow: bool = False) -> Text:
    """``step 123 · 10.2 s/step (median of last 10) · ▂▃▂▂█▂ · now: update_actor 3m12s``; ``narrow``: fewer
    words (80 columns)."""
    t = Text()
    if not steps:
        t.append("no training steps seen yet", style="bold")
        t.append(" — the timeline fills as the worker groups run their step methods", style="grey70")
        return t
    cur = steps[-1]
    t.append(f"step {cur.index}", style="bold")
    med = median_step_s(steps)
    t.append("   ")
    t.append(f"{duration(med)}/step" if med is not None else "-/step", style="bold cyan")
    t.append("   " if narrow else " (median of the last 10)   ", style="grey70")
    lens = [s.duration_s for s in steps if s.duration_s is not None][-40:]
    sp = spark(lens)
    if sp:
        t.append(sp, style="cyan")
        t.append("   ")
    if cur.running:
        live = [r for r in cur.runs if r.end_s is None]
        if live:
            r = max(live, key=lambda r: r.start_s)
            t.append("now ", style="grey70")
            t.append(r.phase + " ", style=f"bold {PHASE_STYLE.get(r.phase, '')}")
            t.append(duration(r.duration_s(now)), style="bold")
            if r.running < r.ranks and r.running:
                t.append(f"  ({r.running} of {r.ranks} {'' if narrow else 'ranks still '}running)", style="bold red")
        else:
            t.append(f"between calls {duration(now - max(r.end_s or 0 for r in cur.runs))}", style="grey70")
    return t


def legend() -> Text:
    t = Text()
    for p in PHASES:
        t.append(f" {p} ", style=f"{'grey70' if p == 'other' else 'black'} on {PHASE_STYLE[p]}")
        t.append(" ")
    return t


def skew_text(s: float) -> str:
    """A skew in one format down a column: ``0.0s``, ``1.5s``, ``12s``, ``3m05s`` (never ``0s`` next to ``0.4s``)."""
    return f"{max(s, 0.0):.1f}s" if s < 9.95 else duration(s)


def skew_sentence(r: PhaseRun, now: float) -> str:
    """``rank 7 finished update_actor 20m after its peers`` / ``rank 2 still runs update_actor, 3m after …``."""
    who = f"rank {r.late_rank}" if r.late_rank is not None else "the last rank"
    if r.running and r.skew_s is not None:
        return (f"{who} still runs {r.method}, {duration(r.skew_s)} after the first of its "
                f"{r.ranks - r.running} finished peers")
    return f"{who} finished {r.method} {duration(r.skew_s)} after the first of its peers"


def step_detail(s: Step, now: float, width: int = 120) -> Text:
    """What each phase of a step took, its ranks, the arrival skew, and whether the times are exact; one
    line per phase, cut to ``width`` (the method name goes last: it is what a narrow screen can lose)."""
    head = Text(no_wrap=True, overflow="ellipsis")
    dur = s.duration_s if s.duration_s is not None else now - s.started_at
    head.append(f"step {s.index}   ", style="bold")
    head.append(f"{duration(dur)}{' so far' if s.running else ''}", style="bold yellow" if s.running else "bold")
    head.append("   times from Ray's task events" if s.exact else "   times as the polls saw them (± half a poll)",
                style="grey70")
    lines = [head]
    secs = dict(s.phases) if not s.running else {**dict(s.phases), **live_phases(s, now)}
    for r in s.runs:
        t = Text(no_wrap=True, overflow="ellipsis")
        style = PHASE_STYLE.get(r.phase, "")
        t.append(f"  {r.phase:<14}", style=f"bold {style}")
        t.append(f"{duration(r.duration_s(now)):>7}", style="bold yellow" if r.end_s is None else "")
        t.append(f"  {r.ranks:>4} rank{'s' if r.ranks != 1 else ' '}")
        if r.running:
            t.append(f"  {r.running} running", style="yellow")
        big = False
        if r.skew_s is not None:
            big = r.skew_s >= NOTABLE_SKEW_S and r.skew_s >= 0.1 * max(r.duration_s(now), 1e-9)
            t.append(f"  skew {skew_text(r.skew_s)}", style="bold red" if big else "grey70")
        if big:
            said = skew_sentence(r, now)
            if t.cell_len + 2 + len(said) > width:  # a narrow screen: the sentence on a line of its own
                lines.append(t)
                t = Text(no_wrap=True, overflow="ellipsis")
                t.append(" " * 18 + hanging(said, width, 18), style="red")
                t.no_wrap = False
            else:
                t.append(f"  {said}", style="red")
        else:
            t.append(f"  {r.group}.{r.method}", style="grey50")
        lines.append(t)
    if "other" in secs:
        lines.append(Text(f"  {'other':<14}{duration(secs['other']):>7}  controller and gaps between calls "
                          "(advantages, data loading)", style="grey70", no_wrap=True, overflow="ellipsis"))
    for t in lines:
        if t.no_wrap:
            t.truncate(max(20, width), overflow="ellipsis")
    return Text("\n").join(lines)
