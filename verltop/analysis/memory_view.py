"""What the memory book says: memory by phase and step, the phases that keep what they take (growth), the
headroom before each rank's limit, and what a colocated rollout engine holds while the trainer runs. Pure.

- **By phase.** An actor's episodes are put in the step whose span holds their start (the timeline's
  steps); several calls of one phase in a step are one entry (the highest peak, the first start, the last
  end, the samples summed). A phase that ran for a rank's group but got no sample of it says ``samples`` 0
  and no peak, never 0 bytes.
- **Growth.** What a phase *keeps*: its end minus the end of the actor's entry before it (any phase), step
  after step. A transient peak given back keeps nothing. A phase grows when, after the actor's first
  ``warmup_steps`` steps, over at least ``min_steps`` finished steps, the median kept is material
  (``min_bytes``, or ``limit_share`` of its limit), at least 3 in 4 steps keep a quarter of it, and the
  phase's end itself climbs (Theil-Sen slope at least half of it: a phase that takes what another gives
  back each step does not). The rate is the median kept. Its peers' median rate comes with it: a rank
  whose peers stay flat is a rank's leak; a group that grows together is the group's.
- **Headroom.** Per kind, the sample of the window where the rank came nearest its limit; steps left are
  that margin over the summed rates of its growing phases (None when nothing grows).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from verltop.analysis import roles as R
from verltop.analysis.memory import ActorBook, MemoryBook
from verltop.model import (
    PHASES,
    ActorRow,
    EngineHold,
    Headroom,
    MemoryGrowth,
    MemoryView,
    PhaseMemory,
    RolloutLoad,
    Step,
)

MIB = 1 << 20
SLACK_S = 0.5
# roles whose memory is booked under the job's running phase: they have no phase of their own
AMBIENT_ROLES = frozenset({"controller", "rollout_server", "agent_loop", "reward_loop", "other"})
TRAINER_PHASES = frozenset({"old_log_prob", "ref", "values", "update_critic", "update_actor", "weight_sync", "save"})


@dataclass(frozen=True, slots=True)
class MemorySettings:
    warmup_steps: int = 2
    min_steps: int = 4
    min_bytes: int = 32 * MIB
    limit_share: float = 0.01
    keep_steps: int = 20
    max_by_phase: int = 8192  # rows of by_phase at most (a large job shows fewer steps)


class _Agg:
    """One (step, phase) of one actor: its episodes merged."""

    __slots__ = ("done", "first_at", "g0", "g1", "g_lim", "g_margin", "g_val", "gpk", "h_lim", "h_margin", "h_src",
                 "h_val", "last_at", "n", "phase", "r0", "r1", "role", "rpk", "step")

    def __init__(self, step: int, phase: str, role: str | None, done: bool) -> None:
        self.step, self.phase, self.role, self.done = step, phase, role, done
        self.first_at = self.last_at = 0.0
        self.n = 0
        self.g0 = self.g1 = self.gpk = self.r0 = self.r1 = self.rpk = None
        self.g_margin = self.g_val = self.g_lim = self.h_margin = self.h_val = self.h_lim = self.h_src = None


@dataclass(frozen=True, slots=True)
class _Series:
    """One (phase, kind) of one actor over its finished steps past warm-up."""

    phase: str
    kind: str
    steps: int
    rate: float | None  # the median kept, None below min_steps
    grows: bool


class _Window:
    """The steps the entries are put in."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.starts = [s.started_at for s in steps]
        self.index = [s.index for s in steps]
        last = steps[-1] if steps else None
        self.running = last.index if last is not None and last.running else None
        self.open = {r.phase for r in last.runs if r.end_s is None} if last is not None and last.running else set()
        self.ran = {r.phase for r in last.runs} if last is not None else set()
        self.key = (tuple(self.index[:1]), tuple(self.starts[:1]), tuple(self.index[-1:]), tuple(self.starts[-1:]),
                    len(steps), tuple(sorted(self.open)))

    def step_of(self, t: float) -> int | None:
        # a start estimated from the polls may fall up to half a poll before the step's exact start
        i = bisect.bisect_right(self.starts, t + SLACK_S) - 1
        return self.index[i] if i >= 0 else None

    def done(self, step: int, phase: str) -> bool:
        return step != self.running or (phase in self.ran and phase not in self.open)


