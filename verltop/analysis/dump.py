"""Assemble a cross-rank dump: per-rank op and motion, equivalence classes and suspects. Pure."""

from __future__ import annotations

from dataclasses import replace

from verltop.analysis import chains as wait_chains
from verltop.analysis import ras as RAS
from verltop.analysis.collectives import blocked_on, collective_pending, stack_key, task_thread
from verltop.analysis.merge import equivalence_classes
from verltop.analysis.oom import failed_ooms, from_call, from_death
from verltop.analysis.peer_failures import peer_failures
from verltop.analysis.pending_waits import pending_chains, pending_suspects_of
from verltop.analysis.process_suspects import chain_suspects, merge_suspects, tp_suspects
from verltop.analysis.suspects import find_suspects
from verltop.analysis.waiters import Activity, process_activity
from verltop.model import (
    ActorRow,
    ChildProc,
    CollectiveInfo,
    Death,
    DumpReport,
    PendingItem,
    Problem,
    ProcessDump,
    RankDump,
    RasReport,
    RawObjectRef,
    RawTask,
    Suspect,
)
from verltop.model.memory import OomVerdict


def child_key(c: ChildProc) -> str:
    """The samples key of a child process (an actor's own samples are keyed by its actor id)."""
    return f"{c.actor_id}:{c.pid}"


def analyse_rank(actor: ActorRow, samples: list[ProcessDump], collective: CollectiveInfo | None = None,
                 gpu_busy_percent: float = 90.0, death: Death | None = None) -> RankDump:
    """One rank: its task thread in the last good sample, what it waits in, and whether it moved."""
    good = [s for s in samples if s.error is None and s.threads]
    if actor.state in ("DEAD", "RESTARTING") and not good:
        cause = f": {actor.death_cause}" if actor.death_cause else ""
        return RankDump(actor, tuple(samples), error=Problem("dead", f"actor is {actor.state}{cause}"),
                        collective=collective, death=death)
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
        keys = {stack_key(main.frames) if main else ()}
        for s in good[:-1]:  # the last one's task thread is ``main``
            t = task_thread(s.threads)
            keys.add(stack_key(t.frames) if t else ())
        # "stuck" is about a task that does not progress; an idle worker's loop never moves either
        stuck = len(keys) == 1 if actor.task else None
    return RankDump(actor, tuple(samples), main=main, blocked_on=b, stuck=stuck, collective=collective, error=gone,
                    death=death)


def analyse_child(actor: ActorRow, child: ChildProc, samples: list[ProcessDump]) -> RankDump:
    """A descendant process of ``actor``, analysed as a rank of its own (its row is the actor's, with its pid)."""
    r = analyse_rank(replace(actor, pid=child.pid), samples)
    return replace(r, process=child.title or "?", parent_pid=child.ppid)


def activity(r: RankDump) -> Activity:
    """What the process does, from its last good sample; a process without a stack is ``unknown``."""
    last = next((s for s in reversed(r.samples) if s.error is None and s.threads), None)
    if last is None:
        return Activity("unknown")
    b = r.blocked_on
    if b is not None and (b.gpu_wait or b.op in ("cuda_sync",)):
        # an NCCL wait looks like the rank's own code from Python (`.item()` after the collective): the GPU
        # signal and native frames said otherwise when blocked_on was worked out
        c = r.collective
        what = f"{c.op} #{c.seq}" if c is not None and c.op and collective_pending(c) else "a collective on the GPU"
        return Activity("collective", what, b.frame)
    # past the GPU case above, blocked_on without the GPU figures would say the same as r.blocked_on
    return process_activity(last.threads, r.process, r.main, b)


