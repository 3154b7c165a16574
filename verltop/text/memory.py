"""Memory in words: a phase's growth as a sentence, the main screen's mark for a rank short of memory, and
why a snapshot has no memory view."""

from __future__ import annotations

from verltop.analysis.memory_view import MIB
from verltop.model import Headroom, MemoryGrowth

NO_HISTORY = ("no history: a one-shot snapshot has no memory by phase (give --watch-dir DIR of a running "
              "`verltop watch`)")
KIND_WORD = {"gpu": "GPU", "host": "host"}


def size(b: float | None) -> str:
    """``1.5 GiB``, ``150 MiB``; ``?`` when unknown."""
    if b is None:
        return "?"
    a = abs(b)
    if a >= 1 << 30:
        return f"{b / (1 << 30):.1f} GiB"
    return f"{b / MIB:.0f} MiB"


def who(worker_group: str | None, rank: int | None, actor_name: str | None, role: str | None = None) -> str:
    """``rank 1 of wg``, the actor's name, ``the controller`` (an unnamed actor, by its role)."""
    if rank is not None and worker_group:
        return f"rank {rank} of {worker_group}"
    return actor_name or (f"the {role}" if role else None) or worker_group or "an actor"


def growth_sentence(g: MemoryGrowth) -> str:
    """``rank 1 of actor_rollout: +150 MiB GPU per step in update_actor over 7 steps; peers flat``."""
    peers = g.peers_bytes_per_step
    if peers is None:
        tail = "no peers to compare"
    elif abs(peers) < 0.25 * g.bytes_per_step or abs(peers) < 16 * MIB:
        tail = "peers flat"
    else:
        tail = f"peers +{size(peers)} per step"
    return (f"{who(g.worker_group, g.rank, g.actor_name, g.role)}: +{size(g.bytes_per_step)} {KIND_WORD.get(g.kind, g.kind)} "
            f"per step in {g.phase} over {g.steps} steps; {tail}")


def headroom_mark(h: Headroom) -> str:
    """The row's short mark: ``GPU full in 6 steps`` or ``GPU 3% free``."""
    kind = KIND_WORD.get(h.kind, h.kind)
    if h.steps_to_limit is not None:
        n = int(h.steps_to_limit)
        return f"{kind} full in {n} step{'s' if n != 1 else ''}"
    free = h.free_fraction
    return f"{kind} {free * 100:.0f}% free" if free is not None else f"{kind} near its limit"


def headroom_sentence(h: Headroom) -> str:
    """``rank 1 of actor_rollout: GPU peak 71.2 GiB of 75.0 GiB (the GPU's total less other processes); full in
    6 steps at its growth``."""
    src = {"gpu_total": "the GPU's total less other processes", "ray_memory_threshold":
           "the node's memory at Ray's kill threshold less other processes", "cgroup":
           "the container's limit at Ray's kill threshold less other processes"}.get(h.limit_source or "", "")
    s = f"{who(h.worker_group, h.rank, h.actor_name, h.role)}: {KIND_WORD.get(h.kind, h.kind)} peak {size(h.peak_bytes)}"
    if h.limit_bytes is not None:
        s += f" of {size(h.limit_bytes)}" + (f" ({src})" if src else "")
    if h.steps_to_limit is not None:
        s += f"; full in {h.steps_to_limit:.0f} steps at its growth"
    return s
