"""The rollout engines' load in words: one replica's figures, and which replica a generation waits on."""

from __future__ import annotations

from collections.abc import Sequence

from verltop.model import RolloutLoad


def load_text(r: RolloutLoad) -> str:
    """``vllm 14 running, 0 waiting, KV cache 63%, 2 preemptions, 812 tokens/s`` (or why it is not known)."""
    if r.read_at is None:
        return f"not read: {r.problem}" if r.problem else "not read yet"
    parts = [f"{r.engine or 'engine'} {_n(r.running)} running", f"{_n(r.waiting)} waiting"]
    if r.kv_cache_usage is not None:
        parts.append(f"KV cache {r.kv_cache_usage * 100:.0f}%")
    if r.preemptions_total is not None:
        parts.append(f"{r.preemptions_total} preemption{'' if r.preemptions_total == 1 else 's'}")
    if r.gen_tokens_per_s is not None:
        parts.append(f"{r.gen_tokens_per_s:.0f} tokens/s")
    out = ", ".join(parts)
    return f"{out} (last read failed: {r.problem})" if r.problem else out


def _n(v: int | None) -> str:
    return "?" if v is None else str(v)


def tail_line(phase: str | None, loads: Sequence[RolloutLoad]) -> str | None:
    """While the step generates: the replicas still busy when others are idle (the long tail), e.g.
    ``gen waits on vllm_server_3_0: 14 requests still running, the other replicas idle``."""
    read = [r for r in loads if r.read_at is not None and r.running is not None]
    if phase != "gen" or len(read) < 2:
        return None
    busy = [r for r in read if (r.running or 0) + (r.waiting or 0) > 0]
    if not busy or len(busy) > max(1, len(read) // 4):
        return None
    who = ", ".join(f"{r.actor_name or r.actor_id} ({(r.running or 0) + (r.waiting or 0)})" for r in busy)
    if len(busy) == 1:
        r = busy[0]
        n = (r.running or 0) + (r.waiting or 0)
        who = f"{r.actor_name or r.actor_id}: {n} request{'' if n == 1 else 's'} still running"
    others = "the other replica" if len(read) - len(busy) == 1 else "the other replicas"
    return f"gen waits on {who}, {others} idle"