def _aggregate(ab: ActorBook, w: _Window) -> list[_Agg]:
    out: dict[tuple[int, str], _Agg] = {}
    for e in ab.eps.values():
        if e.n == 0:
            continue
        step = w.step_of(e.start_s)
        if step is None:
            continue
        a = out.get((step, e.phase))
        if a is None:
            a = out[(step, e.phase)] = _Agg(step, e.phase, e.role, w.done(step, e.phase))
            a.first_at, a.g0, a.r0 = e.first_at, e.g0, e.r0
        elif e.first_at < a.first_at:
            a.first_at, a.g0, a.r0 = e.first_at, e.g0 if e.g0 is not None else a.g0, e.r0 if e.r0 is not None else a.r0
        if e.last_at >= a.last_at:
            a.last_at = e.last_at
            a.g1 = e.g1 if e.g1 is not None else a.g1
            a.r1 = e.r1 if e.r1 is not None else a.r1
        a.n += e.n
        if e.gpk is not None and (a.gpk is None or e.gpk > a.gpk):
            a.gpk = e.gpk
        if e.rpk is not None and (a.rpk is None or e.rpk > a.rpk):
            a.rpk = e.rpk
        if e.g_margin is not None and (a.g_margin is None or e.g_margin < a.g_margin):
            a.g_margin, a.g_val, a.g_lim = e.g_margin, e.g_val, e.g_lim
        if e.h_margin is not None and (a.h_margin is None or e.h_margin < a.h_margin):
            a.h_margin, a.h_val, a.h_lim, a.h_src = e.h_margin, e.h_val, e.h_lim, e.h_src
    return sorted(out.values(), key=lambda a: (a.first_at, a.step))


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The median of the pairwise slopes: a line through noise and a few outliers."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    return median(slopes) if slopes else None


def _series(aggs: list[_Agg], first_step: int, st: MemorySettings, limits: dict[str, int | None]) -> list[_Series]:
    """Each (phase, kind)'s kept memory over the actor's finished steps past warm-up."""
    out = []
    for kind, end_of in (("gpu", lambda a: a.g1), ("host", lambda a: a.r1)):
        kept: dict[str, list[tuple[int, float, int]]] = {}
        prev = None
        for a in aggs:
            end = end_of(a)
            if end is None:
                continue
            if prev is not None and a.done and a.step >= first_step + st.warmup_steps:
                kept.setdefault(a.phase, []).append((a.step, end - prev, end))
            prev = end
        for phase, rows in kept.items():
            rows = rows[-st.keep_steps:]
            n = len(rows)
            if n < st.min_steps:
                out.append(_Series(phase, kind, n, None, False))
                continue
            ks = [k for _, k, _ in rows]
            rate = median(ks)
            limit = limits.get(kind)
            material = rate >= st.min_bytes or (limit is not None and limit > 0 and rate >= st.limit_share * limit)
            grows = False
            if material and sum(k > rate / 4 for k in ks) >= 0.75 * n:
                slope = theil_sen([s for s, _, _ in rows], [e for _, _, e in rows])
                grows = slope is not None and slope >= rate / 2
            out.append(_Series(phase, kind, n, rate, grows))
    return out


