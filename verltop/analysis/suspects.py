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
  their peers finished;
- peers whose call failed in a collective (a timeout, an abort) while a rank of theirs runs on outside any
  collective: it is the one that never arrived (``analysis.peer_failures``);
- a rank that ran out of memory (``analysis.oom``: its call raised an OOM, or it died of one) and has not started
  another call since: its reason is the OOM, and its peers waiting in a collective for it are waiters.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from verltop.analysis.collectives import collective_pending, is_native
from verltop.analysis.peer_failures import PeerFailure
from verltop.model import Fate, Peers, RankDump, Suspect, SuspectWhy, Where
from verltop.model.memory import OomVerdict

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


def _where(r: RankDump) -> Where:
    if r.error:
        return Where("unreadable", error=str(r.error))
    if r.blocked_on and r.blocked_on.op in WAIT_OPS_EXCLUDED:
        return Where("waits", op=r.blocked_on.op, frame=r.blocked_on.frame)
    f = next((fr for fr in r.stack if not is_native(fr)), None)  # libc.so.6 clock_nanosleep says nothing
    return Where("at", task=r.actor.task, frame=f.short() if f else None)


def _peers(rs: list[RankDump]) -> Peers:
    return Peers(tuple(r.actor.rank for r in rs if r.actor.rank is not None), len(rs))


def _fate(r: RankDump) -> Fate:
    return Fate(r.actor.state, r.death, r.actor.death_cause)


def _consequence(r: RankDump) -> bool:
    """A death caused by another's: its owner died, its handle went out of scope, it was told to exit."""
    cause = r.actor.death_cause or ""
    if r.death is not None and r.death.kind == "exit" and "ray.kill" not in (r.death.detail or ""):
        return True
    return any(k in cause for k in ("OWNER_DIED", "owner has died", "its owner", "OUT_OF_SCOPE",
                                    "INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT", "references to the actor"))


def _timed_out(r: RankDump) -> bool:
    """Killed by NCCL's watchdog while it waited in a collective: a victim of the hang, not its cause."""
    return r.death is not None and r.death.kind == "nccl_timeout"


def _started(r: RankDump, now: float | None) -> float | None:
    a = r.actor
    if a.task_start_s is not None:
        return a.task_start_s
    return now - a.task_running_s if now is not None and a.task_running_s is not None else None


def _failed_waiting(members: list[RankDump], ops: dict[int, str | None], failures: dict[str, PeerFailure],
                    now: float | None) -> list[tuple[RankDump, SuspectWhy]]:
    """Ranks running outside any collective while peers of theirs failed in one after the rank's call began
    (they timed out waiting for it)."""
    out = []
    for r in members:
        if r.actor.state != "ALIVE" or not r.actor.task or ops[id(r)] or r.error:
            continue
        start = _started(r, now)
        peers = [(x, f) for x in members if x is not r and (f := failures.get(x.actor.actor_id)) is not None
                 and (start is None or f.end_s is None or f.end_s >= start - 1.0)
                 and not (x.actor.task and not ops[id(x)])]  # a peer at work outside it is no witness
        if not peers:
            continue
        last = max(peers, key=lambda p: p[1].end_s or 0)[1]
        ago = now - last.end_s if now is not None and last.end_s is not None else None
        out.append((r, SuspectWhy("peers_failed", r.actor.worker_group, last.method,
                                  peers=_peers([x for x, _ in peers]), where=_where(r), stuck=r.stuck,
                                  text=last.error, ago_s=ago)))
    return out


def _ran_out(members: list[RankDump], ops: dict[int, str | None], ooms: dict[str, OomVerdict],
             now: float | None) -> list[tuple[RankDump, SuspectWhy]]:
    """Ranks with an OOM verdict that have not started another call since it (a rank that recovered and runs
    on is no longer the one its peers wait for)."""
    out = []
    for r in members:
        v = ooms.get(r.actor.actor_id)
        if v is None:
            continue
        start = _started(r, now)
        if r.actor.task and start is not None and start > v.at + 1.0 and r.actor.state == "ALIVE":
            continue
        waiting = [x for x in members if x is not r and ops[id(x)]]
        op = Counter(ops[id(x)] for x in waiting).most_common(1)[0][0] if waiting else None
        out.append((r, SuspectWhy("oom", r.actor.worker_group, op, peers=_peers(waiting) if waiting else None,
                                  oom=v)))
    return out


