"""Incidents: when a stall (or a rank's death) becomes one, when it is over, and what it says. Pure: snapshots
and dump reports in, events and facts out; the caller owns the clock, the captures and the files.

One incident per stall, not one per poll: an incident opens on the first snapshot in which a group of the
job has a stalled task (the TUI's stall rules, carried by the snapshot) or a rank newly died of a failure;
while it is open, more groups stalling and more ranks dying are escalations of the same incident; it
closes once every group in it has been clear for ``clear_after_s``. The next stall opens the next one.
Snapshots built while the dashboard does not answer are passed over: their stalls are the clock's, not
the job's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from verltop.analysis.collectives import collective_pending
from verltop.model import ActorRow, DumpReport, RankDump, Snapshot

# Ray's words for a death nobody needs to be told about: the job ended, or someone killed it on purpose
_INTENDED = ("INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT", "killed by `ray.kill`", "ray.kill", "exit_actor",
             "all references to the actor were removed")


def death_is_failure(a: ActorRow) -> bool:
    """A rank that died of a failure (a crash, OOM, a lost node), not because the job ended or was killed."""
    if a.state == "RESTARTING":
        return True  # Ray restarts only what died unexpectedly
    cause = a.death_text or a.death_cause or ""
    return not any(w in cause for w in _INTENDED)


def job_actor(a: ActorRow) -> bool:
    """The job's own actors: verl workers (a worker group or a known role) and the controller."""
    return a.worker_group is not None or a.role != "other"


def blind(s: Snapshot) -> bool:
    """The actors or tasks the snapshot shows could not be read at its last poll (or are stale): task ages
    run on with the clock while their tasks may have ended unseen, so its stalls prove nothing."""
    return any(src.name in ("actors", "tasks") and (src.error is not None or src.stale_at())
               for src in s.sources)


def group_of(a: ActorRow) -> str:
    return a.worker_group or a.role


@dataclass(frozen=True, slots=True)
class IncidentEvent:
    kind: str  # "opened" | "spread" (another group stalled) | "died" (ranks died) | "closed"
    at: float  # the snapshot's time
    groups: tuple[str, ...]  # the groups this event is about
    stalled: tuple[str, ...] = ()  # actor ids newly stalled (opened, spread)
    died: tuple[str, ...] = ()  # actor ids that died (opened, died)
    started_at: float | None = None  # opened: when the stalled tasks began (the hang began at or after it)


@dataclass(slots=True)
class IncidentTracker:
    clear_after_s: float = 60.0
    open: bool = False
    groups: dict[str, float] = field(default_factory=dict)  # group -> last time it was in trouble
    _dead: set[str] | None = None  # actors already seen dead (None before the first snapshot)

    def update(self, s: Snapshot) -> list[IncidentEvent]:
        if blind(s):
            return []  # nothing is known about now: neither a new stall nor the end of one
        t = s.taken_at
        first = self._dead is None
        dead = self._dead if self._dead is not None else set()
        stalled: dict[str, list[ActorRow]] = {}
        died: dict[str, list[ActorRow]] = {}
        present = set()
        for a in s.actors:
            if not job_actor(a):
                continue
            present.add(a.actor_id)
            g = group_of(a)
            if a.state in ("DEAD", "RESTARTING"):
                if a.actor_id not in dead:
                    dead.add(a.actor_id)
                    # deaths that happened before we looked are old news, not an incident
                    if not first and death_is_failure(a):
                        died.setdefault(g, []).append(a)
                continue
            dead.discard(a.actor_id)  # restarted: its next death counts again
            if a.stalled and a.state == "ALIVE":
                stalled.setdefault(g, []).append(a)
        self._dead = dead & present
        bad = set(stalled) | set(died)
        ids = lambda d: tuple(a.actor_id for rows in d.values() for a in rows)  # noqa: E731
        if not self.open:
            if not bad:
                return []
            self.open = True
            self.groups = dict.fromkeys(bad, t)
            starts = [a.task_start_s for rows in stalled.values() for a in rows if a.task_start_s is not None]
            return [IncidentEvent("opened", t, tuple(sorted(bad)), ids(stalled), ids(died),
                                  min(starts) if starts else t)]
        out = []
        new = sorted(g for g in stalled if g not in self.groups)
        if new:
            out.append(IncidentEvent("spread", t, tuple(new), tuple(a.actor_id for g in new for a in stalled[g])))
        if died:
            out.append(IncidentEvent("died", t, tuple(sorted(died)), died=ids(died)))
        for g in bad:
            self.groups[g] = t
        if all(t - last >= self.clear_after_s for last in self.groups.values()):
            out.append(IncidentEvent("closed", t, tuple(sorted(self.groups))))
            self.open = False
            self.groups = {}
        return out


# ---------------------------------------------------------------- where the ranks wait (the diagnosis' facts)


@dataclass(frozen=True, slots=True)
class Wait:
    """Ranks of one group waiting in the same place: ``ranks 0,1,3 of abcd wait in all_reduce``."""

    group: str
    op: str
    ranks: tuple[str, ...]  # rank labels ("abcd:0")
    frame: str | None
    collective: str | None  # "all_reduce #5" when the watchdog or Flight Recorder named it


def label(a: ActorRow) -> str:
    """``group:rank``, ``controller``, else the actor's name (as the stack screen labels ranks)."""
    if a.role == "controller":
        return "controller"
    return f"{a.worker_group}:{a.rank}" if a.worker_group and a.rank is not None else (a.actor_name or a.actor_id[:8])


def waits(report: DumpReport, groups: tuple[str, ...]) -> list[Wait]:
    """Per group, the biggest set of ranks blocked in the same op (not suspects), most ranks first."""
    sus = {s.actor_id for s in report.suspects}
    out = []
    for g in groups:
        ranks = [r for r in report.ranks if (r.actor.worker_group or r.actor.role) == g and r.blocked_on
                 and r.actor.actor_id not in sus and r.process is None]
        if not ranks:
            continue
        op, _ = Counter(r.blocked_on.op for r in ranks if r.blocked_on).most_common(1)[0]
        same = [r for r in ranks if r.blocked_on and r.blocked_on.op == op]
        frame = Counter(r.blocked_on.frame for r in same if r.blocked_on and r.blocked_on.frame).most_common(1)
        out.append(Wait(g, op, tuple(label(r.actor) for r in same), frame[0][0] if frame else None,
                        _collective(same)))
    return sorted(out, key=lambda w: -len(w.ranks))


def _collective(ranks: list[RankDump]) -> str | None:
    named = Counter(f"{c.op} #{c.seq}" if c.seq is not None else c.op for r in ranks
                    if (c := r.collective) is not None and c.op and collective_pending(c))
    return named.most_common(1)[0][0] if named else None
