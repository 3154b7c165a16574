"""What the memory book says: memory by phase and step, the phases that keep what they take (growth), the
headroom before each rank's limit, and what a colocated rollout engine holds while the trainer runs. Pure.

- **By phase.** An actor's episodes are put in the step whose span holds their start (the timeline's
  steps); several calls of one phase in a step are one entry (the highest peak, the first start, the last
  end, the samples summed). A phase that ran for a rank's group but got no sample of it says ``samples`` 0
  and no peak, never 0 bytes. The last steps are shown (``max_by_phase`` rows at most, two steps at least);
  on a job of more than ``live_actors`` actors a running phase's rows appear when it ends.
- **Growth.** What a phase *keeps*: its end minus the end of the actor's entry before it (any phase), step
  after step. A transient peak given back keeps nothing. A phase grows when, after the actor's first
  ``warmup_steps`` steps, over at least ``min_steps`` finished steps, the median kept is material
  (``min_bytes``, or ``limit_share`` of its limit), at least 3 in 4 steps keep a quarter of it, and the
  phase's end itself climbs (Theil-Sen slope at least half of it: a phase that takes what another gives
  back each step does not). The rate is the median kept. Its peers' median rate comes with it: a rank
  whose peers stay flat is a rank's leak; a group that grows together is the group's.
- **Headroom.** Per kind, the sample of the window where the rank came nearest its limit; steps left are
  that margin over the summed rates of its growing phases (None when nothing grows).

A view works out only what changed since the last one (``_ActorView``): the steps whose episodes were booked
since, or whose bounds moved; steps older than ``FREEZE_AFTER`` keep their entries and let their episodes go.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import compress, repeat

from verltop.analysis import roles as R
from verltop.analysis.memory import ActorBook, MemoryBook
from verltop.analysis.memory_reads import growth_order, headroom_order
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
FREEZE_AFTER = 2  # steps: older ones keep their entries, not their episodes (their bounds no longer move)
# roles whose memory is booked under the job's running phase: they have no phase of their own
AMBIENT_ROLES = frozenset({"controller", "rollout_server", "agent_loop", "reward_loop", "other"})
EMPTY: frozenset = frozenset()  # one empty set for every helper's cache key and frozen steps (``frozenset()`` is new)
TRAINER_PHASES = frozenset({"old_log_prob", "ref", "values", "update_critic", "update_actor", "weight_sync", "save"})


@dataclass(frozen=True, slots=True)
class MemorySettings:
    warmup_steps: int = 2
    min_steps: int = 4
    min_bytes: int = 32 * MIB
    limit_share: float = 0.01
    keep_steps: int = 20
    max_by_phase: int = 8192  # rows of by_phase at most (a large job shows fewer steps)
    live_actors: int = 128  # up to this many actors, the running phase's rows show while it runs


class _Agg:
    """One (step, phase) of one actor: its episodes merged."""

    __slots__ = ("first_at", "g0", "g1", "g_lim", "g_margin", "g_val", "gpk", "h_lim", "h_margin", "h_src",
                 "h_val", "last_at", "n", "phase", "r0", "r1", "role", "rpk", "step")

    def __init__(self, step: int, phase: str, role: str | None) -> None:
        self.step, self.phase, self.role = step, phase, role
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
    """The steps the entries are put in: each step's bounds (its start, the next one's)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.starts = [s.started_at for s in steps]
        self.index = [s.index for s in steps]
        self.bounds = {s.index: (s.started_at, steps[i + 1].started_at if i + 1 < len(steps) else None)
                       for i, s in enumerate(steps)}
        last = steps[-1] if steps else None
        self.running = last.index if last is not None and last.running else None
        self.open = {r.phase for r in last.runs if r.end_s is None} if last is not None and last.running else set()
        self.ran = {r.phase for r in last.runs} if last is not None else set()

    def step_of(self, t: float) -> int | None:
        # a start estimated from the polls may fall up to half a poll before the step's exact start
        i = bisect.bisect_right(self.starts, t + SLACK_S) - 1
        return self.index[i] if i >= 0 else None

    def done(self, step: int, phase: str) -> bool:
        return step != self.running or (phase in self.ran and phase not in self.open)


