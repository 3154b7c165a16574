"""Sets of ranks as people write them (``0-3,5,7-9``). Imports nothing: every text that names ranks uses it."""

from __future__ import annotations

from collections.abc import Iterable


def compact_ints(xs: Iterable[int]) -> str:
    """``[0,1,2,3,5,7,8,9]`` → ``0-3,5,7-9``."""
    s = sorted(set(xs))
    if not s:
        return ""
    parts = []
    lo = prev = s[0]
    for x in s[1:]:
        if x == prev + 1:
            prev = x
            continue
        parts.append(f"{lo}-{prev}" if prev > lo else str(lo))
        lo = prev = x
    parts.append(f"{lo}-{prev}" if prev > lo else str(lo))
    return ",".join(parts)
