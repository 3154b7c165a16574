"""Which ranks hold the others up, most likely first, each with a reason.

Rules (a rank simply waiting with its peers is never a suspect):
- a DEAD or RESTARTING rank whose peers wait, or whose peers live on (their collective failed with it:
  gloo's "Connection closed by peer");
- a group whose ranks all died: the ranks that died of their own cause (a signal, an OOM, a crash), not of
  another's (an owner that died, a handle out of scope, an intended exit);
- a rank that NCCL's watchdog killed (death ``nccl_timeout``) waited in its collective: it counts as waiting,
  and the live ranks that never reached that collective are the suspects (it is one only when none is);
- in a worker group where most ranks wait in one collective, the ranks that are not in it;
- ranks of one group in different collectives (a mismatch): the minority side, naming both ops;
- a controller in ``ray.get`` points at the group it waits on: that group's ranks still running while
  their peers finished.
"""

from __future__ import annotations

from collections import Counter

from verltop.analysis.collectives import collective_pending, is_native
from verltop.analysis.merge import compact_ints
from verltop.model import RankDump, Suspect

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


def _consequence(r: RankDump) -> bool:
    """A death caused by another's: its owner died, its handle went out of scope, it was told to exit."""
    cause = r.actor.death_cause or ""
    if r.death is not None and r.death.kind == "exit" and "ray.kill" not in (r.death.detail or ""):
        return True
    return any(k in cause for k in ("OWNER_DIED", "owner has died", "its owner", "OUT_OF_SCOPE",
                                    "INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT", "references to the actor"))


def _consequences(rs: list[RankDump]) -> str:
    kinds = sorted({"their owner died" if "owner" in (_death(r) or "") else _death(r) or "dead" for r in rs})
    return "; ".join(kinds)


def _death(r: RankDump) -> str:
    if r.death is not None:
        return f"{r.death.kind}: {r.death.detail}" if r.death.detail else r.death.kind
    return r.actor.death_cause or ""


def _timed_out(r: RankDump) -> bool:
    """Killed by NCCL's watchdog while it waited in a collective: a victim of the hang, not its cause."""
    return r.death is not None and r.death.kind == "nccl_timeout"


def find_suspects(ranks: list[RankDump]) -> list[Suspect]:
    groups: dict[str, list[RankDump]] = {}
    controller_waits = None
    for r in ranks:
        if r.process is not None or r.is_driver:
            continue  # child processes and drivers are not ranks of a worker group (see chains.py)
        if r.actor.role == "controller":
            if r.blocked_on and r.blocked_on.op == "ray.get":
                controller_waits = r
            continue
        if r.actor.worker_group:
            groups.setdefault(r.actor.worker_group, []).append(r)

    out: list[Suspect] = []

    def add(r: RankDump, reason: str, score: float) -> None:
        out.append(Suspect(r.actor.actor_id, r.actor.worker_group, r.actor.rank, reason, score, r.actor.pid))

    for g, members in groups.items():
        ops = {id(r): _coll_op(r) for r in members}
        dead = [r for r in members if r.actor.state in ("DEAD", "RESTARTING")]
        timed_out = [r for r in dead if _timed_out(r)]
        for r in timed_out:  # it sat in this collective until the watchdog killed it
            ops[id(r)] = (r.collective.op if r.collective and r.collective.op else None) or "an NCCL collective"
        waiting = [r for r in members if ops[id(r)]]
        live = [r for r in members if r not in dead]
        culprits = [r for r in dead if r not in timed_out]
        if culprits and live:
            live_waiting = [r for r in waiting if r in live]
            for r in culprits:
                cause = f" ({_death(r)})" if _death(r) else ""
                if live_waiting:
                    top = Counter(ops[id(x)] for x in live_waiting).most_common(1)[0][0]
                    why = f"while {_ranks(live_waiting)} of {g} {_wait(live_waiting)} in {top}"
                else:
                    why = (f"while {_ranks(live)} of {g} live on (a collective with a dead rank fails on its "
                           "peers, or they wait for it)")
                add(r, f"{r.actor.state}{cause} {why}", 100)
        if culprits and not live:
            # the whole group is gone: the ranks whose death was their own (a signal, an OOM, a crash) took
            # the others down (their owner, the controller, died of it, or they were released after it)
            roots = [r for r in culprits if not _consequence(r)]
            for r in roots:
                others = [x for x in dead if x is not r]
                then = f"; {_ranks(others)} of {g} died after it ({_consequences(others)})" if others else ""
                add(r, f"{r.actor.state} ({_death(r)}){then}", 95)
        if not waiting:
            continue
        counts = Counter(ops[id(r)] for r in waiting)
        top_op, top_n = counts.most_common(1)[0]
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
            died = f" ({_ranks(timed_out)} timed out in it and died)" if timed_out else ""
            for r in known:
                score = 90 if r.stuck is not False else 70
                add(r, f"not in {top_op} with {_ranks(waiting)} of {g}{died}: {_where(r)}{_motion(r)}"
                       f"{_never_reached(r, max_enq)}", score)
            if not known:
                for r in outside:
                    add(r, f"not seen in {top_op} with {_ranks(waiting)} of {g}{died}: {_where(r)}", 30)
            if timed_out and live and not outside:
                # no live rank stands outside the collective: the dead ones are what there is to show
                for r in timed_out:
                    add(r, f"{r.actor.state} ({_death(r)}); no live rank of {g} is seen outside {top_op}", 50)

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
                    s.score, s.pid)
            for s in out
        ]
    # one line per process: keep its strongest reason
    best: dict[tuple[str, int | None], Suspect] = {}
    for s in out:
        k = (s.actor_id, s.pid)
        if k not in best or s.score > best[k].score:
            best[k] = s
    return sorted(best.values(), key=lambda s: (-s.score, s.worker_group or "", s.rank if s.rank is not None else -1))