def memory_view(book: MemoryBook, steps: Sequence[Step], rows: Iterable[ActorRow],
                rollout: Mapping[str, RolloutLoad] | None = None, st: MemorySettings | None = None,
                verl_peaks: tuple[tuple[str, float], ...] = ()) -> MemoryView:
    """The view of the book at the timeline's ``steps`` (oldest first), for the actors in ``rows``."""
    st = st or MemorySettings()
    steps = list(steps)[-st.keep_steps:]
    if not steps:
        return MemoryView(verl_peaks=verl_peaks, note="no training step seen yet")
    w = _Window(steps)
    row_of = {r.actor_id: r for r in rows}
    per_actor: list[tuple[ActorRow, list[_Agg], list[_Series]]] = []
    for aid, ab in book.actors.items():
        row = row_of.get(aid)
        if row is None:
            continue
        c = ab.cache
        if c is None or c[0] != ab.version or c[1] != w.key:
            aggs = _aggregate(ab, w)
            if aggs and ab.first_step is None:
                ab.first_step = aggs[0].step
            limits = _limits(aggs)
            series = _series(aggs, ab.first_step if ab.first_step is not None else 0, st, limits)
            c = ab.cache = (ab.version, w.key, aggs, series)
        if c[2]:
            per_actor.append((row, c[2], c[3]))

    # peers: the median rate of the other ranks of the group in the same phase and kind
    rates: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for row, _, series in per_actor:
        g = _group(row)
        for s in series:
            if s.rate is not None:
                rates.setdefault((g, s.phase, s.kind), []).append((row.actor_id, s.rate))
    growth: list[MemoryGrowth] = []
    rate_of: dict[tuple[str, str], float] = {}
    for row, _, series in per_actor:
        for s in series:
            if not s.grows or s.rate is None:
                continue
            others = [r for aid, r in rates.get((_group(row), s.phase, s.kind), ()) if aid != row.actor_id]
            growth.append(MemoryGrowth(row.worker_group, row.role, row.rank, row.actor_name, row.actor_id, s.phase,
                                       s.kind, float(s.rate), s.steps, median(others) if others else None))
            rate_of[(row.actor_id, s.kind)] = rate_of.get((row.actor_id, s.kind), 0.0) + s.rate

    headroom = [h for row, aggs, _ in per_actor for h in _headroom(row, aggs, rate_of)]
    headroom.sort(key=lambda h: headroom_order(h.worker_group, h.rank, h.actor_id, h.kind))
    by_phase = _by_phase(per_actor, steps, row_of.values(), st)
    holds = _holds(per_actor, row_of.values(), rollout or {})
    growth.sort(key=lambda g: growth_order(g.bytes_per_step, g.actor_id, g.phase, g.kind))
    return MemoryView(by_phase=tuple(by_phase), growth=tuple(growth), headroom=tuple(headroom),
                      engine_holds=tuple(holds), verl_peaks=verl_peaks)


def _group(row: ActorRow) -> str:
    return row.worker_group or R.short_class(row.class_name)


def _limits(aggs: list[_Agg]) -> dict[str, int | None]:
    g = [a.g_lim for a in aggs if a.g_lim is not None]
    h = [a.h_lim for a in aggs if a.h_lim is not None]
    return {"gpu": min(g) if g else None, "host": min(h) if h else None}


def _headroom(row: ActorRow, aggs: list[_Agg], rate_of: dict[tuple[str, str], float]) -> list[Headroom]:
    out = []
    for kind in ("gpu", "host"):
        tight = None
        peak = None
        for a in aggs:
            margin = a.g_margin if kind == "gpu" else a.h_margin
            pk = a.gpk if kind == "gpu" else a.rpk
            if pk is not None and (peak is None or pk > peak):
                peak = pk
            if margin is not None and (tight is None or margin < tight[0]):
                tight = (margin, a.g_val, a.g_lim, "gpu_total") if kind == "gpu" else (margin, a.h_val, a.h_lim,
                                                                                        a.h_src)
        if peak is None:
            continue
        rate = rate_of.get((row.actor_id, kind))
        if tight is None:
            out.append(Headroom(row.worker_group, row.role, row.rank, row.actor_name, row.actor_id, kind, peak, None,
                                None, None))
            continue
        margin, val, lim, src = tight
        left = None if not rate or rate <= 0 else max(0.0, margin / rate)
        out.append(Headroom(row.worker_group, row.role, row.rank, row.actor_name, row.actor_id, kind, val, lim, src,
                            left))
    return out


