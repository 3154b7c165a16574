"""Number and string coercion for values read from outside (JSON, env vars, logs, pickles).

Total functions: anything that is not cleanly the wanted type becomes ``None``. Every parser uses these, so
"is ``True`` a number?" and "is ``NaN`` a float?" are answered once (no; no).
"""

from __future__ import annotations

from typing import Any


def to_int(v: Any) -> int | None:
    """``int`` from an int, a finite float or a numeric string (``"0x1f"`` too); else ``None``."""
    if type(v) is int:  # the common case first (not a bool: its type is bool)
        return v
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 1e18 else None
    if isinstance(v, str):
        s = v.strip()
        try:
            if s[:2].lower() == "0x":
                return int(s, 16)
            return int(s) if s.lstrip("-").isdigit() and len(s) < 40 else _int_of_float(float(s))
        except ValueError:
            return None
    return None


def _int_of_float(f: float) -> int | None:
    return int(f) if f == f and abs(f) < 1e18 else None


_BIG = 1 << 1023


def to_float(v: Any) -> float | None:
    """A finite ``float`` from a number or a numeric string; else ``None``."""
    t = type(v)
    if t is float:  # the common cases first (nan - nan and inf - inf are nan)
        return v if v - v == 0.0 else None
    if t is int:
        return float(v) if -_BIG < v < _BIG else None
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        if isinstance(v, int) and not -_BIG < v < _BIG:  # beyond a float (the stdlib parses any int)
            return None
        f = float(v)
        return f if f == f and abs(f) != float("inf") else None
    if isinstance(v, str):
        try:
            return to_float(float(v))
        except ValueError:
            return None
    return None


def to_str(v: Any) -> str | None:
    """A string as is; numbers as text; anything else ``None``."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float, bool)):
        return str(v)
    return None


def to_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def one_line(x: object, limit: int = 300) -> str:
    """Any text (an exception, a server's message) as one line of at most ``limit`` characters."""
    return " ".join(str(x).split())[:limit]
