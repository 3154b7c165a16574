"""Cells: how a number is written (sizes, durations, ages, percentages, ratios, times), and the plain-text table.

Shared by the TUI, the CLI's text output and the JSON's human-readable fields, so the three always agree.
Pure functions of their arguments; nothing here reads a clock.
"""

from __future__ import annotations

import time

_UNITS = ("B", "K", "M", "G", "T", "P")


def shorten(s: str, width: int) -> str:
    """``s`` in ``width`` cells, cut in the middle where a name's end says what it is:
    ``agent_loop_worker_0`` → ``agent…orker_0``, ``EngineCore_DP0`` → ``Engin…_DP0``."""
    if len(s) <= width:
        return s
    if width <= 1:
        return "…"[:width]
    head = (width - 1) // 2
    return s[:head] + "…" + s[len(s) - (width - 1 - head):]


def size(n: int | float | None) -> str:
    """Bytes, 1024-based: ``512B``, ``3K``, ``423.0M``, ``3.3G``; ``-`` when unknown."""
    if n is None:
        return "-"
    f = float(n)
    for unit in _UNITS:
        if abs(f) < 1024 or unit == _UNITS[-1]:
            return f"{f:.0f}{unit}" if unit in ("B", "K") else f"{f:.1f}{unit}"
        f /= 1024
    return "-"


def size_short(n: int | float | None) -> str:
    """Bytes in at most four characters (table cells): ``801M``, ``1.5G``, ``140G``."""
    if n is None:
        return "-"
    f = float(n)
    for unit in _UNITS:
        if f < 1000 or unit == _UNITS[-1]:
            return f"{f:.1f}{unit}" if f < 10 and unit != "B" else f"{f:.0f}{unit}"
        f /= 1024
    return "-"


def duration(s: float | None) -> str:
    """Compact duration: ``0.4s``, ``13s``, ``1m05s``, ``2h03m``, ``3d04h``; ``-`` when unknown."""
    if s is None:
        return "-"
    if s < 0:
        s = 0.0
    if s < 9.95 and s != int(s):
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def age(s: float | None) -> str:
    """A clock-like age in whole seconds (the table's AGE column): ``13s``, ``1m05s``."""
    return "-" if s is None else duration(float(int(max(0.0, s))))


def pct(v: float | None) -> str:
    """A percentage, whole: ``42%``; ``-`` when unknown."""
    return "-" if v is None else f"{v:.0f}%"


def ratio(r: float | None) -> str:
    """``4×``, ``105×``, ``>999×``; ``many×`` when the median was zero."""
    if r is None:
        return "many×"
    if r >= 1000:
        return ">999×"
    return f"{r:.1f}×" if r < 2 else f"{r:.0f}×"


def plural(n: int, word: str) -> str:
    """``1 node``, ``3 nodes``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def utc_stamp(t: float) -> str:
    """A moment as a file name's stamp: ``20261129T031258Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))


def utc_time(t: float) -> str:
    """A moment as people read it: ``2026-11-29 03:12:58 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns two spaces apart, as wide as their widest cell."""
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = lambda cells: "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()  # noqa: E731
    return "\n".join([line(headers), *(line(r) for r in rows)])