def _pm(row: ActorRow, a: _Agg) -> PhaseMemory:
    return PhaseMemory(row.worker_group, a.role or row.role, row.rank, row.actor_name, row.actor_id, a.step, a.phase,
                       a.gpk, a.rpk, a.n, a.g0, a.g1, a.r0, a.r1)


def _by_phase(per_actor: list[tuple[ActorRow, list[_Agg], list[_Series]]], steps: list[Step],
              rows: Iterable[ActorRow], st: MemorySettings) -> list[PhaseMemory]:
    """The last steps' entries (as many steps as ``max_by_phase`` rows allow, at least two), with an entry of
    no samples for each rank whose group ran a phase that no sample of it fell in."""
    by_step: dict[int, list[PhaseMemory]] = {}
    have: set[tuple[str, int, str]] = set()
    for row, aggs, _ in per_actor:
        for a in aggs:
            by_step.setdefault(a.step, []).append(_pm(row, a))
            have.add((row.actor_id, a.step, a.phase))
    members: dict[str, list[ActorRow]] = {}
    for r in rows:
        if r.state == "ALIVE" and r.role not in AMBIENT_ROLES:
            members.setdefault(_group(r), []).append(r)
    out: list[list[PhaseMemory]] = []
    total = 0
    for s in reversed(steps):
        got = list(by_step.get(s.index, ()))
        for run in s.runs:
            if run.phase == "other":
                continue
            for r in members.get(run.group, ()):
                if (r.actor_id, s.index, run.phase) not in have:
                    have.add((r.actor_id, s.index, run.phase))
                    got.append(PhaseMemory(r.worker_group, r.role, r.rank, r.actor_name, r.actor_id, s.index,
                                           run.phase, None, None, 0))
        if out and len(out) >= 2 and total + len(got) > st.max_by_phase:
            break
        out.append(got)
        total += len(got)
    flat = [p for chunk in reversed(out) for p in chunk]
    flat.sort(key=lambda p: phase_order(p.step, p.worker_group, p.rank, p.actor_id, p.phase))
    return flat


# The orders of the view's lists (a recording's delta rebuilds them in the same order from stored rows).
def phase_order(step: int, group: str | None, rank: int | None, actor_id: str, phase: str) -> tuple:
    return (step, group or "", rank if rank is not None else 1 << 30, actor_id,
            PHASES.index(phase) if phase in PHASES else len(PHASES))


def growth_order(bytes_per_step: float, actor_id: str, phase: str, kind: str) -> tuple:
    return (-bytes_per_step, actor_id, phase, kind)


def headroom_order(group: str | None, rank: int | None, actor_id: str, kind: str) -> tuple:
    return (group or "", rank if rank is not None else 1 << 30, actor_id, kind)


def _holds(per_actor: list[tuple[ActorRow, list[_Agg], list[_Series]]], rows: Iterable[ActorRow],
           rollout: Mapping[str, RolloutLoad]) -> list[EngineHold]:
    """Colocated rollout servers (a GPU shared with a trainer rank): the GPU memory they held in each trainer
    phase of the latest step that ran it."""
    trainer_gpus = {(r.node_id, r.gpu_index) for r in rows
                    if r.gpu_index is not None and r.role not in AMBIENT_ROLES and r.state == "ALIVE"}
    out = []
    for row, aggs, _ in per_actor:
        if row.role != "rollout_server" or (row.node_id, row.gpu_index) not in trainer_gpus:
            continue
        last: dict[str, _Agg] = {}
        for a in aggs:
            if a.phase in TRAINER_PHASES and a.gpk is not None:
                last[a.phase] = a
        load = rollout.get(row.actor_id)
        for phase, a in last.items():
            out.append(EngineHold(row.actor_name, row.actor_id, phase, a.gpk,
                                  load.sleep_state if load is not None else None,
                                  load.kv_cache_usage if load is not None else None))
    return out


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
