"""Training steps from worker-group calls: where a step begins, what each phase took, who arrived last. Pure.

A *call* is one dispatch of a worker-group method: every rank runs ``WorkerDict.{role}_{method}`` at about
the same time (verl's ONE_TO_ALL / DP dispatch) and the controller waits for all of them. Its phase comes
from ``roles.phase_of_method``. Steps are cut from the calls in start order:

- a step begins with the first call; a **new step begins at the first "before training" call** (gen,
  reward, old_log_prob, ref, values) **that starts after every training call of the current step has
  ended** (update_critic, update_actor, weight_sync, save). In the legacy RayPPOTrainer that is the next
  generation after ``update_actor`` (and ``update_weights``); in the v0.9 v1 trainer, whose generation is
  queued ahead, the next ``old_log_prob``.
- calls that start while training still runs join the current step: async trainers (one-step-off, fully
  async) generate the next batch during the update, so their gen overlaps the update in the same step, and a
  hung ``update_actor`` keeps its step open.
- a segment with no update (update_actor or update_critic) is not a step of its own: validation and
  checkpointing after the update (``_validate``'s generation, ``save_checkpoint``) belong to the step before
  (their generation counts as ``other``), and a leading one (the initial weight sync) is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from verltop.model import PHASES, PhaseRun, Step

BEFORE_TRAINING = frozenset({"gen", "reward", "old_log_prob", "ref", "values"})
TRAINING = frozenset({"update_critic", "update_actor", "weight_sync", "save"})
UPDATES = frozenset({"update_critic", "update_actor"})
INF = float("inf")


@dataclass(frozen=True, slots=True)
class CallView:
    """What segmentation needs of a call (``timeline.Call`` gives these)."""

    group: str
    method: str
    phase: str
    start_s: float
    end_s: float | None  # the last rank's end; None while any rank runs
    end_lo_s: float  # the end is known to be no earlier than this (a rank was seen running then)
    first_end_s: float | None  # the first rank's end
    ranks: int
    running: int
    late_actor_id: str | None = None  # the last to finish, or one still running
    exact: bool = False
    ref: object = field(default=None, compare=False)  # the tracker's call it shows
    start_hi_s: float | None = None  # it surely ran by then (first seen running); None: start_s is exact


def segment(calls: Sequence[CallView]) -> list[list[CallView]]:
    """Calls (any order) → steps (lists of calls in start order), by the rules in the module docstring."""
    segs: list[list[CallView]] = []
    cur: list[CallView] | None = None
    trained = False
    train_end = -INF
    for c in sorted(calls, key=lambda c: (c.start_s, PHASES.index(c.phase))):
        # compared with what is surely known: seen running before the update was last seen running means it
        # overlapped the update (an estimated start may fall before an exact end by up to half a poll)
        began = c.start_s if c.start_hi_s is None else max(c.start_s, c.start_hi_s)
        if cur is None or (trained and c.phase in BEFORE_TRAINING and began >= train_end):
            cur = []
            segs.append(cur)
            trained, train_end = False, -INF
        cur.append(c)
        if c.phase in TRAINING:
            trained = True
            # the boundary test uses the end's lower bound: a call that began before the update surely ended
            # (as the polls saw it) is not yet the next step
            train_end = max(train_end, INF if c.end_s is None else c.end_lo_s)
    out: list[list[CallView]] = []
    for i, s in enumerate(segs):
        if any(c.phase in UPDATES for c in s) or i == len(segs) - 1:
            out.append(s)
        elif out:  # validation / checkpoint after the update: the step before's epilogue
            out[-1].extend(c if c.phase in TRAINING else _as_other(c) for c in s)
        # else: a prologue before the first update (initial weight sync): not a step
    return out


def _as_other(c: CallView) -> CallView:
    return CallView(c.group, c.method, "other", c.start_s, c.end_s, c.end_lo_s, c.first_end_s, c.ranks, c.running,
                    c.late_actor_id, c.exact, c.ref, c.start_hi_s)


def union_s(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end]`` intervals (overlaps counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(spans):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


def skew(c: CallView, now: float) -> float | None:
    """First to last rank finishing; while some ranks finished and others run, up to ``now``. None with
    fewer than two ranks, or while none finished (they are all equally late)."""
    if c.ranks < 2 or c.first_end_s is None:
        return None
    last = now if c.running else (c.end_s if c.end_s is not None else now)
    return max(0.0, last - c.first_end_s)


def build_steps(calls: Sequence[CallView], now: float, first_index: int = 1,
                rank_of: Callable[[str | None], int | None] | None = None, keep: int | None = None
                ) -> tuple[Step, ...]:
    """The steps of ``calls`` (the last ``keep``), numbered from ``first_index``; the last one runs unless a
    later step began. ``rank_of`` names the late rank of each phase."""
    segs = segment(calls)
    start_at = max(0, len(segs) - keep) if keep else 0
    return steps_of(segs, range(start_at, len(segs)), now, first_index, rank_of)


def steps_of(segs: Sequence[Sequence[CallView]], which: Iterable[int], now: float, first_index: int = 1,
             rank_of: Callable[[str | None], int | None] | None = None) -> tuple[Step, ...]:
    """``Step`` values for the segments at positions ``which`` (a caller may cache the finished ones)."""
    rank_of = rank_of or (lambda _a: None)
    steps: list[Step] = []
    for i in which:
        s = segs[i]
        started = s[0].start_s
        nxt = segs[i + 1][0].start_s if i + 1 < len(segs) else None
        end = nxt if nxt is not None else now
        runs = tuple(_phase_run(c, now, rank_of) for c in s)
        per: dict[str, list[tuple[float, float]]] = {}
        for c in s:
            per.setdefault(c.phase, []).append((c.start_s, c.end_s if c.end_s is not None else now))
        phases = [(p, union_s(per[p])) for p in PHASES if p in per and p != "other"]
        covered = union_s([(max(started, a), min(end, b)) for p, v in per.items() if p != "other" for a, b in v])
        other = max(0.0, (end - started) - covered)
        if other > 0 or "other" in per:
            phases.append(("other", other))
        skews: dict[str, float] = {}
        for r in runs:
            if r.skew_s is not None and r.phase != "other":
                skews[r.phase] = max(skews.get(r.phase, 0.0), r.skew_s)
        steps.append(Step(
            index=first_index + i, started_at=started, duration_s=None if nxt is None else nxt - started,
            runs=runs, phases=tuple(phases), skew_s=tuple((p, skews[p]) for p in PHASES if p in skews),
            exact=all(c.exact for c in s) and (nxt is None or segs[i + 1][0].exact),  # its end is the next start
        ))
    return tuple(steps)


def _phase_run(c: CallView, now: float, rank_of: Callable[[str | None], int | None]) -> PhaseRun:
    return PhaseRun(phase=c.phase, group=c.group, method=c.method, start_s=c.start_s, end_s=c.end_s, ranks=c.ranks,
                    running=c.running, skew_s=skew(c, now), late_rank=rank_of(c.late_actor_id),
                    late_actor_id=c.late_actor_id, exact=c.exact)


def median_step_s(steps: Sequence[Step], last: int = 10) -> float | None:
    """Median duration of the last ``last`` finished steps."""
    done = [s.duration_s for s in steps if s.duration_s is not None][-last:]
    if not done:
        return None
    xs = sorted(done)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
