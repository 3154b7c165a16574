"""Slow ranks: per phase call over the last finished steps, the worker that ends last most often, and by
how much (docs/training.md).

Each finished call of a step (one worker group's run of one method: every agent-loop worker's
``generate_sequences``, every DP rank's ``update_actor``) knows which rank ended last and how long after the
first one (``PhaseRun.late_actor_id``, ``skew_s``). A worker that is last in most of the last steps, by a
lag that matters against the call's length, is a slow rank; its lag is the median over those steps.

Peers that end together — a collective closes the phase, so every rank leaves it at the same instant — have
no skew to read: the timeline names no one there (the stall rules and a dump's wait chains name who a
collective waits for, from the stacks, when it lasts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import median

from verltop.model import ActorRow, SlowRank, Step

WINDOW = 10  # last finished steps looked at
MIN_TIMES = 3  # a rank last in fewer steps is not named
SHARE = 0.6  # ... nor one last in fewer than this share of the steps where the call ran
MIN_LAG_S = 1.0  # lags below this are noise (poll-derived ends are good to a second)
LAG_SHARE = 0.1  # ... and below this share of the call's length


def slow_ranks(steps: Sequence[Step], rows: Iterable[ActorRow] = (), window: int = WINDOW) -> tuple[SlowRank, ...]:
    """The slow ranks of the last ``window`` finished steps, the largest lag first."""
    done = [s for s in steps if not s.running][-window:]
    # (phase, group, method) -> [(late actor, lag)] over the steps where that call ran with 2+ ranks
    seen: dict[tuple[str, str, str], list[tuple[str | None, float | None]]] = {}
    for s in done:
        for r in s.runs:
            if r.phase == "other" or r.ranks < 2 or r.end_s is None:
                continue
            length = r.end_s - r.start_s
            lag = r.skew_s if r.skew_s is not None and r.skew_s >= max(MIN_LAG_S, LAG_SHARE * length) else None
            seen.setdefault((r.phase, r.group, r.method), []).append((r.late_actor_id, lag))
    by_id = {a.actor_id: a for a in rows}
    out: list[SlowRank] = []
    for (phase, group, method), runs in seen.items():
        counts: dict[str, list[float]] = {}
        for aid, lag in runs:
            if aid is not None and lag is not None:
                counts.setdefault(aid, []).append(lag)
        if not counts:
            continue
        aid, lags = max(counts.items(), key=lambda kv: (len(kv[1]), median(kv[1])))
        if len(lags) < max(MIN_TIMES, SHARE * len(runs)):
            continue
        a = by_id.get(aid)
        out.append(SlowRank(actor_id=aid, actor_name=a.actor_name if a else None,
                            worker_group=(a.worker_group if a else None) or group, rank=a.rank if a else None,
                            phase=phase, method=method, steps=len(lags), lag_s=median(lags), of_steps=len(runs),
                            detail=_gpu_idle(a)))
    out.sort(key=lambda r: -r.lag_s)
    return tuple(out)


def _gpu_idle(a: ActorRow | None) -> str | None:
    """'gpu_idle' when the rank holds GPU memory at (almost) no use while a task of it runs."""
    if a is None or a.task is None or a.gpu_util_percent is None or not a.gpu_mem_bytes:
        return None
    return "gpu_idle" if a.gpu_util_percent < 5 else None
