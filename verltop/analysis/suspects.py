"""Which ranks hold the others up, most likely first, each with a reason.

Rules (a rank simply waiting with its peers is never a suspect):
- a DEAD or RESTARTING rank whose peers wait;
- in a worker group where most ranks wait in one collective, the ranks that are not in it;
- ranks of one group in different collectives (a mismatch): the minority side, naming both ops;
- a controller in ``ray.get`` points at the group it waits on: that group's ranks still running while
  their peers finished;
- a placement group Ray has not placed: the controller's ``ray.get`` waits on workers that do not exist yet
  (``analysis.pending.pending_suspects``).
"""

from __future__ import annotations

from collections import Counter

from verltop.analysis.collectives import collective_pending, is_native
from verltop.analysis.merge import compact_ints
from verltop.analysis.pending import pending_suspects
from verltop.model import PendingItem, RankDump, Suspect

WAIT_OPS_EXCLUDED = ("ray.get", "ray.wait")


def _coll_op(r: RankDump) -> str | None:
    """The collective a rank waits in: the stack's op, refined by the watchdog/FR when the stack only
    says "waiting on the GPU"."""
    b = r.blocked_on
    if b is None or b.op in WAIT_OPS_EXCLUDED:
        return None
    if b.op == "cuda_sync" and r.collective is not None and r.collective.op and collective_pending(r.collective):
        return r.collective.op
    return b.op


def _where(r: RankDump) -> str:
    if r.error:
        return f"its stack could not be read ({r.error})"
    if r.blocked_on and r.blocked_on.op in WAIT_OPS_EXCLUDED:
        return f"it waits in {r.blocked_on.op} ({r.blocked_on.frame})"
    f = next((fr for fr in r.stack if not is_native(fr)), None)  # libc.so.6 clock_nanosleep says nothing
    task = f" in {r.actor.task}" if r.actor.task else ""
    at = f" at {f.short()}" if f else ""
    return f"it is{task}{at}"


def _motion(r: RankDump) -> str:
    if r.stuck is True:
        return "; its stack did not move"
    if r.stuck is False:
        return "; its stack moves (slow, not hung)"
    return ""


def _never_reached(r: RankDump, max_enq: int | None) -> str:
    c = r.collective
    if c is None or c.last_enqueued is None or max_enq is None or c.last_enqueued >= max_enq:
        return ""
    return f"; NCCL: it never reached collective #{max_enq} (its last enqueued work is #{c.last_enqueued})"


def _ranks(rs: list[RankDump]) -> str:
    ints = [r.actor.rank for r in rs if r.actor.rank is not None]
    s = compact_ints(ints)
    return f"rank{'s' if len(ints) != 1 else ''} {s}" if s else f"{len(rs)} ranks"


def _wait(rs: list[RankDump]) -> str:
    return "waits" if len(rs) == 1 else "wait"


def find_suspects(ranks: list[RankDump], pending: tuple[PendingItem, ...] = ()) -> list[Suspect]:
    groups: dict[str, list[RankDump]] = {}
    controller_waits = None
    for r in ranks:
        if r.actor.role == "controller":
            if r.blocked_on and r.blocked_on.op == "ray.get":
                controller_waits = r
            continue
        if r.actor.worker_group:
            groups.setdefault(r.actor.worker_group, []).append(r)

    out: list[Suspect] = []

    def add(r: RankDump, reason: str, score: float) -> None:
        out.append(Suspect(r.actor.actor_id, r.actor.worker_group, r.actor.rank, reason, score))

    for g, members in groups.items():
        ops = {id(r): _coll_op(r) for r in members}
        waiting = [r for r in members if ops[id(r)]]
        dead = [r for r in members if r.actor.state in ("DEAD", "RESTARTING")]
        if not waiting:
            continue
        counts = Counter(ops[id(r)] for r in waiting)
        top_op, top_n = counts.most_common(1)[0]
        live = [r for r in members if r not in dead]
        for r in dead:
            cause = f" ({r.actor.death_cause})" if r.actor.death_cause else ""
            add(r, f"{r.actor.state}{cause} while {_ranks(waiting)} of {g} {_wait(waiting)} in {top_op}", 100)
        # mismatch: several collectives at once in one group
        if len(counts) > 1:
            for op, n in counts.items():
                if op == top_op and n > len(waiting) - n:
                    continue
                side = [r for r in waiting if ops[id(r)] == op]
                others = [r for r in waiting if ops[id(r)] != op]
                other_ops = " / ".join(sorted({ops[id(x)] or "" for x in others}))
                for r in side:
                    add(r, f"collective mismatch: waits in {op} while {_ranks(others)} of {g} {_wait(others)} in "
                           f"{other_ops}{_motion(r)}", 80)
        # most ranks in one collective: the ones not in any are holding it up
        if top_n * 2 >= len(live) or len(counts) == 1:
            outside = [r for r in live if not ops[id(r)]]
            if dead:
                # a live rank that runs nothing lost its collective to the dead rank (gloo: "Connection
                # closed by peer"; NCCL aborts): the dead rank explains the wait, not it
                outside = [r for r in outside if r.actor.task]
            known = [r for r in outside if not r.error]
            max_enq = max((r.collective.last_enqueued for r in members
                           if r.collective and r.collective.last_enqueued is not None), default=None)
            for r in known:
                score = 90 if r.stuck is not False else 70
                add(r, f"not in {top_op} with {_ranks(waiting)} of {g}: {_where(r)}{_motion(r)}"
                       f"{_never_reached(r, max_enq)}", score)
            if not known:
                for r in outside:
                    add(r, f"not seen in {top_op} with {_ranks(waiting)} of {g}: {_where(r)}", 30)

    if controller_waits is not None:
        for g, members in groups.items():
            if any(s.worker_group == g for s in out):
                continue
            running = [r for r in members if r.actor.task and r.actor.state == "ALIVE"]
            idle = [r for r in members if not r.actor.task and r.actor.state == "ALIVE"]
            if running and idle:
                for r in running:
                    add(r, f"the controller waits in ray.get ({controller_waits.blocked_on.frame}) and "
                           f"{_ranks(idle)} of {g} finished; {_where(r)}{_motion(r)}", 60)
        via = controller_waits.blocked_on.frame if controller_waits.blocked_on else None
        out = [
            Suspect(s.actor_id, s.worker_group, s.rank,
                    s.reason if "controller" in s.reason else f"{s.reason} (the controller waits on it in ray.get at {via})",
                    s.score)
            for s in out
        ]
    if pending:
        b = controller_waits.blocked_on if controller_waits is not None else None
        out += pending_suspects(pending, b.frame if b else None, controller_waits is not None)
    # one line per rank (or placement group): keep its strongest reason
    best: dict[str, Suspect] = {}
    for s in out:
        k = s.actor_id or f"pg:{s.placement_group_id}"
        if k not in best or s.score > best[k].score:
            best[k] = s
    return sorted(best.values(), key=lambda s: (-s.score, s.worker_group or "", s.rank if s.rank is not None else -1))
