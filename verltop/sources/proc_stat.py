"""``/proc/PID/stat``, parsed in one place.

Stdlib only, and nothing of verltop: the probe ships this module by value (with ``procfs``, ``children`` and
``node_check``, which use it) to nodes where verltop may not be installed.

The command name sits in parentheses and may itself hold spaces and parentheses, so the fields are counted
from the *last* ``)``. Only the fields up to ``rss`` are split; the thirty after it are never read.
"""

from __future__ import annotations

# (ppid, comm, starttime in clock ticks, utime + stime in clock ticks, rss in pages)
Stat = tuple[int, str, int, int, int]


def parse_stat(b: bytes) -> Stat | None:
    """``(ppid, comm, starttime, cpu ticks, rss pages)`` from the bytes of a ``/proc/PID/stat``; None for a
    process that exited and was not yet reaped (a zombie: nothing left to show) or text that is not a stat."""
    try:
        lp = b.index(b"(")
        rp = b.rindex(b")")
        f = b[rp + 2 :].split(None, 22)  # state is f[0]; fields 4.. of proc(5) follow
        if f[0] in (b"Z", b"X"):
            return None
        return (int(f[1]), b[lp + 1 : rp].decode(errors="replace"), int(f[19]), int(f[11]) + int(f[12]),
                int(f[21]))
    except (ValueError, IndexError):
        return None


def read_stat(pid: int, proc: str = "/proc") -> Stat | None:
    """``parse_stat`` of the process's stat file; None when it is gone (or a zombie)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            return parse_stat(f.read(2048))
    except OSError:
        return None