def _merge(ab: ActorBook, keys: Iterable[str], step: int) -> list[_Agg]:
    """The entries of one step of one actor (its episodes there, merged by phase), in the order they began."""
    out: dict[str, _Agg] = {}
    eps = ab.eps
    for k in keys:
        e = eps.get(k)
        if e is None or e.n == 0:
            continue
        a = out.get(e.phase)
        if a is None:
            a = out[e.phase] = _Agg(step, e.phase, e.role)
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
    return sorted(out.values(), key=lambda a: a.first_at)


class _ActorView:
    """What the view keeps of one actor between snapshots: which step each episode is in, each step's entries
    and rows, and what its finished steps say (series, tightest samples). A snapshot works out only the steps
    whose episodes were booked since, or whose bounds moved (a new step: the one before it). Steps more than
    ``FREEZE_AFTER`` steps old are frozen: their entries stay, their episodes leave the book (memory)."""

    __slots__ = (
        "aggs",
        "bounds",
        "done_key",
        "first_step",
        "frozen",
        "gen",
        "hr",
        "members",
        "seen",
        "series",
        "step_gen",
        "step_kept",
        "step_tight",
        "tight",
        "where",
        "who",
    )

    def __init__(self) -> None:
        self.bounds: dict[int, tuple[float, float | None]] = {}
        self.members: dict[int, dict[str, None]] = {}
        self.where: dict[str, int] = {}
        self.aggs: dict[int, list[_Agg]] = {}
        self.step_gen: dict[int, int] = {}  # bumped when a step's entries change (the rows cached for it go stale)
        self.first_step: int | None = None  # the first step it was seen in (its warm-up counts from there)
        self.done_key: tuple | None = None  # what the finished steps' results were worked out from
        self.series: list[_Series] = []
        self.tight: dict[str, tuple] = {}  # kind -> (margin, value, limit, source, peak) over finished steps
        self.step_tight: dict[int, dict[str, tuple]] = {}  # the same, per step
        self.step_kept: dict[int, tuple] = {}  # per step: what its entries kept (``_series``), and from what
        self.who: tuple | None = None
        self.frozen: AbstractSet[int] = EMPTY  # a set of its own once a step freezes
        self.seen = -1  # the book's version of the actor when last refreshed
        self.gen = 0  # bumped whenever an entry changes
        self.hr: tuple | None = None  # (key, [(sort key, headroom row)])

    def refresh(self, ab: ActorBook, w: _Window) -> set[int]:
        """Bring the entries up to date with the book; returns the steps whose entries changed."""
        if ab.reset:
            ab.reset = False
            self.bounds, self.members, self.where, self.aggs, self.step_tight = {}, {}, {}, {}, {}
            self.step_kept = {}
            self.frozen = EMPTY
            ab.touched = set(ab.eps)
        if ab.version == self.seen and not ab.touched and (self.bounds is w.bounds or self.bounds == w.bounds):
            return set()  # nothing booked, no step moved
        frozen = self.frozen
        moved = ({i for i, b in w.bounds.items() if self.bounds.get(i) != b and i not in frozen}
                 | (set(self.bounds) - set(w.bounds)))
        remap = ab.touched or set()
        ab.touched = None
        if ab.last_key is not None and ab.version != self.seen:
            remap.add(ab.last_key)
        self.seen = ab.version
        for i in moved:
            remap.update(self.members.pop(i, ()))
        dirty = set(moved)
        eps = ab.eps
        for k in remap:
            e = eps.get(k)
            st = w.step_of(e.start_s) if e is not None else None
            old = self.where.get(k)
            if old is not None and old != st:
                m = self.members.get(old)
                if m is not None:
                    m.pop(k, None)
                dirty.add(old)
            if st is None or st in frozen:
                self.where.pop(k, None)
                continue
            self.members.setdefault(st, {})[k] = None
            self.where[k] = st
            dirty.add(st)
        for i in dirty:
            if i in frozen and i in w.bounds:
                continue
            if i in w.bounds and self.members.get(i):
                self.aggs[i] = _merge(ab, self.members[i], i)
            else:
                self.aggs.pop(i, None)
            self.step_gen[i] = self.step_gen.get(i, 0) + 1
            self.step_tight.pop(i, None)
            self.step_kept.pop(i, None)
        for i in [i for i in self.aggs if i not in w.bounds]:
            del self.aggs[i]
        for d in (self.step_tight, self.step_kept):
            for i in [i for i in d if i not in self.aggs]:
                del d[i]
        for i in [i for i in self.step_gen if i not in w.bounds]:  # (a step left the window: for good)
            del self.step_gen[i]
        if frozen and not frozen <= w.bounds.keys():
            frozen = self.frozen = {i for i in frozen if i in w.bounds}
        if self.first_step is None and self.aggs:
            self.first_step = min(self.aggs)
        if w.index:
            for i in [i for i in self.members if i < w.index[-1] - FREEZE_AFTER and i != w.running]:
                for k in self.members.pop(i):
                    ab.eps.pop(k, None)
                    self.where.pop(k, None)
                if not isinstance(frozen, set):
                    frozen = self.frozen = set()
                frozen.add(i)
                if i in self.aggs:  # its tightest samples, worked out once; the entries keep what rows need
                    if i not in self.step_tight:
                        self.step_tight[i] = _tight(self.aggs[i])
                    for a in self.aggs[i]:
                        a.g_margin = a.g_val = a.g_lim = a.h_margin = a.h_val = a.h_lim = None
        self.bounds = w.bounds  # the window's own dict, shared by every actor (it is never changed)
        if self.first_step is None and self.aggs:
            self.first_step = min(self.aggs)
        if dirty:
            self.gen += 1
        return dirty

    def ordered(self) -> list[_Agg]:
        return [a for i in sorted(self.aggs) for a in self.aggs[i]]


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The median of the pairwise slopes: a line through noise and a few outliers."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    return median(slopes) if slopes else None


