"""Pure rendering helpers returning Rich Text: bars. One threshold table for colours."""

from __future__ import annotations

import textwrap

from rich.text import Text

from verltop.text.cells import size_short

_EIGHTHS = " ▏▎▍▌▋▊▉"

# (moderate, heavy) thresholds in percent, as nvitop: GPU 10/75, memory 10/80
THRESHOLDS = {"gpu": (10.0, 75.0), "mem": (10.0, 80.0), "cpu": (10.0, 80.0)}
LEVEL_STYLE = ("green", "yellow", "red")


def level(kind: str, percent: float) -> int:
    lo, hi = THRESHOLDS.get(kind, (10.0, 80.0))
    return 0 if percent < lo else 1 if percent < hi else 2


def bar(percent: float | None, width: int = 7, kind: str = "gpu", label: str | None = None,
        dim: bool = False) -> Text:
    """An eighth-block bar with its value; hatched ``N/A`` for None. Width counts the bar cells only."""
    if percent is None:
        t = Text("░" * width, style="grey30")
        t.append(" " + (label if label is not None else " N/A"), style="grey50")
        return t
    p = max(0.0, min(100.0, percent))
    cells = p / 100.0 * width
    full = int(cells)
    rem = int((cells - full) * 8)
    s = "█" * full + (_EIGHTHS[rem] if full < width and rem else "")
    style = "grey50" if dim else LEVEL_STYLE[level(kind, p)]
    t = Text(s.ljust(width), style=style)
    text = label if label is not None else ("MAX" if p >= 100 else f"{p:3.0f}%")
    t.append(" " + text.rjust(4), style="grey70" if not dim else "grey50")
    return t


def mem_bar(used: int | None, total: int | None, width: int = 7, dim: bool = False) -> Text:
    if used is None:
        return bar(None, width, "mem")
    if not total:
        return Text(" " * width + " " + size_short(used).rjust(4))
    return bar(used / total * 100.0, width, "mem", label=size_short(used), dim=dim)


def hanging(text: str, width: int, indent: int, used: int | None = None) -> str:
    """``text`` wrapped to ``width`` after ``used`` cells of its first line (``indent`` when not given), its
    next lines starting at ``indent`` (a hanging indent: a reason wraps under itself, not under its label)."""
    used = indent if used is None else used
    width = max(width, indent + 10, used + 10)
    w = textwrap.TextWrapper(width=width, initial_indent=" " * used, subsequent_indent=" " * indent,
                             break_long_words=False, break_on_hyphens=False)
    return w.fill(text)[used:]
