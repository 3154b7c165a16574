"""Where a wait on workers that do not exist yet ends: a controller (or driver) in ``ray.get`` while its job's
placement group is not placed. Its wait chain ends in that placement group, which is the suspect. Pure: the
chain ends and suspects say so as data (``verltop.text`` puts them in words).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from verltop.analysis.pending import blocked
from verltop.analysis.waiters import Activity
from verltop.model import Chain, ChainEnd, ChainLink, EndWhy, PendingItem, RankDump, Suspect, SuspectWhy


def chain_end(pending: Sequence[PendingItem], job_id: str | None = None) -> PendingItem | None:
    """Where a ``ray.get`` on workers that do not exist yet ends: the placement group Ray has not placed
    (that job's, when it has one), the one Ray cannot place and the longest-waiting first."""
    pgs = [p for p in pending if p.kind == "placement_group"]
    if job_id is not None:
        pgs = [p for p in pgs if p.job_id == job_id] or pgs
    return max(pgs, key=lambda p: (blocked(p), p.waiting_s or 0.0), default=None)


def _waiters(ranks: Sequence[RankDump], acts: Mapping[str, Activity]) -> list[tuple[RankDump, Activity]]:
    """The controller and drivers that wait in ``ray.get`` / ``ray.wait`` (their own process, not a child)."""
    out = []
    for r in ranks:
        a = acts.get(r.key)
        if r.process is None and (r.is_driver or r.actor.role == "controller") and a is not None \
                and a.kind == "ray_wait":
            out.append((r, a))
    return out


def _pg_end(pg: PendingItem, a: Activity) -> ChainEnd:
    return ChainEnd(None, None, a.frame, EndWhy("not_placed", frame=a.frame, what=a.what, pending=pg),
                    placement_group_id=pg.id)


def pending_chains(chains: list[Chain], ranks: Sequence[RankDump], acts: Mapping[str, Activity],
                   pending: Sequence[PendingItem]) -> list[Chain]:
    """Wait chains that end in a controller or driver waiting in ``ray.get`` (on tasks no dumped process
    runs) end, one hop further, in the placement group Ray has not placed for its job; such a waiter that is
    on no chain (nothing else was dumped) gets a chain of its own. Those chains come first: they say why
    nothing runs."""
    waiters = [(r, a, pg) for r, a in _waiters(ranks, acts) if (pg := chain_end(pending, r.actor.job_id))]
    if not waiters:
        return chains

    def hit(link: ChainLink) -> tuple[RankDump, Activity, PendingItem] | None:
        return next((w for w in waiters if w[0].actor.pid == link.pid and
                     (link.actor_id is None if w[0].is_driver else link.actor_id == w[0].actor.actor_id)), None)

    out, on_chain = [], set()
    for c in chains:
        for link in c.path:
            w = hit(link)
            if w is not None:
                on_chain.add(w[0].key)
        w = hit(c.path[-1])
        out.append(Chain(c.path, _pg_end(w[2], w[1])) if w is not None and c.ends_in.pid == w[0].actor.pid else c)
    for r, a, pg in waiters:
        if r.key not in on_chain:
            link = ChainLink(None if r.is_driver else r.actor.actor_id, r.actor.actor_name or r.actor.class_name,
                             r.actor.task, r.actor.pid)
            out.append(Chain((link,), _pg_end(pg, a)))
    out.sort(key=lambda c: c.ends_in.placement_group_id is None)  # stable: the rest keep their order
    return out


def pending_suspects_of(ranks: Sequence[RankDump], acts: Mapping[str, Activity],
                        pending: Sequence[PendingItem]) -> list[Suspect]:
    """Placement groups Ray has not placed are suspects: a controller or driver of their job waiting in
    ``ray.get`` waits on workers that need them (score 95); unseen waiters, 50 for one Ray cannot place, 20
    for one merely not placed yet."""
    if not pending:
        return []
    waiters = _waiters(ranks, acts)
    out = []
    for p in pending:
        if p.kind != "placement_group":
            continue
        w = next(((r, a) for r, a in waiters if r.actor.job_id == p.job_id), None) or next(
            ((r, a) for r, a in waiters if r.actor.job_id is None or p.job_id is None), None)  # a job unknown
        why = SuspectWhy("not_placed", pending=p) if w is None else SuspectWhy(
            "not_placed", pending=p, role="driver" if w[0].is_driver else "controller", op=w[1].what, frame=w[1].frame)
        score = 95.0 if w is not None else 50.0 if blocked(p) else 20.0
        out.append(Suspect("", p.worker_group, None, (why,), score, placement_group_id=p.id))
    return out