_KEYS: dict[tuple[str, str], tuple[str, str]] = {}
_ID, _ROLE, _GPU_INDEX = operator.attrgetter("actor_id"), operator.attrgetter("role"), operator.attrgetter("gpu_index")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


def _not_ambient(rows: Sequence[ActorRow]) -> Iterable[ActorRow]:
    """The rows of trainer roles, picked in C (at 10,000 actors most are helpers)."""
    return compress(rows, map(operator.not_, map(AMBIENT_ROLES.__contains__, map(_ROLE, rows))))


def _key(phase: str, kind: str) -> tuple[str, str]:
    """One (phase, kind) tuple for all the entries that name it (thousands of them on a large job)."""
    k = (phase, kind)
    return _KEYS.setdefault(k, k)


def _series(av: _ActorView, running: int | None, st: MemorySettings, limits: dict[str, int | None]) -> list[_Series]:
    """Each (phase, kind)'s kept memory over the actor's finished steps past warm-up (each step's share is
    worked out once, while the end before it stays the same)."""
    since = (av.first_step if av.first_step is not None else 0) + st.warmup_steps
    kept: dict[tuple[str, str], list[tuple[int, float, int]]] = {}
    prev_g = prev_r = None
    for i in sorted(av.aggs):
        if i == running:
            continue
        c = av.step_kept.get(i)
        if c is None or c[0] != prev_g or c[1] != prev_r or c[2] != since:
            entries: list = []  # flat: key, step, kept, end, key, ... (no tuple per entry: memory on large jobs)
            g_in, r_in = prev_g, prev_r
            use = i >= since
            for a in av.aggs[i]:
                g, r = a.g1, a.r1
                if g is not None:
                    if prev_g is not None and use:
                        entries += (_key(a.phase, "gpu"), i, g - prev_g, g)
                    prev_g = g
                if r is not None:
                    if prev_r is not None and use:
                        entries += (_key(a.phase, "host"), i, r - prev_r, r)
                    prev_r = r
            c = av.step_kept[i] = (g_in, r_in, since, entries, prev_g, prev_r)
        else:
            prev_g, prev_r = c[4], c[5]
        flat = c[3]
        for j in range(0, len(flat), 4):
            e = (flat[j + 1], flat[j + 2], flat[j + 3])
            rows = kept.get(flat[j])
            if rows is None:
                kept[flat[j]] = [e]
            else:
                rows.append(e)
    out = []
    for (phase, kind), rows in kept.items():
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
    out.sort(key=lambda x: (x.kind, x.phase))
    return out