def find_suspects(ranks: list[RankDump], failures: dict[str, PeerFailure] | None = None,
                  now: float | None = None, ooms: dict[str, OomVerdict] | None = None) -> list[Suspect]:
    """The worker-group rules above over ``ranks``; ``failures``: each actor's latest call that failed in a
    collective (``peer_failures``), ``now``: the dump's time, ``ooms``: OOM verdicts by actor id."""
    failures = failures or {}
    ooms = ooms or {}
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

    def add(r: RankDump, why: SuspectWhy, score: float) -> None:
        out.append(Suspect(r.actor.actor_id, r.actor.worker_group, r.actor.rank, (why,), score, r.actor.pid))

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
                if live_waiting:
                    top = Counter(ops[id(x)] for x in live_waiting).most_common(1)[0][0]
                    why = SuspectWhy("dead_waited", g, top, peers=_peers(live_waiting), fate=_fate(r))
                else:
                    why = SuspectWhy("dead_live_on", g, peers=_peers(live), fate=_fate(r))
                add(r, why, 100)
        if culprits and not live:
            # the whole group is gone: the ranks whose death was their own (a signal, an OOM, a crash) took
            # the others down (their owner, the controller, died of it, or they were released after it)
            roots = [r for r in culprits if not _consequence(r)]
            for r in roots:
                others = [x for x in dead if x is not r]
                add(r, SuspectWhy("died_first", g, fate=_fate(r), after=tuple(_fate(x) for x in others),
                                  after_peers=_peers(others) if others else None), 95)
        for r, why in _failed_waiting(members, ops, failures, now):
            add(r, why, 92 if r.stuck is not False else 75)
        for r, why in _ran_out(members, ops, ooms, now):
            add(r, why, 105)  # the OOM is why it stopped: it says more than "dead" or "not in the collective"
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
                other_ops = tuple(sorted({ops[id(x)] or "" for x in others}))
                for r in side:
                    add(r, SuspectWhy("mismatch", g, op, other_ops, _peers(others), stuck=r.stuck), 80)
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
            died = _peers(timed_out) if timed_out else None
            for r in known:
                score = 90 if r.stuck is not False else 70
                c = r.collective
                behind = c is not None and c.last_enqueued is not None and max_enq is not None \
                    and c.last_enqueued < max_enq
                add(r, SuspectWhy("not_in", g, top_op, peers=_peers(waiting), where=_where(r), stuck=r.stuck,
                                  timed_out=died, seq=max_enq if behind else None,
                                  enqueued=c.last_enqueued if behind and c is not None else None), score)
            if not known:
                for r in outside:
                    add(r, SuspectWhy("not_seen", g, top_op, peers=_peers(waiting), where=_where(r),
                                      timed_out=died), 30)
            if timed_out and live and not outside:
                # no live rank stands outside the collective: the dead ones are what there is to show
                for r in timed_out:
                    add(r, SuspectWhy("timed_out", g, top_op, fate=_fate(r)), 50)

    if controller_waits is not None:
        for g, members in groups.items():
            if any(s.worker_group == g for s in out):
                continue
            running = [r for r in members if r.actor.task and r.actor.state == "ALIVE"]
            idle = [r for r in members if not r.actor.task and r.actor.state == "ALIVE"]
            if running and idle:
                for r in running:
                    add(r, SuspectWhy("controller", g, peers=_peers(idle), where=_where(r), stuck=r.stuck,
                                      frame=controller_waits.blocked_on.frame), 60)
        via = controller_waits.blocked_on.frame if controller_waits.blocked_on else None
        out = [s if s.why[0].kind == "controller" else
               replace(s, why=(replace(s.why[0], controller_waits=True, controller_at=via),)) for s in out]
    # one line per process: keep its strongest reason
    best: dict[tuple[str, int | None], Suspect] = {}
    for s in out:
        k = (s.actor_id, s.pid)
        if k not in best or s.score > best[k].score:
            best[k] = s
    return sorted(best.values(), key=lambda s: (-s.score, s.worker_group or "", s.rank if s.rank is not None else -1))
