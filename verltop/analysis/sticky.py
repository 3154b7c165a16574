"""Evidence that sticks: a process named with strong evidence by an earlier dump stays named while its task
and its stack have not changed, after the symptoms changed around it (its peers failed, died, or NCCL's
watchdog tore them down: the rules of a later dump may then see nothing stand apart). Pure."""

from __future__ import annotations

from dataclasses import replace

from verltop.analysis.collectives import stack_key
from verltop.model import DumpReport, RankDump, Suspect

# reasons strong enough to carry: a collective its peers are in (or failed in), NCCL's own count, a TP
# worker outside its peers' collective, a death
STRONG = frozenset({"not_in", "peers_failed", "ras", "tp", "mismatch", "dead_waited", "controller", "chain_end"})
MIN_SCORE = 80.0


def _strong(s: Suspect) -> bool:
    return s.score >= MIN_SCORE and any(w.kind in STRONG for w in s.why)


def _same(a: RankDump, b: RankDump) -> bool:
    """The same process in the same call, its stack where it was."""
    x, y = a.actor, b.actor
    if x.state != "ALIVE" or y.state != "ALIVE" or x.pid != y.pid or not x.task_id or x.task_id != y.task_id:
        return False
    if a.main is None or b.main is None:
        return False
    return stack_key(a.main.frames) == stack_key(b.main.frames)


def carry(prev: DumpReport | None, now: DumpReport) -> DumpReport:
    """``now`` with the strong suspects of ``prev`` it no longer names but whose process has not changed, said
    to be ``still`` so (their reasons are the earlier ones)."""
    if prev is None or not prev.suspects:
        return now
    named = {(s.actor_id, s.pid) for s in now.suspects}
    before = {(r.actor.actor_id, r.actor.pid): r for r in prev.ranks}
    after = {(r.actor.actor_id, r.actor.pid): r for r in now.ranks}
    kept = []
    for s in prev.suspects:
        k = (s.actor_id, s.pid)
        if k in named or not _strong(s):
            continue
        a, b = before.get(k), after.get(k)
        if a is None or b is None or not _same(a, b):
            continue
        kept.append(replace(s, why=tuple(replace(w, still=True) for w in s.why)))
    if not kept:
        return now
    out = sorted((*now.suspects, *kept), key=lambda s: (-s.score, s.worker_group or "",
                                                       s.rank if s.rank is not None else -1, s.pid or 0))
    return replace(now, suspects=tuple(out))
