"""The OOM verdict in words: the main screen's row, ``dump``'s suspect, ``snapshot``, the ``oom`` and ``memory``
incidents (its JSON is ``text.contract.oom_json``)."""

from __future__ import annotations

from verltop.analysis.oom import lead_kind
from verltop.analysis.rank_sets import compact_ints
from verltop.model import ActorRow
from verltop.model.memory import Headroom, MemoryGrowth, OomVerdict
from verltop.text.cells import size
from verltop.text.memory import who as memory_who

_HOW = {
    "task_error": "its call raised torch's OutOfMemoryError",
    "worker_log": "its process died of it (its worker log)",
    "memory_monitor": "Ray's memory monitor killed it",
    "sigkill_near_limit": "it died of SIGKILL with its memory near the limit",
}


def who(v: OomVerdict) -> str:
    """``rank 1 of actor_rollout`` (names, never ids), else the actor's name."""
    if v.rank is not None and v.worker_group:
        return f"rank {v.rank} of {v.worker_group}"
    return v.actor_name or v.role or "a process"


def _mem(v: OomVerdict) -> str:
    return "GPU" if v.kind == "gpu" else "host"


def where(v: OomVerdict) -> str:
    """``in update_actor at step 7`` (what is known of it)."""
    parts = []
    if v.phase or v.method:
        parts.append(f"in {v.phase or v.method}")
    if v.step is not None:
        parts.append(f"at step {v.step}")
    return " ".join(parts)


def verdict_reason(v: OomVerdict) -> str:
    """``ran out of GPU memory in update_actor at step 7 (CUDA out of memory. Tried to allocate …)``: the
    suspect's reason."""
    at = where(v)
    text = f"ran out of {_mem(v)} memory" + (f" {at}" if at else "")
    if v.message:
        text += f" ({v.message})"
    return text


def verdict_tag(v: OomVerdict) -> str:
    """The row's few words: ``OOM (GPU) update_actor s7``."""
    at = " ".join(x for x in (v.phase or v.method, f"s{v.step}" if v.step is not None else None) if x)
    return f"OOM ({_mem(v)})" + (f" {at}" if at else "")


def lead_up_text(v: OomVerdict) -> str:
    """The lead-up in one sentence: the rank's memory in that phase over the last steps, its growth, its
    peers' peaks; says so when the memory book had none."""
    mem = lead_kind(v.kind, v.lead_up)
    kind = "GPU memory" if mem == "gpu" else "RSS"
    parts = []
    if v.lead_up:
        pts = []
        for p in v.lead_up:
            peak = p.peak_gpu_bytes if mem == "gpu" else p.peak_rss_bytes
            pts.append(f"s{p.step} {size(peak) if p.samples else 'no sample'}")
        parts.append(f"its peak {kind} in {v.phase}: " + ", ".join(pts))
    if v.growth is not None and v.growth.bytes_per_step:
        g = v.growth
        peers = (f" (peers {_signed(g.peers_bytes_per_step)} per step)" if g.peers_bytes_per_step is not None
                 else "")
        parts.append(f"it kept {_signed(g.bytes_per_step)} per step in {g.phase} over {g.steps} steps{peers}")
    if v.peers_peak_bytes:
        parts.append("peers' peaks there: " + ", ".join(f"rank {r} {size(b)}" for r, b in v.peers_peak_bytes))
    if v.top_processes:
        parts.append("top processes on the node: " + ", ".join(f"{name} (pid {pid}) {size(b)}"
                                                               for pid, name, b in v.top_processes[:3]))
    if not parts:
        return "lead-up: no memory samples of it in that phase"
    return "lead-up: " + "; ".join(parts)


def verdict_line(v: OomVerdict) -> str:
    """The whole verdict: who, what, how found, and the lead-up."""
    pid = f" (pid {v.pid})" if v.pid else ""
    return f"OOM: {who(v)}{pid} {verdict_reason(v)}; {_HOW.get(v.how, v.how)}. {lead_up_text(v)}"


def _signed(n: float | None) -> str:
    if n is None:
        return "-"
    return ("+" if n >= 0 else "-") + size(abs(n))


def waiting_text(v: OomVerdict, waiting: list[ActorRow]) -> str:
    """``Rank 0 of actor_rollout still runs actor_rollout_update_actor: it waits for it (a waiter, not a
    suspect).``"""
    ranks = sorted(a.rank for a in waiting if a.rank is not None)
    tasks = sorted({a.task for a in waiting if a.task})
    who_ = (f"Rank{'s' if len(ranks) != 1 else ''} {compact_ints(ranks)} of {v.worker_group}" if ranks
            else f"{len(waiting)} peer{'s' if len(waiting) != 1 else ''}")
    runs = "runs" if len(waiting) == 1 else "run"
    return f"{who_} still {runs} {', '.join(tasks)}: waiting for it (waiters, not suspects)."


def headroom_summary(h: Headroom, growth: MemoryGrowth | None, steps: float, free: float) -> str:
    """The ``memory`` incident's line: ``Memory: rank 1 of actor_rollout has 4 steps left before its host limit
    (peak 3.1G of 3.4G, ray_memory_threshold; +150.0M per step in update_actor).``"""
    who_ = memory_who(h.worker_group, h.rank, h.actor_name, h.role)
    mem = "GPU" if h.kind == "gpu" else "host"
    if h.steps_to_limit is not None and h.steps_to_limit <= steps:
        head = f"has {h.steps_to_limit:.1f} steps left before its {mem} memory limit"
    else:
        f = h.free_fraction
        head = f"has {f * 100:.1f} % of its {mem} memory limit left" if f is not None else f"is near its {mem} limit"
    detail = [f"peak {size(h.peak_bytes)} of {size(h.limit_bytes)}" + (f", {h.limit_source}" if h.limit_source else "")]
    if growth is not None:
        detail.append(f"{_signed(growth.bytes_per_step)} per step in {growth.phase}")
    return f"Memory: {who_} {head} ({'; '.join(detail)}; the line: {steps:g} steps or {free * 100:g} % free)."