def _tight(aggs: Iterable[_Agg]) -> dict[str, tuple]:
    """Per kind: (margin, value, limit, source) of the sample nearest the limit, and the peak."""
    out: dict[str, list] = {}
    for a in aggs:
        for kind, margin, val, lim, src, pk in (("gpu", a.g_margin, a.g_val, a.g_lim, "gpu_total", a.gpk),
                                                ("host", a.h_margin, a.h_val, a.h_lim, a.h_src, a.rpk)):
            cur = out.get(kind)
            if cur is None:
                if pk is None and margin is None:
                    continue
                cur = out[kind] = [None, None, None, None, None]
            if margin is not None and (cur[0] is None or margin < cur[0]):
                cur[0], cur[1], cur[2], cur[3] = margin, val, lim, src
            if pk is not None and (cur[4] is None or pk > cur[4]):
                cur[4] = pk
    return {k: tuple(v) for k, v in out.items()}


def _join_tight(a: dict[str, tuple], b: dict[str, tuple]) -> dict[str, tuple]:
    out = dict(a)
    for k, v in b.items():
        cur = out.get(k)
        if cur is None:
            out[k] = v
            continue
        m = v if v[0] is not None and (cur[0] is None or v[0] < cur[0]) else cur
        pk = max((x for x in (cur[4], v[4]) if x is not None), default=None)
        out[k] = (m[0], m[1], m[2], m[3], pk)
    return out


def memory_view(book: MemoryBook, steps: Sequence[Step], rows: Iterable[ActorRow],
                rollout: Mapping[str, RolloutLoad] | None = None, st: MemorySettings | None = None,
                verl_peaks: tuple[tuple[str, float], ...] = (), phases: bool = True) -> MemoryView:
    """The view of the book at the timeline's ``steps`` (oldest first), for the actors in ``rows``. Works out
    only what changed since the last view of the same book (per actor, per step); ``by_phase`` only with
    ``phases`` (its rows are the costliest part at thousands of actors, and only the memory screen shows them)."""
    st = st or MemorySettings()
    steps = list(steps)[-st.keep_steps:]
    if not steps:
        return MemoryView(verl_peaks=verl_peaks, note="no training step seen yet")
    w = _Window(steps)
    rows = rows if isinstance(rows, (list, tuple)) else list(rows)
    row_of = dict(zip(map(_ID, rows), rows, strict=True))
    per_actor: list[tuple[ActorRow, _ActorView]] = []
    for aid, ab in book.actors.items():
        row = row_of.get(aid)
        if row is None:
            continue
        av = ab.cache if isinstance(ab.cache, _ActorView) else None
        if av is None:
            av = ab.cache = _ActorView()
        who = (row.worker_group, row.role, row.rank, row.actor_name)
        if who != av.who:
            av.who = who
        dirty = av.refresh(ab, w)
        done_key = (w.running, av.first_step)
        if done_key != av.done_key or any(i != w.running for i in dirty):
            av.done_key = done_key
            tight: dict[str, tuple] = {}
            for i in sorted(av.aggs):
                if i != w.running:
                    t = av.step_tight.get(i)
                    if t is None:
                        t = av.step_tight[i] = _tight(av.aggs[i])
                    tight = _join_tight(tight, t)
            av.tight = tight
            limits = {k: v[2] for k, v in av.tight.items()}
            av.series = _series(av, w.running, st, limits)
        if av.aggs:
            per_actor.append((row, av))

    # peers: the median rate of the other ranks of the group in the same phase and kind
    rates: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for row, av in per_actor:
        g = _group(row)
        for s in av.series:
            if s.rate is not None:
                rates.setdefault((g, s.phase, s.kind), []).append((row.actor_id, s.rate))
    growth: list[MemoryGrowth] = []
    rate_of: dict[tuple[str, str], float] = {}
    for row, av in per_actor:
        for s in av.series:
            if not s.grows or s.rate is None:
                continue
            others = [r for aid, r in rates.get((_group(row), s.phase, s.kind), ()) if aid != row.actor_id]
            growth.append(MemoryGrowth(row.worker_group, row.role, row.rank, row.actor_name, row.actor_id, s.phase,
                                       s.kind, float(s.rate), s.steps, median(others) if others else None))
            rate_of[(row.actor_id, s.kind)] = rate_of.get((row.actor_id, s.kind), 0.0) + s.rate

    headroom = []
    for row, av in per_actor:
        key = (av.gen, w.running, rate_of.get((row.actor_id, "gpu")), rate_of.get((row.actor_id, "host")), av.who)
        if av.hr is None or av.hr[0] != key:
            tight = av.tight
            if w.running is not None and w.running in av.aggs:
                tight = _join_tight(tight, _tight(av.aggs[w.running]))
            hr = _headroom(row, tight, rate_of)
            # with their sort keys, worked out once per change (10,000 actors: the sort's keys were 10 ms a view)
            av.hr = (key, [(headroom_order(h.worker_group, h.rank, h.actor_id, h.kind), h) for h in hr])
        headroom += av.hr[1]
    headroom.sort(key=_FIRST)
    if not phases:
        book.row_cache.clear()
    by_phase = _by_phase(per_actor, steps, w, rows, st, book.row_cache) if phases else ()
    holds = _holds(per_actor, rows, rollout or {})
    growth.sort(key=lambda g: growth_order(g.bytes_per_step, g.actor_id, g.phase, g.kind))
    return MemoryView(by_phase=tuple(by_phase), growth=tuple(growth), headroom=tuple(map(_SECOND, headroom)),
                      engine_holds=tuple(holds), verl_peaks=verl_peaks, by_phase_skipped=not phases)


