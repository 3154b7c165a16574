"""Stall rules: which running tasks look stuck, and why (each a ``Stall`` carrying its numbers; the
sentence and the table's tag are made from them in ``verltop.text.stalls``).

Busy bars are not progress: a rank waiting in an NCCL collective reads GPU 100 % and host CPU ~100 %
while nothing moves, so a pegged GPU never clears a stall; it is named as the likely wait instead.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from verltop.analysis.history import FinishedRun, TaskHistory
from verltop.model import Stall


@dataclass(frozen=True, slots=True)
class StallSettings:
    stall_after_s: float = 300.0
    median_factor: float = 3.0
    median_min_samples: int = 3
    median_floor_s: float = 10.0  # never call a task slow before this, however short its median
    peer_window_s: float = 30.0
    gpu_idle_after_s: float = 60.0
    gpu_idle_percent: float = 1.0
    gpu_busy_percent: float = 90.0
    pending_after_s: float = 10.0  # an actor Ray cannot place (its PG or resources): stalled after this
    startup_after_s: float = 60.0  # an actor still starting (worker, runtime env set-up): stalled after this
    restart_window_s: float = 600.0  # an ALIVE actor that restarted this recently is in a restart loop


@dataclass(slots=True)
class TaskView:
    """What the rules need of one actor's running task. Not frozen (treat it as if it were): a build makes
    one per running rank, and a frozen init costs 3x."""

    actor_id: str
    group: str
    method: str | None
    task_id: str | None
    running_s: float | None
    start_s: float | None
    has_gpu: bool
    gpu_util_percent: float | None
    state: str
    death_cause: str | None


def _peers_finished(runs, actor_id: str, start_s: float, memo: dict | None, key: tuple) -> tuple[int, float] | None:
    """How many other actors finished this method after ``start_s`` (this round), and the last finish.

    Ranks of a group start a method together, so per (group, method) the runs are indexed once per
    snapshot (``memo``): each actor's last finish, newest first; a rank's answer is then a bisection, not a
    scan (at 1,024 ranks of which half finished, the scans were half a million steps a build).
    """
    idx = memo.get(key) if memo is not None else None
    if idx is None:
        by_actor: dict[str | None, float] = {}
        for r in runs:
            if r.end_s > by_actor.get(r.actor_id, float("-inf")):
                by_actor[r.actor_id] = r.end_s
        newest = sorted(((e, a) for a, e in by_actor.items()), reverse=True)
        idx = ([-e for e, _ in newest], newest, by_actor)
        if memo is not None:
            memo[key] = idx
    neg_ends, newest, by_actor = idx
    n = bisect.bisect_left(neg_ends, -start_s)  # the actors whose last finish is after start_s
    own = by_actor.get(actor_id)
    if own is not None and own > start_s:
        n -= 1
    if n <= 0:
        return None
    last = newest[0][0] if newest[0][1] != actor_id else newest[1][0]
    return n, last


def _peers_failed(hist: TaskHistory, key: tuple[str, str], v: TaskView,
                  memo: dict | None = None) -> tuple[int, float, str] | None:
    """Other actors whose call of this method failed in a collective after this one began: ``(how many, the
    last failure's time, its error)``. Indexed once per snapshot and method as ``_peers_finished`` is (each
    actor's last failure, newest first): a scan of the failures for every rank was 256 x 1,024 steps a build."""
    fs = hist.failures.get(key)
    if not fs or v.start_s is None:
        return None
    mkey = ("failed", key)
    idx = memo.get(mkey) if memo is not None else None
    if idx is None:
        last_of: dict[str | None, tuple[FinishedRun, int]] = {}
        for i, f in enumerate(fs):  # of two at the same time, the first stands (as max() over them chose)
            old = last_of.get(f.actor_id)
            if old is None or f.end_s > old[0].end_s:
                last_of[f.actor_id] = (f, i)
        newest = [f for f, _ in sorted(last_of.values(), key=lambda fi: (-fi[0].end_s, fi[1]))]
        by_actor = {a: f for a, (f, _) in last_of.items()}
        idx = ([-f.end_s for f in newest], newest, by_actor)
        if memo is not None:
            memo[mkey] = idx
    neg_ends, newest, by_actor = idx
    since = v.start_s - 1.0
    n = bisect.bisect_right(neg_ends, -since)  # the actors whose last failure is at ``since`` or after
    own = by_actor.get(v.actor_id)
    if own is not None and own.end_s >= since:
        n -= 1
    if n <= 0:
        return None
    last = newest[0] if newest[0].actor_id != v.actor_id else newest[1]
    return n, last.end_s, last.error or ""


def stalls_for(v: TaskView, hist: TaskHistory, now: float, cfg: StallSettings,
               memo: dict | None = None) -> tuple[Stall, ...]:
    """All stall reasons for one actor, most telling first. ``memo``: a dict shared by the calls of one
    snapshot (per-method indexes)."""
    out: list[Stall] = []
    if v.state in ("DEAD", "RESTARTING"):
        return (Stall("dead", state=v.state, cause=v.death_cause),)
    if v.method is None or v.running_s is None:
        return ()
    age = v.running_s
    key = (v.group, v.method)
    runs = hist.runs.get(key)
    failed = _peers_failed(hist, key, v, memo) if v.start_s is not None else None
    if failed is not None:
        # peers gave up waiting in a collective (they waited its timeout already): no grace window
        n, last, error = failed
        out.append(Stall("peers", running_s=age, method=v.method, peers=n, peers_done_s=now - last, state="failed",
                         cause=error))
    elif runs and v.start_s is not None:
        peer = _peers_finished(runs, v.actor_id, v.start_s, memo, key)
        if peer is not None:
            n, last = peer
            if now - last > cfg.peer_window_s:
                out.append(Stall("peers", running_s=age, method=v.method, peers=n, peers_done_s=now - last))
    durs = hist.durations.get(key)
    if durs and len(durs) >= cfg.median_min_samples:
        # one median per method and snapshot, not per rank (a sort of the method's durations each)
        mkey = ("median", key)
        med = memo.get(mkey) if memo is not None else None
        if med is None:
            med = _median(durs)
            if memo is not None:
                memo[mkey] = med
        limit = max(cfg.median_factor * med, cfg.median_floor_s)
        if age > limit:
            out.append(Stall("median", running_s=age, method=v.method, median_s=med,
                             ratio=age / med if med > 0 else None, limit_s=limit))
    if age > cfg.stall_after_s:
        out.append(Stall("age", running_s=age, method=v.method, limit_s=cfg.stall_after_s))
    if v.has_gpu and v.task_id and age > cfg.gpu_idle_after_s:
        r = hist.running.get(v.task_id)
        if r is not None and r.gpu_samples >= 3 and r.gpu_max_percent < cfg.gpu_idle_percent:
            out.append(Stall("gpu_idle", running_s=age, method=v.method))
    if out and v.gpu_util_percent is not None and v.gpu_util_percent >= cfg.gpu_busy_percent:
        out.append(Stall("gpu_spin", running_s=age, method=v.method))
    return tuple(out)


def _median(xs: Iterable[float]) -> float:
    """``statistics.median`` without its import (6 ms of a one-shot command's start)."""
    v = sorted(xs)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
