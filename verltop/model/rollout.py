"""The rollout engines' own load: what each rollout server (vLLM, SGLang) says on its Prometheus ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RolloutLoad:
    """One rollout server (a replica) as its engine reports itself. Summed over the engine's own label sets
    (vLLM's ``engine`` index, data-parallel ranks); ``kv_cache_usage`` is the fullest one's (0..1).
    ``gen_tokens_per_s`` comes from the generated-tokens counter between two reads (None after one read).
    ``problem``: why the last read failed (the values are then the last good ones, or None)."""

    actor_id: str
    actor_name: str | None
    address: str | None  # host:port of its HTTP server; None while not found
    engine: str | None = None  # "vllm" | "sglang"
    running: int | None = None
    waiting: int | None = None
    kv_cache_usage: float | None = None
    preemptions_total: int | None = None
    gen_tokens_total: float | None = None
    gen_tokens_per_s: float | None = None
    read_at: float | None = None
    problem: str | None = None
    # vLLM's vllm:engine_sleep_state: 0 awake, 1 weights offloaded (sleep level 1), 2 all discarded (level 2)
    sleep_state: float | None = None
