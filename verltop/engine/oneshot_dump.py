"""``verltop dump``'s side of the engine: a fresh monitor's first reads, the dump job, and what to dump.

``verltop dump`` without waiting: py-spy starts on this machine's ranks as soon as the actor rows (pids,
rank env) and the node list (which node is this machine) are in. What else the report needs — the running
tasks (the method each rank is in), the roles of idle colocated workers, GPU figures — is read while the
stacks are taken: it labels and classifies the ranks, it does not choose them.

Which actors to dump is decided from the actor rows alone, as a superset of what ``dump_targets`` picks
once the tasks are in (a colocated worker without a worker group is a verl rank only if its methods say so);
the candidates that turn out not to be verl ranks are dropped from the report.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging

from verltop.analysis import roles as R
from verltop.analysis.dump import dump_targets
from verltop.engine.dumps import DumpJob
from verltop.engine.monitor import Monitor
from verltop.engine.oneshot import OneShotError
from verltop.model import ActorRow, DumpReport
from verltop.sources import dashboard as D
from verltop.sources import headstart
from verltop.sources.local import has_nvidia_device
from verltop.sources.pyspy import DumpOptions, children_by_pidfd
from verltop.text.pending import not_placed

log = logging.getLogger("verltop.dump")


async def dump(mon: Monitor, scope: str | None, opts: DumpOptions, use_logs: bool = True) -> DumpReport:
    """``verltop dump``: every verl rank and the controller, or ``scope`` (one worker group by its WG_PREFIX,
    or one actor by name or id); the monitor is stopped after. Raises ``OneShotError`` when there is nothing
    to dump or the dump failed; a report whose ranks all failed is returned (its errors say why)."""
    what = f"worker group {scope!r}" if scope else "verl workers or controller"
    quick = QuickDump(mon, scope, opts, use_logs=use_logs)
    try:
        job = await quick.prepare()
        if job is None:
            err = mon.connection_problem()
            raise OneShotError(err.text if err else "no answer from the dashboard")
        if not job.targets and not job.waiting_jobs:
            snap = mon.snapshot()
            pgs = [p for p in snap.pending if p.kind == "placement_group"]
            if pgs:  # the workers do not exist yet: say what holds them up instead
                why = "; ".join(not_placed(p) for p in pgs[:3])
                raise OneShotError(f"no {what} to dump on {snap.address} yet: {why}")
        with children_by_pidfd():
            report = await job.run() if job.targets or job.waiting_jobs else None
    finally:
        quick.close()
        headstart.discard()  # early py-spy runs the dump did not take
        await mon.stop()
    if (job.targets or job.waiting_jobs) and report is None:
        raise OneShotError(job.problem.text if job.problem else "the dump failed")
    if report is None or not report.ranks:
        raise OneShotError(f"no {what} found on {mon.address} ({len(mon.src.actors.value or [])} actors)")
    return report


class QuickDump:
    """Prepare a ``DumpJob`` for ``scope`` (every verl rank and the controller when None) on a fresh
    ``Monitor``; ``await prepare()`` returns it (or None when the dashboard gave no actor list:
    ``mon.connection_problem()`` says why) and ``close()`` stops the reads still running."""

    def __init__(self, mon: Monitor, scope: str | None, opts: DumpOptions, use_logs: bool = True) -> None:
        self.mon = mon
        self.scope = scope
        self.opts = opts
        self.use_logs = use_logs
        self._background: list[asyncio.Task] = []

    async def prepare(self) -> DumpJob | None:
        mon = self.mon
        t = mon.iv.timeout_s
        summary = asyncio.create_task(D.fetch_nodes_summary(mon.client, t))
        self._background.append(asyncio.create_task(mon.poll_tasks()))
        # pending work too: a job whose workers cannot be placed has nothing to dump but its driver
        _, nodes, _, prof = await asyncio.gather(mon.poll_actors(), D.fetch_nodes(mon.client, t), mon.poll_pending(),
                                                 D.fetch_profiling_enabled(mon.client))
        mon.take_nodes(nodes, None)
        if not mon.has_data:
            summary.cancel()
            return None
        snap = mon.snapshot()
        targets = candidates(snap.actors, self.scope)
        self._background += [asyncio.create_task(self._node_stats(nodes, summary)),
                             asyncio.create_task(mon.poll_local(procs=False)),
                             *(asyncio.create_task(mon.seed_roles(g)) for g in colocated_groups(snap.actors))]

        async def refreshed() -> dict[str, ActorRow]:
            for r in await asyncio.gather(*self._background, return_exceptions=True):
                if isinstance(r, BaseException):
                    log.error("a read for the dump failed", exc_info=r)
            rows = mon.rows_by_id(snap.taken_at)
            taken = {a.actor_id for a in targets}
            return {a.actor_id: a for a in dump_targets(list(rows.values()), self.scope) if a.actor_id in taken}

        local = mon.local_node_ids()
        job = DumpJob(mon.client, local, targets, self.opts, use_logs=self.use_logs,
                      refresh_rows=refreshed, clock=mon.clock, nodes=snap.nodes, drivers=self.scope is None,
                      ras_addrs=mon.ras_addresses(snap.actors, has_nvidia_device()) if mon.use_local else [],
                      pending=snap.pending)
        job.dashboard_profiling = prof.value if prof.ok else None
        remote = sorted({a.node_id for a in targets if a.node_id and a.node_id not in local and a.state == "ALIVE"})
        if remote and (self.opts.via == "probe" or (self.opts.via == "auto" and job.dashboard_profiling is False)) \
                and importlib.util.find_spec("ray") is not None:
            from verltop.sources.probe import ProbePool  # ray is imported by its own thread

            job.probe = ProbePool(self.opts)
            job.probe.warm(remote)  # joins the cluster and starts every node's probe while the rest goes on
        return job

    async def _node_stats(self, nodes: D.Result, summary: asyncio.Task) -> None:
        self.mon.take_nodes(nodes, await summary)

    def close(self) -> None:
        for t in self._background:
            t.cancel()


def candidates(actors: tuple[ActorRow, ...], scope: str | None) -> list[ActorRow]:
    """What to dump before the tasks are known: ``dump_targets`` of the rows as they are, and colocated
    workers without a worker group (their role comes from their methods)."""
    out = dump_targets(actors, scope)
    if scope is None:
        have = {a.actor_id for a in out}
        out += [a for a in actors if a.actor_id not in have and a.worker_group is None
                and R.is_colocated(a.class_name) and a.state in ("ALIVE", "DEAD", "RESTARTING")]
    return out


def colocated_groups(actors: tuple[ActorRow, ...]) -> list[list[str]]:
    """Actor ids per colocated worker group, rank 0 first (a worker without a group is its own): the
    roles of each are read once, from its first actor's finished tasks."""
    groups: dict[str, list[ActorRow]] = {}
    for a in actors:
        if R.is_colocated(a.class_name):
            groups.setdefault(a.worker_group or a.actor_id, []).append(a)
    def first(a: ActorRow) -> tuple[bool, int]:
        return a.state != "ALIVE", a.rank if a.rank is not None else 1 << 30

    return [[a.actor_id for a in sorted(g, key=first)] for g in groups.values()]
