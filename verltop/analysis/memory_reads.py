"""Readings of a memory view that other parts share: the orders of its lists (a recording's delta rebuilds
them in the same order from stored rows) and the ranks short of memory (the main screen's mark, the watch's
alert). Pure."""

from __future__ import annotations

from verltop.model import PHASES, Headroom, MemoryView


# The orders of the view's lists (a recording's delta rebuilds them in the same order from stored rows).
def phase_order(step: int, group: str | None, rank: int | None, actor_id: str, phase: str) -> tuple:
    return (step, group or "", rank if rank is not None else 1 << 30, actor_id,
            PHASES.index(phase) if phase in PHASES else len(PHASES))


def growth_order(bytes_per_step: float, actor_id: str, phase: str, kind: str) -> tuple:
    return (-bytes_per_step, actor_id, phase, kind)


def headroom_order(group: str | None, rank: int | None, actor_id: str, kind: str) -> tuple:
    return (group or "", rank if rank is not None else 1 << 30, actor_id, kind)


def low_headroom(v: MemoryView | None, steps_left: float = 10.0, free_below: float = 0.05) -> dict[str, Headroom]:
    """Ranks short of memory, by actor id (the tightest kind of each): full within ``steps_left`` steps at
    their growth, or less than ``free_below`` of their limit free at their tightest sample."""
    out: dict[str, tuple[float, Headroom]] = {}
    for h in v.headroom if v is not None else ():
        free = h.free_fraction
        if h.steps_to_limit is not None and h.steps_to_limit <= steps_left:
            score = h.steps_to_limit / steps_left * free_below  # a forecast weighs as its share of the window
        elif free is not None and free < free_below:
            score = free
        else:
            continue
        cur = out.get(h.actor_id)
        if cur is None or score < cur[0]:
            out[h.actor_id] = (score, h)
    return {k: h for k, (_, h) in out.items()}
