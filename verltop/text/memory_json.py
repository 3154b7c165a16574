"""``memory`` of ``snapshot --json`` and ``incident.json`` (issue #26): ``{by_phase: [...], growth: [...],
headroom: [...], oom: [...], note}``; unknown values null. ``null`` as a whole where nothing is known (a one-shot
snapshot without a watch's history: ``memory_note`` says why)."""

from __future__ import annotations

from typing import Any

from verltop.model.memory import Headroom, MemoryGrowth, MemoryView, PhaseMemory
from verltop.text.oom import oom_json


def phase_memory_json(p: PhaseMemory) -> dict[str, Any]:
    return {"worker_group": p.worker_group, "role": p.role, "rank": p.rank, "actor_name": p.actor_name,
            "step": p.step, "phase": p.phase, "peak_gpu_bytes": p.peak_gpu_bytes, "peak_rss_bytes": p.peak_rss_bytes,
            "samples": p.samples}


def growth_json(g: MemoryGrowth) -> dict[str, Any]:
    return {"worker_group": g.worker_group, "role": g.role, "rank": g.rank, "actor_name": g.actor_name,
            "phase": g.phase, "kind": g.kind, "bytes_per_step": round(g.bytes_per_step),
            "steps": g.steps, "peers_bytes_per_step": None if g.peers_bytes_per_step is None
            else round(g.peers_bytes_per_step)}


def headroom_json(h: Headroom) -> dict[str, Any]:
    return {"worker_group": h.worker_group, "role": h.role, "rank": h.rank, "actor_name": h.actor_name,
            "kind": h.kind, "peak_bytes": h.peak_bytes, "limit_bytes": h.limit_bytes, "limit_source": h.limit_source,
            "steps_to_limit": None if h.steps_to_limit is None else round(h.steps_to_limit, 1)}


def memory_json(m: MemoryView | None) -> dict[str, Any] | None:
    """The memory view, as the issue's contract writes it."""
    if m is None:
        return None
    return {"by_phase": [phase_memory_json(p) for p in m.by_phase], "growth": [growth_json(g) for g in m.growth],
            "headroom": [headroom_json(h) for h in m.headroom], "oom": [oom_json(v) for v in m.oom],
            "note": m.note}
