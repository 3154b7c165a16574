"""What NCCL RAS says about a hang, and who it points at. Pure.

RAS counts, per communicator and rank, the collectives each rank has *enqueued* (NCCL's ``seqNumber``). In a
hang the rank that never reached the collective has launched one operation fewer than the peers waiting in it:
the lower count marks the lagging rank (with two ranks RAS itself cannot say which side is normal; the counts
can). A rank whose process stopped answering (SIGSTOP, death) is listed as missing. Facts from a real hung
2-rank job on H200s: tests/fixtures/ras/README.md.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from verltop.model import ActorRow, RasComm, RasFinding, RasRank, RasReport, Stall

if TYPE_CHECKING:
    from verltop.model import RankDump, Suspect

# RAS's collective type names → torch.distributed's
OP_NAMES = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
            "Broadcast": "broadcast", "Reduce": "reduce"}


def findings(report: RasReport) -> list[RasFinding]:
    """Lagging, missing and aborted ranks, communicator by communicator; nothing for a healthy job."""
    out: list[RasFinding] = []
    for c in report.comms:
        out += _behind(c)
        for m in c.missing:
            out.append(RasFinding("missing", c.hash, c.size, m.rank, m.pid, m.host, dead=m.considered_dead))
        for r in c.ranks:
            if r.abort:
                out.append(RasFinding("aborted", c.hash, c.size, r.rank, r.pid, r.host))
    return out


def _behind(c: RasComm) -> list[RasFinding]:
    """Per collective type, the ranks with fewer operations than the most any rank has. A rank that is behind
    in one type and ahead in another called a different collective than its peers: a mismatch."""
    raw = _counts_behind(c)
    ahead_in: dict[int | None, set[str]] = {}
    for f in raw:
        for p in f.peers:
            ahead_in.setdefault(p, set()).add(f.op or "")
    out = []
    for f in raw:
        other = sorted(ahead_in.get(f.rank, set()) - {f.op or ""})
        if other:
            # it is ahead in `other` (it entered that collective) and behind in f.op (the peers entered that)
            out.append(RasFinding("mismatch", f.comm, f.comm_size, f.rank, f.pid, f.host, other[0], None, None,
                                  f.peers, peer_op=f.op))
        else:
            out.append(f)
    return out


def _counts_behind(c: RasComm) -> list[RasFinding]:
    out = []
    ops = dict.fromkeys(op for r in c.ranks for op, _ in r.counts)
    for op in ops:
        have = [(r, r.count(op)) for r in c.ranks if r.count(op) is not None]
        if len(have) < 2:
            continue
        top = max(n for _, n in have)  # type: ignore[type-var]
        if all(n == top for _, n in have):
            continue
        ahead = tuple(sorted(r.rank for r, n in have if n == top and r.rank is not None))
        for r, n in have:
            if n != top:
                out.append(RasFinding("behind", c.hash, c.size, r.rank, r.pid, r.host, op, n, top, ahead))
    return out


def actor_for(rank: RasRank | RasFinding, actors: list[ActorRow] | tuple[ActorRow, ...]) -> ActorRow | None:
    """The actor whose process RAS names: same pid, on the node RAS calls it by (its IP)."""
    if rank.pid is None:
        return None
    hits = [a for a in actors if a.pid == rank.pid]
    if len(hits) > 1 and rank.host:
        hits = [a for a in hits if a.node_ip == rank.host] or hits
    return hits[0] if len(hits) == 1 else None


def suspects(found: list[RasFinding], ranks: list[RankDump]) -> list[Suspect]:
    """Ranks RAS says are behind or missing, as suspects (strongest first). A rank that is behind on a
    communicator whose other ranks are all ahead is the classic straggler."""
    actors = [r.actor for r in ranks]
    from verltop.model import Suspect, SuspectWhy  # a dump's types: a snapshot's RAS stalls never load them

    out: list[Suspect] = []
    seen: Counter[str] = Counter()
    for f in found:
        if f.kind == "aborted":
            continue
        a = actor_for(f, actors)
        if a is None or seen[a.actor_id]:
            continue
        seen[a.actor_id] += 1
        score = {"behind": 95, "mismatch": 80}.get(f.kind, 85)
        out.append(Suspect(a.actor_id, a.worker_group, a.rank, (SuspectWhy("ras", finding=f),), score, pid=a.pid))
    return out


def stalls(report: RasReport, actors: list[ActorRow] | tuple[ActorRow, ...]) -> dict[str, Stall]:
    """actor_id → the RAS stall of the actors RAS points at (its strongest finding)."""
    out: dict[str, Stall] = {}
    order = {"behind": 0, "mismatch": 1, "missing": 2}
    for f in sorted(findings(report), key=lambda f: order.get(f.kind, 9)):
        if f.kind not in order:
            continue
        a = actor_for(f, actors)
        if a is None or a.actor_id in out:
            continue
        if f.kind == "behind":
            out[a.actor_id] = Stall("ras", state="behind", op=f.op, count=f.count, expected=f.peers_count)
        elif f.kind == "mismatch":
            out[a.actor_id] = Stall("ras", state="mismatch", op=f.op, cause=f.peer_op)
        else:
            out[a.actor_id] = Stall("ras", state="missing")
    return out