def _group(row: ActorRow) -> str:
    return row.worker_group or R.short_class(row.class_name)


def _headroom(row: ActorRow, tight: dict[str, tuple], rate_of: dict[tuple[str, str], float]) -> list[Headroom]:
    out = []
    for kind in ("gpu", "host"):
        t = tight.get(kind)
        if t is None or t[4] is None:
            continue
        margin, val, lim, src, peak = t
        if margin is None:
            out.append(Headroom(row.worker_group, row.role, row.rank, row.actor_name, row.actor_id, kind, peak, None,
                                None, None))
            continue
        rate = rate_of.get((row.actor_id, kind))
        left = None if not rate or rate <= 0 else max(0.0, margin / rate)
        out.append(Headroom(row.worker_group, row.role, row.rank, row.actor_name, row.actor_id, kind, val, lim, src,
                            left))
    return out


def _pm(row: ActorRow, a: _Agg) -> PhaseMemory:
    return PhaseMemory(row.worker_group, a.role or row.role, row.rank, row.actor_name, row.actor_id, a.step, a.phase,
                       a.gpk, a.rpk, a.n, a.g0, a.g1, a.r0, a.r1)


def _by_phase(per_actor: list[tuple[ActorRow, _ActorView]], steps: list[Step], w: _Window,
              rows: Sequence[ActorRow], st: MemorySettings, cache: dict[int, dict[str, tuple]]) -> list[PhaseMemory]:
    """The last steps' entries (as many steps as ``max_by_phase`` rows allow, at least two), with an entry of
    no samples for each rank whose group ran a phase that no sample of it fell in. The running step's
    phases show once they end (on a job of at most ``live_actors`` actors, while they run too). ``cache``
    keeps each step's rows per actor while nothing of them changes, for the steps shown (at 10,000 actors
    the steps no longer shown held ~3 MB each); a step that does not fit is left as soon as it is known not to
    (at 10,000 actors it was worked out whole, every view, and its rows kept)."""
    live = len(per_actor) <= st.live_actors
    booked = {row.actor_id for row, _ in per_actor}
    everyone: list[tuple[ActorRow, _ActorView | None]] = [*per_actor]
    for r in _not_ambient(rows):
        if r.actor_id not in booked and r.state == "ALIVE":
            everyone.append((r, None))  # no sample of it yet: its phases say so
    everyone.sort(key=lambda ra: (ra[0].worker_group or "", ra[0].rank if ra[0].rank is not None else 1 << 30,
                                  ra[0].actor_id))
    chunks: list[list[PhaseMemory]] = []
    total = 0
    seen: list[int] = []
    for s in reversed(steps):
        i = s.index
        step_cache = cache.setdefault(i, {})
        ran: dict[str, frozenset[str]] = {}
        for run in s.runs:
            if run.phase != "other" and (i != w.running or live or w.done(i, run.phase)):
                ran[run.group] = ran.get(run.group, EMPTY) | {run.phase}
        shown = frozenset(p for p in PHASES if i != w.running or live or w.done(i, p))
        got: list[PhaseMemory] = []
        full = False
        for row, av in everyone:
            missing = ran.get(_group(row), EMPTY) if row.role not in AMBIENT_ROLES else EMPTY
            key = (av.step_gen.get(i, 0), av.who, missing, shown) if av is not None else (row.worker_group, row.role,
                                                                                       row.rank, missing, shown)
            hit = step_cache.get(row.actor_id)
            if hit is not None and hit[0] == key:
                got += hit[1]
                continue
            mine: list[PhaseMemory] = []
            if av is not None:
                mine = [_pm(row, a) for a in av.aggs.get(i, ()) if a.phase in shown]
            have = {p.phase for p in mine}
            # a running step's key changes as each phase ends; its entries of no samples stay the same objects
            who = (row.worker_group, row.role, row.rank, row.actor_name)
            nones = {p.phase: p for p in hit[1] if not p.samples
                     and (p.worker_group, p.role, p.rank, p.actor_name) == who} if hit is not None else {}
            mine += [nones.get(ph) or _none(row, i, ph) for ph in missing if ph not in have]
            mine.sort(key=_phase_index)
            step_cache[row.actor_id] = (key, mine)
            got += mine
            if full := len(chunks) >= 2 and total + len(got) > st.max_by_phase:
                break  # this step does not fit: no need to look at its other actors
        if full:
            break
        seen.append(i)
        chunks.append(got)
        total += len(got)
    for i in [k for k in cache if k not in seen]:
        del cache[i]
    return [p for chunk in reversed(chunks) for p in chunk]


