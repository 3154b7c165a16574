"""Suspects among every process of the job, beyond the worker-group rules of ``suspects.py``. Pure.

- TP peers (the ``VLLM::Worker_TP<k>`` / ``sglang::scheduler_TP<k>`` children of one parent) are a group:
  when some wait in a collective, the ones at work elsewhere hold them up;
- the end of a wait chain that waits on nothing: code that did not move, an HTTP call, a child process with
  no readable stack, a dead process — unless it is a worker-group rank, which the group rules judge against
  its peers. A process a chain passes through is never a suspect.
"""

from __future__ import annotations

from verltop.analysis.waiters import Activity, parse_title
from verltop.model import Chain, Peers, RankDump, Suspect, SuspectWhy, Where


def tp_suspects(ranks: list[RankDump], acts: dict[str, Activity]) -> list[Suspect]:
    groups: dict[tuple, list[RankDump]] = {}
    for r in ranks:
        if r.process is None:
            continue
        t = parse_title(r.process)
        if t.kind in ("vllm_worker", "sglang_scheduler"):
            groups.setdefault((r.actor.node_ip, r.parent_pid, t.tag("DP")), []).append(r)
    out = []
    for members in groups.values():
        def act(r: RankDump) -> Activity:
            return acts.get(r.key) or Activity("idle")

        waiting = [r for r in members if act(r).kind == "collective"]
        if not waiting:
            continue
        ops = tuple(sorted({act(r).what or "?" for r in waiting}))
        tps = Peers(tuple(t for r in waiting if (t := parse_title(r.process).tag("TP")) is not None), len(waiting))
        owner = members[0].actor.actor_name or members[0].actor.class_name
        for r in members:
            a = act(r)
            if a.kind in ("collective", "idle"):
                continue
            where = Where("at", frame=a.frame) if a.frame else (
                Where("unreadable", error=str(r.error)) if r.error else Where("elsewhere"))
            out.append(_suspect(r, SuspectWhy("tp", ops=ops, peers=tps, where=where, stuck=r.stuck,
                                              process=r.process, owner=owner, pid=r.parent_pid), 95))
    return out


def chain_suspects(chains: list[Chain], ranks: list[RankDump], acts: dict[str, Activity]) -> list[Suspect]:
    by_pid = {(r.actor.pid, r.actor.node_ip): r for r in ranks}
    by_pid_only: dict[int | None, list[RankDump]] = {}
    for r in ranks:
        by_pid_only.setdefault(r.actor.pid, []).append(r)
    out = []
    for c in chains:
        last = c.path[-1]
        cands = by_pid_only.get(c.ends_in.pid, [])
        r = next((x for x in cands if x.actor.actor_id == last.actor_id), cands[0] if cands else None)
        if r is None:
            continue
        r = by_pid.get((r.actor.pid, r.actor.node_ip), r)
        if r.process is None and r.actor.worker_group and not r.is_driver:
            continue  # a worker-group rank: the group's rules (suspects.py) judge it against its peers
        a = acts.get(r.key) or Activity("idle")
        dead = r.actor.state in ("DEAD", "RESTARTING")
        if dead:
            score = 90
        elif r.main is None and r.error is not None:
            score = 60
        elif a.kind == "http":
            score = 80
        elif a.kind in ("busy", "children") and r.stuck:
            score = 85
        elif a.kind == "ipc" and r.stuck:
            score = 50  # a weight sync that does not move: the other side is as likely
        else:
            continue
        out.append(_suspect(r, SuspectWhy("chain_end", chain=c), score))
    return out


def _suspect(r: RankDump, why: SuspectWhy, score: float) -> Suspect:
    a = r.actor
    return Suspect(a.actor_id, a.worker_group, a.rank, (why,), score, a.pid)


def merge_suspects(*lists: list[Suspect]) -> list[Suspect]:
    """One line per process, its strongest reason; most likely first."""
    best: dict[tuple[str, int | None], Suspect] = {}
    for lst in lists:
        for s in lst:
            k = (s.actor_id or f"pg:{s.placement_group_id}", s.pid)  # a placement group has no actor
            if k not in best or s.score > best[k].score:
                best[k] = s
    return sorted(best.values(), key=lambda s: (-s.score, s.worker_group or "", s.rank if s.rank is not None else -1,
                                                s.pid or 0))
