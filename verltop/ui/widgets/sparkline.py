"""A metric's values as one line of block characters; a non-finite value as ✗, an anomaly's step in red."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(points: Sequence[tuple[int, float | None]], width: int, marks: set[int] | frozenset[int] = frozenset(),
              style: str = "cyan") -> Text:
    """The last ``width`` points, scaled between their finite min and max (the newest at the right)."""
    pts = list(points[-width:]) if width > 0 else []
    finite = [v for _, v in pts if v is not None and math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = hi - lo
    t = Text(" " * (width - len(pts)))
    for step, v in pts:
        bad = step in marks
        if v is None or not math.isfinite(v):
            t.append("✗", style="bold red")
            continue
        i = 3 if span <= 0 else min(7, int((v - lo) / span * 7.999))
        t.append(BLOCKS[i], style="bold red" if bad else style)
    return t