def _phase_index(p: PhaseMemory) -> int:
    return PHASES.index(p.phase) if p.phase in PHASES else len(PHASES)


def _none(r: ActorRow, step: int, phase: str) -> PhaseMemory:
    return PhaseMemory(r.worker_group, r.role, r.rank, r.actor_name, r.actor_id, step, phase, None, None, 0)


def _holds(per_actor: list[tuple[ActorRow, _ActorView]], rows: Sequence[ActorRow],
           rollout: Mapping[str, RolloutLoad]) -> list[EngineHold]:
    """Colocated rollout servers (a GPU shared with a trainer rank): the GPU memory they held in each trainer
    phase of the latest step that ran it."""
    if not any(row.role == "rollout_server" for row, _ in per_actor):
        return []
    gpu_rows = compress(rows, map(operator.is_not, map(_GPU_INDEX, rows), repeat(None)))
    trainer_gpus = {(r.node_id, r.gpu_index) for r in gpu_rows if r.role not in AMBIENT_ROLES and r.state == "ALIVE"}
    out = []
    for row, av in per_actor:
        if row.role != "rollout_server" or (row.node_id, row.gpu_index) not in trainer_gpus:
            continue
        last: dict[str, _Agg] = {}
        for a in av.ordered():
            if a.phase in TRAINER_PHASES and a.gpk is not None:
                last[a.phase] = a
        load = rollout.get(row.actor_id)
        for phase, a in last.items():
            out.append(EngineHold(row.actor_name, row.actor_id, phase, a.gpk,
                                  load.sleep_state if load is not None else None,
                                  load.kv_cache_usage if load is not None else None))
    return out


def actor_entries(book: MemoryBook, steps: Sequence[Step], row: ActorRow, phase: str | None = None,
                  st: MemorySettings | None = None) -> tuple[PhaseMemory, ...]:
    """One rank's entries over the last steps, oldest first, the running step's included whatever the job's
    size (an OOM verdict's lead-up: its memory in ``phase``, every phase when None), as of the book now."""
    st = st or MemorySettings()
    steps = list(steps)[-st.keep_steps:]
    ab = book.actors.get(row.actor_id)
    if not steps or ab is None:
        return ()
    av = ab.cache if isinstance(ab.cache, _ActorView) else None
    if av is None:
        av = ab.cache = _ActorView()
    av.refresh(ab, _Window(steps))
    return tuple(_pm(row, a) for a in av.ordered() if phase is None or a.phase == phase)
