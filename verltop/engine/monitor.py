"""The live engine: one ``Monitor`` owns time. Each source polls on its own interval, never overlapping
itself, keeping its last good data, its age and its last problem; a publisher joins them into a
``Snapshot`` (the pure analysis runs in a thread) at most once per poll interval, and only when something
changed; views subscribe. Dumps and log tails are asked of it too.

The pollers are mixins, one module per source (``poll_*.py``) over the state they share
(``polling.py``); the joined view is built in ``snapshots.py``. This module keeps the schedule and publishing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from verltop.convert import one_line
from verltop.engine import nccl_ras
from verltop.engine.poll_actors import ActorPolls
from verltop.engine.poll_history import HistoryPolls
from verltop.engine.poll_local import LocalPolls
from verltop.engine.poll_nodes import NodePolls
from verltop.engine.poll_tasks import TaskPolls
from verltop.engine.poll_training import TRAINING_EVERY_S, TrainingPolls
from verltop.engine.polling import FIRST_FRAME_GRACE_S, ROLES_EVERY_S, Intervals, SourceState, backoff
from verltop.engine.snapshots import SnapshotBuilding
from verltop.model import ActorRow, Problem, Snapshot
from verltop.sources import dashboard as D
from verltop.sources.aio import cancel_all

if TYPE_CHECKING:
    from verltop.engine.doctor import DoctorJob
    from verltop.engine.doctor import ProgressFn as DoctorProgressFn
    from verltop.engine.dumps import DumpJob, DumpProgress, ProgressFn
    from verltop.model import ObjectStoreReport
    from verltop.sources.pyspy import DumpOptions

__all__ = ["Intervals", "Monitor", "SourceState"]

log = logging.getLogger("verltop.engine")


class Monitor(ActorPolls, TaskPolls, HistoryPolls, NodePolls, LocalPolls, TrainingPolls, SnapshotBuilding):
    """Polls the dashboard and this machine and publishes snapshots of the joined view."""

    # ---------------------------------------------------------- Engine

    def set_focus(self, node_ids: Iterable[str]) -> None:
        self._focus = dict.fromkeys(node_ids)

    def want_processes(self, node_ids: Iterable[str]) -> list[str]:
        """Read the process trees of these nodes (through a probe: other nodes only; this machine's are
        read every local poll), now and then every ``trees_s`` while they are on screen. Returns the
        nodes that will be read now (those not asked about before)."""
        local = self.local_node_ids()
        new = self.remote.ask(n for n in node_ids if n and n not in local)
        if new:
            self._tasks.append(asyncio.create_task(self._guarded(lambda: self._read_trees(new), None),
                                                   name="verltop-trees-now"))
        return new

    @property
    def has_data(self) -> bool:
        return self.src.actors.ok_at is not None

    def connection_problem(self) -> Problem | None:
        for s in self.src.all():
            if s.error and s.ok_at is None and s not in (self.src.local, self.src.engine):
                return s.error
        return None

    @property
    def min_publish_s(self) -> float:
        """Sources answer at different moments; join them into one snapshot per poll interval."""
        return min(self.iv.actors_s, self.iv.tasks_s)

    def start(self) -> None:
        """One loop per source, a publisher, and the one-off history seed."""
        loop_specs: list[tuple[Callable, Callable[[], float], SourceState | None]] = [
            (self._poll_actors, lambda: self.iv.actors_s, self.src.actors),
            (self._poll_tasks, lambda: self.iv.tasks_s, self.src.tasks),
            (self._poll_nodes, lambda: self.iv.nodes_s, self.src.nodes),
            (self._poll_node_details, lambda: self.iv.node_detail_s, None),
            (self._poll_waiting, lambda: self.iv.waiting_s, None),
            (self._poll_roles, lambda: ROLES_EVERY_S, None),
            (self._poll_deaths, lambda: self.iv.actors_s, None),  # dead ranks' logs: an OOM's word
            (self._poll_trees, lambda: min(2.0, self.iv.trees_s), None),
            (self._poll_pending, lambda: self.iv.actors_s, self.pending.state),  # it decides when to read
            (self._poll_training, lambda: max(self.iv.tasks_s, TRAINING_EVERY_S), None),
            (self._poll_rollout, lambda: self.iv.rollout_s, None),
        ]
        if self.use_local:
            loop_specs.append((self._poll_local, lambda: self.iv.local_s, self.src.local))
            loop_specs.append((self._poll_ras, lambda: self.iv.tasks_s, None))
        for fn, iv, st in loop_specs:
            self._tasks.append(asyncio.create_task(self._loop(fn, iv, st), name=f"verltop-{fn.__name__}"))
        self._tasks.append(asyncio.create_task(self._seed_after_first()))
        self._tasks.append(asyncio.create_task(self._publisher(), name="verltop-publisher"))

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks.clear()
        await self.timeline.stop()
        await self.remote.close()
        await self.rollout.close()
        await self.client.close()
        if self.sampler and self.sampler.nvml_open:
            await asyncio.to_thread(self.sampler.close)

    def dump(self, snap: Snapshot, scope: str | None, opts: DumpOptions,
             on_progress: ProgressFn | None = None, use_logs: bool = True,
             refresh_rows: Callable[[], Awaitable[dict[str, ActorRow]]] | None = None,
             native_ids: frozenset[str] = frozenset()) -> DumpJob:
        # the dump's machinery is imported when first used: a one-shot `snapshot` never pays for it
        from verltop.analysis.dump import dump_targets
        from verltop.engine.dumps import DumpJob

        def progress(p: DumpProgress) -> None:
            if p.stage == "done" and p.report is not None:
                self._publish_dump(p.report, scope)  # a recording keeps it
                if scope is None:
                    self.last_dump = p.report
            if on_progress is not None:
                on_progress(p)

        return DumpJob(self.client, self.local_node_ids(), dump_targets(snap.actors, scope), opts, progress,
                       use_logs=use_logs, refresh_rows=refresh_rows, clock=self.clock, nodes=snap.nodes,
                       drivers=scope is None, ras_addrs=self.ras_addresses(snap.actors) if self.use_local else [],
                       pending=snap.pending, native_ids=native_ids,
                       previous=self.last_dump if scope is None else None,
                       ooms=snap.memory.oom if snap.memory is not None else ())

    async def object_store(self, limit: int = 10000, timeout_s: float = 30.0) -> ObjectStoreReport:
        from verltop.engine.object_store import read_object_store  # on demand only

        def actors() -> tuple[ActorRow, ...]:
            snap = self.latest or (self.snapshot() if self.has_data else None)  # a one-shot command publishes none
            return snap.actors if snap is not None else ()

        return await read_object_store(self.client, actors, limit, timeout_s, clock=self.clock)

    def doctor(self, path: str | None = None, node_timeout_s: float = 30.0,
               on_progress: DoctorProgressFn | None = None) -> DoctorJob:
        from verltop.engine.doctor import DoctorJob  # not on a dump's or the TUI's start-up path

        return DoctorJob(self.client, path, node_timeout_s, on_progress, clock=self.clock)

    async def log_tail(self, actor_id: str, stream: str = "err", lines: int = 200) -> tuple[str | None, Problem | None]:
        r = await D.fetch_log_tail(self.client, actor_id, stream, lines)
        return (r.value, None) if r.ok else (None, r.error)

    # ---------------------------------------------------------- publishing

    async def _publisher(self) -> None:
        """Rebuild when a poll brought news, at most once per ``min_publish_s``; never two at once."""
        while True:
            await self._dirty.wait()
            if self.snapshots_built == 0:
                await self._first_answers()
            wait = self._last_build + self.min_publish_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.paused:
                await asyncio.sleep(0.2)
                continue
            self._dirty.clear()
            if not self.has_data:
                continue  # nothing built, nothing to wait for: the first answer is shown at once
            self._last_build = time.monotonic()
            try:
                t0 = time.perf_counter()
                snap = await self.snapshot_async()
                self.last_build_ms = (time.perf_counter() - t0) * 1000
                self.snapshots_built += 1
                self._publish(snap)
            except Exception:
                log.error("building a snapshot failed", exc_info=True)

    def _publish(self, snap: Snapshot) -> None:
        super()._publish(snap)
        self._first_built.set()

    async def _seed_after_first(self) -> None:
        """The history seed once the first snapshot is out: its read of finished calls (4 MB at 1,024 ranks,
        and a long query for Ray's state server) would share the start with the reads the first frame waits for."""
        await self._first_built.wait()
        await self._seed_with_retries()

    async def _first_answers(self, grace_s: float = FIRST_FRAME_GRACE_S) -> None:
        """Until the actors have answered and every other source has been asked once (a first table without
        its tasks would change a poll interval later), at most ``grace_s`` past the actors' answer."""
        others = [self.src.tasks, self.src.nodes] + ([self.src.local] if self.use_local else [])
        deadline: float | None = None
        while True:
            if self.has_data:
                deadline = deadline or time.monotonic() + grace_s
                if all(s.tries for s in others) or time.monotonic() >= deadline:
                    return
            elif any(s.error for s in self.src.all()):
                return  # no data, an error to show: the header says it now
            await asyncio.sleep(0.05)

    async def publish_now(self) -> Snapshot | None:
        """Build and publish a snapshot at once (tests, replays of a fixed moment)."""
        if not self.has_data:
            return None
        self._dirty.clear()
        snap = await self.snapshot_async()
        self._publish(snap)
        return snap

    # ---------------------------------------------------------- loops

    async def _loop(self, fn: Callable, interval: Callable[[], float], st: SourceState | None) -> None:
        while True:
            if self.paused:
                await asyncio.sleep(0.2)
                continue
            await self._guarded(fn, st)
            wait = interval()
            if st is not None and st.backoff_s:
                wait = max(wait, st.backoff_s)
            await asyncio.sleep(max(0.05, wait))

    async def _guarded(self, fn: Callable, st: SourceState | None) -> None:
        """One poll. An exception (a bug, not a dashboard failure: those are values) becomes a problem in the
        header — the source's own, or the engine's for helpers without one — and is logged, instead of a loop
        that silently stops. It clears when that poll next succeeds."""
        what = fn.__name__.removeprefix("_poll_").removeprefix("_").replace("_", " ")
        try:
            await fn()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.error("%s failed", fn.__name__, exc_info=True)
            p = Problem("internal", f"{what} poll failed: {e.__class__.__name__}: {one_line(e, 160)}",
                        "a verltop bug: the traceback is in verltop's log")
            if st is not None:
                st.error = p
                st.backoff_s = backoff(st.backoff_s)
            else:
                self._internal[what] = p
                self.src.engine.error = next(iter(self._internal.values()))
            self._dirty.set()
        else:
            if st is None and self._internal.pop(what, None) is not None:
                self.src.engine.error = next(iter(self._internal.values()), None)
                self._dirty.set()

    # ---------------------------------------------------------- one-shot

    async def poll_once(self, seed: bool = True, node_details: bool = True, cpu_window_s: float = 0.0,
                        ras: bool = False, remote_processes: bool = False) -> None:
        """Every source once, concurrently (``verltop snapshot``; ``dump`` skips the per-worker CPU/RSS of
        ``node_details``, which it does not show). With ``cpu_window_s``, local processes are sampled twice
        that far apart, so CPU % measures something. With ``ras``, NCCL RAS is asked too when a local rank
        can run NCCL (a one-shot command has no earlier snapshot to tell whether something looks stalled).
        ``remote_processes``: the process trees of every other node with actors too, through a probe
        (imports ray)."""
        # the actors and nodes first: the task reads are joined with them (a task of an actor not yet known
        # has no role and makes no step), and what follows needs them; then everything else at once (in
        # series, those round trips were a third of a snapshot's time)
        await asyncio.gather(self._poll_actors(), self._poll_nodes())
        t0 = time.monotonic()
        jobs = [self._poll_tasks(), self._poll_pending(force=True), self._poll_waiting(),
                self._local_and_details(node_details, cpu_window_s)]
        if seed:  # a snapshot (not a dump): the finished calls that give usual durations, verl's logged metrics
            jobs += [self._seed_history(), self._guarded(self._poll_training, None)]
        if ras and self.use_local:
            jobs.append(self._read_ras())
        remote: list[str] = []
        if remote_processes:
            local = self.local_node_ids()
            remote = sorted({a.node_id for a in self._actors_on(self._known_nodes()) if a.node_id and
                             a.node_id not in local})
            self.remote.ask(remote)
            jobs.append(self._read_trees(remote))
        jobs.append(self._guarded(self._poll_rollout, None))  # its own /metrics (other nodes: those asked about)
        await asyncio.gather(*jobs)
        if cpu_window_s > 0 and (self.src.local.value is not None or self.remote.trees):
            await asyncio.sleep(max(0.0, cpu_window_s - (time.monotonic() - t0)))
            if self.sampler is not None and self.src.local.value is not None:
                await self._poll_local(tree_now=True)
            await self._read_trees([n for n in remote if n in self.remote.trees])

    async def _local_and_details(self, node_details: bool, cpu_window_s: float) -> None:
        if node_details and cpu_window_s <= 0:  # this machine's actors take the agent's CPU % too: read at once
            await asyncio.gather(self._poll_local(), self._poll_node_details(all_nodes=True, with_local=True))
        else:
            await self._poll_local()
            if node_details:
                await self._poll_node_details(all_nodes=True)

    async def _read_ras(self) -> None:
        addrs = self.ras_addresses(self.snapshot().actors)
        if addrs:
            self.ras, self.ras_problems = await nccl_ras.read(addrs, self.iv.timeout_s)

    # ---------------------------------------------------------- individual sources

    async def poll_pending(self) -> None:
        """Pending work now, whatever the cadence (one-shot commands)."""
        await self._poll_pending(force=True)

    async def _poll_pending(self, force: bool = False) -> None:
        """Unplaced placement groups and waiting tasks: fast while something is pending, else slowly."""
        await self.pending.poll(self.src.actors.value or [], self._record, force=force)

    async def _poll_rollout(self) -> None:
        """The rollout servers' own load (each one's /metrics): on this machine, and where the probe may look."""
        node_ips = {n.node_id: n.ip for n in self.src.nodes.value or [] if n.ip}
        if await self.rollout.poll(self.src.actors.value or [], self.local_node_ids(), node_ips, self.clock()):
            self._dirty.set()

    # ---------------------------------------------------------- one-shot building blocks (engine/oneshot.py)

    async def poll_actors(self) -> None:
        await self._guarded(self._poll_actors, self.src.actors)

    async def poll_tasks(self) -> None:
        await self._guarded(self._poll_tasks, self.src.tasks)

    async def poll_local(self, procs: bool = True) -> None:
        async def local() -> None:
            await self._poll_local(procs=procs)

        await self._guarded(local, self.src.local)
