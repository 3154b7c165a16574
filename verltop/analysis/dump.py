"""Assemble a cross-rank dump: per-rank op and motion, equivalence classes and suspects. Pure."""

from __future__ import annotations

from verltop.analysis import ras as RAS
from verltop.analysis.collectives import blocked_on, stack_key, task_thread
from verltop.analysis.merge import equivalence_classes
from verltop.analysis.suspects import find_suspects
from verltop.model import (
    ActorRow,
    CollectiveInfo,
    DumpReport,
    Problem,
    ProcessDump,
    RankDump,
    RasReport,
    Suspect,
)


def analyse_rank(actor: ActorRow, samples: list[ProcessDump], collective: CollectiveInfo | None = None,
                 gpu_busy_percent: float = 90.0) -> RankDump:
    """One rank: its task thread in the last good sample, what it waits in, and whether it moved."""
    good = [s for s in samples if s.error is None and s.threads]
    if actor.state in ("DEAD", "RESTARTING") and not good:
        cause = f": {actor.death_cause}" if actor.death_cause else ""
        return RankDump(actor, tuple(samples), error=Problem("dead", f"actor is {actor.state}{cause}"),
                        collective=collective)
    if not good:
        err = next((s.error for s in samples if s.error), None) or Problem("no_stack", "no stack")
        return RankDump(actor, tuple(samples), error=err, collective=collective)
    last = good[-1]
    # it answered, then stopped answering: it exited (or was killed) during the dump; say so
    gone = samples[-1].error
    if gone is not None:
        gone = gone.with_message(f"{gone.message} (its stack is from an earlier sample)")
    main = task_thread(last.threads)
    b = blocked_on(main, actor.gpu_util_percent, gpu_busy_percent)
    stuck = None
    if len(good) >= 2:
        keys = set()
        for s in good:
            t = task_thread(s.threads)
            keys.add(stack_key(t.frames) if t else ())
        # "stuck" is about a task that does not progress; an idle worker's loop never moves either
        stuck = len(keys) == 1 if actor.task else None
    return RankDump(actor, tuple(samples), main=main, blocked_on=b, stuck=stuck, collective=collective, error=gone)


def analyse(
    actors: list[ActorRow],
    samples: dict[str, list[ProcessDump]],
    taken_at: float,
    collectives: dict[str, CollectiveInfo] | None = None,
    native: bool = False,
    notes: tuple[str, ...] = (),
    ras: RasReport | None = None,
) -> DumpReport:
    """The report of a dump. ``ras``: NCCL RAS's view of the communicators at dump time (its lagging and
    missing ranks become suspects too, and its findings notes)."""
    collectives = collectives or {}
    ranks = [analyse_rank(a, samples.get(a.actor_id, []), collectives.get(a.actor_id)) for a in actors]
    n_samples = max((len(v) for v in samples.values()), default=0)
    found = RAS.findings(ras) if ras is not None else []
    if found:
        notes = tuple(dict.fromkeys((*notes, *RAS.summary(found))))
    return DumpReport(
        taken_at=taken_at,
        ranks=tuple(ranks),
        groups=equivalence_classes(ranks),
        suspects=tuple(merge_suspects(find_suspects(ranks), RAS.suspects(found, ranks))),
        native=native,
        samples=n_samples,
        notes=notes,
    )


def merge_suspects(stacks: list[Suspect], ras: list[Suspect]) -> list[Suspect]:
    """One line per rank, strongest first: where the stacks and RAS agree, both reasons are given."""
    by_id = {s.actor_id: s for s in stacks}
    for r in ras:
        s = by_id.get(r.actor_id)
        if s is None:
            by_id[r.actor_id] = r
        else:
            by_id[r.actor_id] = Suspect(s.actor_id, s.worker_group, s.rank, f"{s.reason}; {r.reason}",
                                        max(s.score, r.score))
    return sorted(by_id.values(), key=lambda s: (-s.score, s.worker_group or "", s.rank if s.rank is not None else -1))


def dump_targets(actors: tuple[ActorRow, ...] | list[ActorRow], group: str | None = None) -> list[ActorRow]:
    """Which actors a dump covers: every verl worker and the controller (dead ranks too, so a dead rank
    can be named); with ``group``, that worker group (plus the controller)."""
    out = []
    for a in actors:
        verl = a.worker_group is not None or a.role not in ("other",)
        if not verl:
            continue
        if group is not None and a.role != "controller" and a.worker_group != group:
            continue
        if a.state not in ("ALIVE", "DEAD", "RESTARTING"):
            continue
        out.append(a)
    return out