def analyse(
    actors: list[ActorRow],
    samples: dict[str, list[ProcessDump]],
    taken_at: float,
    collectives: dict[str, CollectiveInfo] | None = None,
    native: bool = False,
    notes: tuple[str, ...] = (),
    children: list[ChildProc] | tuple[ChildProc, ...] = (),
    deaths: dict[str, Death] | None = None,
    tasks: list[RawTask] | tuple[RawTask, ...] = (),
    refs: list[RawObjectRef] | tuple[RawObjectRef, ...] = (),
    ras: RasReport | None = None,
    pending: tuple[PendingItem, ...] = (),
    failed: list[RawTask] | tuple[RawTask, ...] = (),
    ooms: tuple[OomVerdict, ...] = (),
) -> DumpReport:
    """The report: every actor (a driver is a row with role ``driver``), every child process (samples keyed
    by ``child_key``), wait chains from the running ``tasks`` and pending ``refs``, and the suspects.
    ``failed``: FAILED tasks (a peer whose collective timed out waiting for a straggler names it).
    ``pending``: the snapshot's unplaced placement groups (a wait on workers that do not exist ends there).
    ``ras``: NCCL RAS's view of the communicators at dump time (its lagging and missing ranks become suspects
    too; the caller adds its findings to ``notes`` in words: ``verltop.text.ras.ras_notes``).
    ``ooms``: the snapshot's OOM verdicts (placed in their step, with their lead-up); a FAILED call or a death
    that is an OOM and has none gets one here (without step)."""
    collectives = collectives or {}
    deaths = deaths or {}
    ranks = [analyse_rank(a, samples.get(a.actor_id, []), collectives.get(a.actor_id), death=deaths.get(a.actor_id))
             for a in actors]
    rows = {a.actor_id: a for a in actors}
    kids = [analyse_child(rows[c.actor_id], c, samples.get(child_key(c), [])) for c in children
            if c.actor_id in rows]
    # each actor's processes right after it
    by_actor: dict[str, list[RankDump]] = {}
    for k in kids:
        by_actor.setdefault(k.actor.actor_id, []).append(k)
    every = [x for r in ranks for x in (r, *by_actor.get(r.actor.actor_id, ()))]
    acts = {r.key: activity(r) for r in every}
    drivers = {wait_chains.driver_task_id(a.job_id): a.actor_id for a in actors if a.role == "driver" and a.job_id}
    chains = wait_chains.build(every, acts, tasks, refs, drivers)
    if pending:  # a controller (or driver) in ray.get with no worker to wait on: its chain ends in the PG
        chains = pending_chains(chains, every, acts, pending)
    suspects = merge_suspects(find_suspects(every, peer_failures(failed), taken_at, oom_by_actor(actors, failed, deaths, ooms,
                                                                                                   taken_at)),
                              tp_suspects(kids, acts), chain_suspects(chains, every, acts),
                              pending_suspects_of(every, acts, pending))
    n_samples = max((len(v) for v in samples.values()), default=0)
    found = RAS.findings(ras) if ras is not None else []
    if found:
        suspects = with_ras(suspects, RAS.suspects(found, ranks))
    return DumpReport(
        taken_at=taken_at,
        ranks=tuple(every),
        groups=equivalence_classes(every),
        suspects=tuple(suspects),
        native=native,
        samples=n_samples,
        notes=notes,
        chains=tuple(chains),
    )


def oom_by_actor(actors: list[ActorRow], failed: list[RawTask] | tuple[RawTask, ...], deaths: dict[str, Death],
                 ooms: tuple[OomVerdict, ...], now: float) -> dict[str, OomVerdict]:
    """The OOM verdict of each actor that has one: the snapshot's first, else from its FAILED call or death."""
    rows = {a.actor_id: a for a in actors}
    out = {v.actor_id: v for v in ooms if v.actor_id}
    for c in failed_ooms(failed):
        if c.actor_id and c.actor_id in rows and c.actor_id not in out:
            v = from_call(c, rows[c.actor_id], now)
            if v is not None:
                out[c.actor_id] = v
    for aid, d in deaths.items():
        if aid in rows and aid not in out and d.kind in ("cuda_oom", "host_oom"):
            v = from_death(rows[aid], d, at=now)
            if v is not None:
                out[aid] = v
    return out


def with_ras(stacks: list[Suspect], ras: list[Suspect]) -> list[Suspect]:
    """RAS's suspects folded into the stacks' (one line per rank, strongest first): where both name a rank,
    both reasons are given on its line."""
    out = list(stacks)
    for r in ras:
        i = next((k for k, s in enumerate(out) if s.actor_id == r.actor_id and s.pid in (None, r.pid)), None)
        if i is None:
            out.append(r)
        else:
            s = out[i]
            out[i] = replace(s, why=s.why + r.why, score=max(s.score, r.score))
    return sorted(out, key=lambda s: (-s.score, s.worker_group or "", s.rank if s.rank is not None else -1,
                                      s.pid or 0))


def dump_targets(actors: tuple[ActorRow, ...] | list[ActorRow], scope: str | None = None) -> list[ActorRow]:
    """Which actors a dump covers: every actor of the job, of every role (worker groups, the controller,
    rollout servers, agent and reward loops; dead ranks too, so a dead rank can be named); with ``scope``,
    that worker group (plus the controller), or the one actor whose name or id it is (``d`` on a rollout
    server). Actors of other jobs on the cluster (verltop's own probe, another user's) are left out when
    the job is known."""
    jobs = {a.job_id for a in actors if a.job_id and (a.worker_group is not None or a.role != "other")}
    named = [a for a in actors if scope is not None and scope in (a.actor_name, a.actor_id)]
    if named:
        return named
    out = []
    for a in actors:
        if a.class_name.rsplit(".", 1)[-1] == "VerltopProbe":
            continue
        verl = a.worker_group is not None or a.role not in ("other",) or (jobs and a.job_id in jobs)
        if not verl:
            continue
        if scope is not None and a.role != "controller" and a.worker_group != scope:
            continue
        if a.state not in ("ALIVE", "DEAD", "RESTARTING"):
            continue
        out.append(a)
    return out
