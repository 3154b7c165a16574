"""What the last dump found, kept on the main screen: the suspects it named, each until its task moves on
(another task id than at the dump, or none) or a later dump no longer names it (its stack moved)."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.model import ActorRow, DumpReport, Suspect


@dataclass(frozen=True, slots=True)
class SuspectMark:
    """A suspect of a dump, tied to the task its actor ran when the dump was taken."""

    actor_id: str
    task_id: str | None
    suspect: Suspect
    process: str | None  # a child process's title when the suspect is one of the actor's children
    taken_at: float


def suspect_marks(report: DumpReport) -> tuple[SuspectMark, ...]:
    """One mark per suspect of ``report`` that is an actor or one of its processes (a placement group has no
    row), in the report's order (most likely first)."""
    by_key = {(r.actor.actor_id, r.actor.pid if r.process is not None else None): r for r in report.ranks}
    out = []
    for s in report.suspects:
        if s.placement_group_id is not None and not s.actor_id:
            continue
        rd = by_key.get((s.actor_id, s.pid)) or by_key.get((s.actor_id, None))
        if rd is None:
            continue
        child = rd.process if rd.process is not None and rd.actor.pid == s.pid else None
        out.append(SuspectMark(s.actor_id, rd.actor.task_id, s, child, report.taken_at))
    return tuple(out)


def live_marks(marks: tuple[SuspectMark, ...], actors: tuple[ActorRow, ...],
               at: float | None = None) -> dict[str, SuspectMark]:
    """The marks that still hold on ``actors`` (as seen at ``at``), by actor id: the dump was taken by then,
    the actor is there and runs the task it ran at the dump (a dead one: still no task). The first (most
    likely) suspect of an actor wins."""
    if not marks:
        return {}
    rows = {a.actor_id: a for a in actors}
    out: dict[str, SuspectMark] = {}
    for m in marks:
        a = rows.get(m.actor_id)
        if at is not None and m.taken_at > at + 1:  # a replay shown before its dump
            continue
        if a is not None and a.task_id == m.task_id and m.actor_id not in out:
            out[m.actor_id] = m
    return out
