"""Text from data: sizes, durations, percentages, and the sentences and tags of stalls.

Shared by the TUI, the CLI's text output and the JSON's human-readable fields, so the three always agree.
Pure functions of their arguments; nothing here reads a clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verltop.model import Stall

_UNITS = ("B", "K", "M", "G", "T", "P")


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
    return "-" if v is None else f"{v:.0f}%"


def ratio(r: float | None) -> str:
    """``4×``, ``105×``, ``>999×``; ``many×`` when the median was zero."""
    if r is None:
        return "many×"
    if r >= 1000:
        return ">999×"
    return f"{r:.1f}×" if r < 2 else f"{r:.0f}×"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------- stalls


def stall_reason(st: Stall) -> str:
    """The full sentence for one stall (under the table, in details, ``stall_reason`` in JSON)."""
    r = st.rule
    if r == "dead":
        return f"actor {st.state or 'DEAD'}" + (f": {st.cause}" if st.cause else "")
    if r == "peers":
        return (f"{plural(st.peers or 0, 'peer')} finished {st.method or 'this method'} "
                f"{duration(st.peers_done_s)} ago")
    if r == "median":
        if st.median_s is not None and st.median_s < 0.05:
            return (f"running far longer than usual ({duration(st.running_s)}; it usually takes under 0.1s)")
        return (f"running {ratio(st.ratio)} longer than usual ({duration(st.running_s)} vs median "
                f"{duration(st.median_s)})")
    if r == "age":
        return f"running {duration(st.running_s)} (> {duration(st.limit_s)})"
    if r == "gpu_idle":
        return f"GPU idle for the whole task ({duration(st.running_s)})"
    if r == "gpu_spin":
        return "GPU 100 % without progress: likely waiting in an NCCL collective"
    return r


def stall_tag(st: Stall) -> str:
    """A few words for the table's STALLED column; the sentence is under the table and in details."""
    r = st.rule
    if r == "dead":  # Ray's own words say why (e.g. "... killed due to the node running low on memory")
        return f"{st.state or 'DEAD'}: {st.cause}" if st.cause else st.state or "DEAD"
    if r == "peers":
        return f"peers done {duration(st.peers_done_s)} ago"
    if r == "median":
        return "far over median" if st.median_s is not None and st.median_s < 0.05 else f"{ratio(st.ratio)} median"
    if r == "age":
        return f"> {duration(st.limit_s)}"
    if r == "gpu_idle":
        return "GPU idle"
    if r == "gpu_spin":
        return "GPU 100% no progress"
    return r
