"""The live engine: one ``Monitor`` owns time. Each source polls on its own interval, never overlapping
itself, keeping its last good data, its age and its last problem; a publisher joins them into a
``Snapshot`` (the pure analysis runs in a thread) at most once per poll interval, and only when something
changed; views subscribe. Dumps and log tails are asked of it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from verltop.analysis import roles as R
from verltop.analysis.dump import dump_targets
from verltop.analysis.history import TaskHistory
from verltop.analysis.stalls import StallSettings
from verltop.analysis.view import ClusterData, build_snapshot, group_key, running_task_rows
from verltop.convert import one_line
from verltop.engine import nccl_ras
from verltop.engine.base import Engine
from verltop.engine.doctor import DoctorJob
from verltop.engine.doctor import ProgressFn as DoctorProgressFn
from verltop.engine.dumps import DumpJob, DumpProgress, ProgressFn
from verltop.engine.pending import PendingWatch
from verltop.engine.timeline import Timeline, TrendStore, Work
from verltop.engine.trees import RemoteTrees
from verltop.model import (
    ActorRow,
    Node,
    Problem,
    ProcStat,
    RasReport,
    RawActor,
    RawTask,
    Snapshot,
    SourceStatus,
)
from verltop.sources import dashboard as D
from verltop.sources.config import Endpoint
from verltop.sources.http import DashboardClient
from verltop.sources.local import LocalSample, LocalSampler, is_actor_process, local_addresses, this_fqdn
from verltop.sources.pyspy import DumpOptions

log = logging.getLogger("verltop.engine")

DETAIL_REFRESH_S = 30.0  # detail rows are re-read at least this often
ROLES_EVERY_S = 15.0  # how often groups whose roles are unknown are looked up
FIRST_FRAME_GRACE_S = 1.0  # the first snapshot waits this long at most for sources slower than the actors


@dataclass(frozen=True, slots=True)
class Intervals:
    actors_s: float = 2.0
    tasks_s: float = 2.0
    # The dashboard's node agents report every 5 s (REPORTER_UPDATE_INTERVAL_MS): nodes whose actors are
    # on screen are read every 5 s (/nodes/{id}: GPUs and per-worker CPU/RSS, ~0.1 MB); the all-node
    # summary (2.4 MB on 128 nodes) only feeds the header totals and rows off screen, every 15 s.
    nodes_s: float = 15.0
    node_detail_s: float = 5.0
    local_s: float = 1.0
    timeout_s: float = 10.0
    max_node_details: int = 8  # remote /nodes/{id} calls per cycle
    waiting_s: float = 5.0  # tasks waiting to run (per group, with retries)
    # process trees of other nodes (through a probe): only nodes asked about, while on screen
    trees_s: float = 10.0

    @classmethod
    def every(cls, interval_s: float, timeout_s: float = 10.0) -> Intervals:
        """Intervals for a user's ``--interval`` (node reads never faster than the agents report)."""
        return cls(actors_s=interval_s, tasks_s=interval_s, nodes_s=max(interval_s, 15.0),
                   node_detail_s=max(interval_s, 5.0), timeout_s=timeout_s)


@dataclass(slots=True)
class SourceState:
    name: str
    interval_s: float = 2.0
    value: Any = None
    ok_at: float | None = None
    error: Problem | None = None
    tries: int = 0
    backoff_s: float = 0.0

    def status(self, now: float) -> SourceStatus:
        return SourceStatus(self.name, None if self.ok_at is None else max(0.0, now - self.ok_at), self.error,
                            stale_after_s=2 * self.interval_s + 3.0)


@dataclass(slots=True)
class _Sources:
    actors: SourceState = field(default_factory=lambda: SourceState("actors"))
    tasks: SourceState = field(default_factory=lambda: SourceState("tasks"))
    nodes: SourceState = field(default_factory=lambda: SourceState("nodes"))
    local: SourceState = field(default_factory=lambda: SourceState("local"))
    engine: SourceState = field(default_factory=lambda: SourceState("engine"))  # verltop's own helper polls

    def all(self) -> list[SourceState]:
        return [self.actors, self.tasks, self.nodes, self.local, self.engine]


class Monitor(Engine):
    """Polls the dashboard and this machine and publishes snapshots of the joined view."""

    def __init__(
        self,
        endpoint: Endpoint,
        intervals: Intervals | None = None,
        stall: StallSettings | None = None,
        use_local: bool = True,
        use_nvml: bool = True,
        transport: str = "aiohttp",
        clock: Callable[[], float] = time.time,
        ras_addrs: tuple[str, ...] = (),
        timeline: bool = True,
    ) -> None:
        super().__init__(clock)
        self.endpoint = endpoint
        self.address = endpoint.address
        self.iv = intervals or Intervals()
        self.stall = stall or StallSettings()
        self.client = DashboardClient(endpoint, transport=transport)
        self.hist = TaskHistory()
        self.src = _Sources()
        for st, iv in ((self.src.actors, self.iv.actors_s), (self.src.tasks, self.iv.tasks_s),
                       (self.src.nodes, self.iv.nodes_s), (self.src.local, self.iv.local_s)):
            st.interval_s = iv
        self.node_details: dict[str, Node] = {}
        self.pending = PendingWatch(self.client, SourceState("pending", interval_s=max(self.iv.nodes_s, 15.0)),
                                    self.iv.timeout_s)
        self.use_local = use_local
        self.sampler = LocalSampler(use_nvml=use_nvml) if use_local else None
        self._local_addrs = local_addresses(fqdn=False) if use_local else set()
        self._tasks: list[asyncio.Task] = []
        self.remote = RemoteTrees(interval_s=self.iv.trees_s)
        self._detail_cursor = 0
        self.truncated: str | None = None
        self.seeded = False
        self._actor_cache: dict[str, RawActor] = {}
        self._actor_detail_at: float | None = None
        self._task_starts: dict[str, float] = {}
        self._task_objs: dict[str, RawTask] = {}
        self._task_detail_at: float | None = None
        self._last_task_poll: float | None = None
        self._focus: dict[str, None] = {}  # node ids on screen, top first
        self._internal: dict[str, Problem] = {}  # helper polls that failed with a bug, until they succeed
        self._hist_free = asyncio.Event()
        self._hist_free.set()
        self._dirty = asyncio.Event()  # a poll brought something new
        self._dirty.set()
        self._last_build = 0.0
        self.snapshots_built = 0
        self.last_build_ms = 0.0
        self.ras_addrs = ras_addrs  # NCCL RAS addresses given by the user (else from the ranks' runtime env)
        self.ras: RasReport | None = None
        self.ras_problems: list[Problem] = []
        self.timeline = Timeline(self.client, self.iv.timeout_s, enabled=timeline)
        self.trends = TrendStore()
        self.work = Work()
        self.waiting: list[RawTask] = []  # tasks submitted and not running (per-group counts)

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
            (self._poll_trees, lambda: min(2.0, self.iv.trees_s), None),
            (self._poll_pending, lambda: self.iv.actors_s, self.pending.state),  # it decides when to read
        ]
        if self.use_local:
            loop_specs.append((self._poll_local, lambda: self.iv.local_s, self.src.local))
            loop_specs.append((self._poll_ras, lambda: self.iv.tasks_s, None))
        for fn, iv, st in loop_specs:
            self._tasks.append(asyncio.create_task(self._loop(fn, iv, st), name=f"verltop-{fn.__name__}"))
        self._tasks.append(asyncio.create_task(self._seed_with_retries()))
        self._tasks.append(asyncio.create_task(self._publisher(), name="verltop-publisher"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        await self.timeline.stop()
        await self.remote.close()
        await self.client.close()
        if self.sampler and self.sampler.nvml_open:
            await asyncio.to_thread(self.sampler.close)

    def ras_addresses(self, actors: tuple[ActorRow, ...] | list[ActorRow], gpu_host: bool = False
                      ) -> list[tuple[str, int]]:
        return nccl_ras.addresses(actors, self.local_node_ids(), self.ras_addrs, gpu_host)

    async def _poll_ras(self) -> None:
        """NCCL RAS on this machine, only while a rank that can run NCCL looks stalled (about 0.5 ms a query:
        cheap, but nothing to learn from it while the job makes progress)."""
        snap = self.latest
        suspected = snap is not None and any(a.stalled and a.state == "ALIVE" and (a.gpu_index is not None or a.ras_addr
                                                                                   or self.ras_addrs)
                                             for a in snap.actors)
        if not suspected:
            if self.ras is not None:
                self.ras = None
                self._dirty.set()
            return
        report, self.ras_problems = await nccl_ras.read(self.ras_addresses(snap.actors), self.iv.timeout_s)
        if report != self.ras:
            self.ras = report
            self._dirty.set()

    def dump(self, snap: Snapshot, group: str | None, opts: DumpOptions,
             on_progress: ProgressFn | None = None, use_logs: bool = True,
             refresh_rows: Callable[[], Awaitable[dict[str, ActorRow]]] | None = None,
             native_ids: frozenset[str] = frozenset()) -> DumpJob:
        def progress(p: DumpProgress) -> None:
            if p.stage == "done" and p.report is not None:
                self._publish_dump(p.report, group)  # a recording keeps it
            if on_progress is not None:
                on_progress(p)

        return DumpJob(self.client, self.local_node_ids(), dump_targets(snap.actors, group), opts, progress,
                       use_logs=use_logs, refresh_rows=refresh_rows, clock=self.clock, nodes=snap.nodes,
                       drivers=group is None, ras_addrs=self.ras_addresses(snap.actors) if self.use_local else [],
                       pending=snap.pending, native_ids=native_ids)

    def doctor(self, path: str | None = None, node_timeout_s: float = 30.0,
               on_progress: DoctorProgressFn | None = None) -> DoctorJob:
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
                st.backoff_s = min(10.0, max(2.0, st.backoff_s * 2 or 2.0))
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
        jobs = [self._poll_actors(), self._poll_tasks(), self._poll_nodes(), self._poll_pending(force=True),
                self._poll_waiting()]
        if seed:
            jobs.append(self._seed_history())
        await asyncio.gather(*jobs)
        t0 = time.monotonic()
        await self._poll_local()
        if node_details:
            await self._poll_node_details(all_nodes=True)
        if ras and self.use_local:
            addrs = self.ras_addresses(self.snapshot().actors)
            if addrs:
                self.ras, self.ras_problems = await nccl_ras.read(addrs, self.iv.timeout_s)
        remote: list[str] = []
        if remote_processes:
            local = self.local_node_ids()
            remote = sorted({a.node_id for a in self._actors_on(self._known_nodes()) if a.node_id and
                             a.node_id not in local})
            self.remote.ask(remote)
            await self._read_trees(remote)
        if cpu_window_s > 0 and (self.src.local.value is not None or self.remote.trees):
            await asyncio.sleep(max(0.0, cpu_window_s - (time.monotonic() - t0)))
            if self.sampler is not None and self.src.local.value is not None:
                await self._poll_local(tree_now=True)
            await self._read_trees([n for n in remote if n in self.remote.trees])

    async def seed_roles(self, group: Sequence[str] = ()) -> None:
        """Method names of finished tasks (no times): which roles idle colocated workers host. With
        ``group`` (the actor ids of one worker group, rank 0 first), one read filtered in GCS by its first
        actor, whose methods the whole group runs; else every actor's finished tasks (a slower read)."""
        r = await D.fetch_finished_tasks(self.client, timeout_s=self.iv.timeout_s, detail=False,
                                         actor_id=group[0] if group else None)
        if not r.ok or not r.value:
            return
        await self._hist_ready()
        for t in r.value:
            method = R.method_of(t.func_name) or t.name
            if not t.actor_id or method == "__init__":
                continue
            for aid in group or (t.actor_id,):
                self.hist.remember_method(aid, method)

    async def _poll_roles(self) -> None:
        """Which roles a colocated group hosts is learnt from the methods its ranks run; a short method (an RM
        scoring a batch in a second) can start and finish between two polls and never be seen running. For
        groups whose methods are still unknown, ask Ray for one rank's finished tasks (a GCS-side filter: a
        small read), a few groups per cycle."""
        by_group: dict[str, list[RawActor]] = {}
        for a in self.src.actors.value or []:
            ident = R.identity(a)
            if a.state == "ALIVE" and ident.base_role == "colocated":
                by_group.setdefault(group_key(ident, a.class_name), []).append(a)
        unknown = [ms[0] for ms in by_group.values() if not any(self.hist.methods_by_actor.get(m.actor_id) for m in ms)]
        for a in unknown[:4]:
            r = await D.fetch_finished_tasks(self.client, limit=200, timeout_s=self.iv.timeout_s, detail=False,
                                             actor_id=a.actor_id)
            methods = [R.method_of(t.func_name) or t.name for t in (r.value or []) if r.ok]
            methods = [m for m in methods if m != "__init__"]
            if methods:
                await self._hist_ready()
                for m in methods:
                    self.hist.remember_method(a.actor_id, m)
                self._dirty.set()

    async def _seed_with_retries(self, tries: int = 3, pause_s: float = 20.0) -> None:
        """The seed, again if the dashboard did not answer it (it is the one read of finished tasks that
        names every method the job runs: stall medians and the step timeline start from it)."""
        for i in range(tries):
            await self._guarded(self._seed_history, self.src.tasks)
            if self.seeded:
                return
            if i + 1 < tries:
                await asyncio.sleep(pause_s)

    async def _seed_history(self) -> None:
        r = await D.fetch_finished_runs(self.client, limit=2000, timeout_s=15.0)
        if not r.ok or not r.value or not r.value[0]:
            return
        seed, total = r.value
        r = replace(r, value=seed)
        # wait for the actor list so methods can be keyed by worker group
        for _ in range(50):
            if self.src.actors.value is not None or self.src.actors.error:
                break
            await asyncio.sleep(0.02)
        actors = {a.actor_id: a for a in (self.src.actors.value or [])}
        rows = []
        for t in r.value:
            if not (t.start_time_ms and t.end_time_ms and t.actor_id in actors):
                continue
            a = actors[t.actor_id]
            method = R.method_of(t.func_name) or t.name
            if method == "__init__":
                continue
            rows.append((t.actor_id, group_key(R.identity(a), a.class_name), method,
                         t.start_time_ms / 1000, t.end_time_ms / 1000))
        await self._hist_ready()
        self.hist.seed(rows)
        self.timeline.add_finished(r.value, actors)
        self.timeline.tracker.estimate_rows((t.name for t in r.value), total)
        if total is not None and total <= len(seed):  # the whole history: no call of its methods is unseen
            self.timeline.tracker.new_names.clear()
        self.work.note(r.value, actors)
        self.seeded = True
        self._dirty.set()

    # ---------------------------------------------------------- individual sources

    async def poll_pending(self) -> None:
        """Pending work now, whatever the cadence (one-shot commands)."""
        await self._poll_pending(force=True)

    async def _poll_pending(self, force: bool = False) -> None:
        """Unplaced placement groups and waiting tasks: fast while something is pending, else slowly."""
        await self.pending.poll(self.src.actors.value or [], self._record, force=force)

    def _record(self, st: SourceState, r: D.Result) -> bool:
        st.tries += 1
        if not r.unchanged or st.error is not None:
            self._dirty.set()
        if r.ok:
            st.value = r.value
            st.ok_at = r.taken_at
            st.error = None
            st.backoff_s = 0.0
            return True
        st.error = r.error
        if r.retry_after_s:
            st.backoff_s = r.retry_after_s
        else:
            # a dashboard that is down is retried at a calm pace, not hammered
            st.backoff_s = min(10.0, max(2.0, st.backoff_s * 2 or 2.0))
        return False

    async def _poll_actors(self) -> None:
        """Base columns every cycle; the heavier detail rows (rank env, death cause) when an actor is new,
        changed state, or every ``DETAIL_REFRESH_S``."""
        now = time.time()
        detail = self._actor_detail_at is None or now - self._actor_detail_at > DETAIL_REFRESH_S
        if not detail:
            basic = await D.fetch_actor_states(self.client, self.iv.timeout_s)
            if not basic.ok:
                self._record(self.src.actors, basic)
                return
            cache = self._actor_cache
            rows = basic.value or []
            # a new pid means a restart: the detail rows carry the restart count
            if any(aid not in cache or cache[aid].state != st or (pid and cache[aid].pid != pid)
                   for aid, st, pid, _ in rows):
                detail = True
            elif basic.unchanged and self.src.actors.value is not None:
                self._record(self.src.actors, replace(basic, value=self.src.actors.value))
                return
            else:
                # unchanged actors keep their (detail) objects: cheaper, and caches keyed on them stay warm
                r = replace(basic, value=[_same_or_updated(cache[aid], pid, node) for aid, _, pid, node in rows])
        if detail:
            r = await D.fetch_actors(self.client, self.iv.timeout_s, detail=True)
        if self._record(self.src.actors, r):
            if detail:
                self._actor_cache = {a.actor_id: a for a in r.value or []}
                self._actor_detail_at = r.taken_at
            self.truncated = r.truncated
            await self._hist_ready()
            self.hist.forget_actors({a.actor_id for a in r.value or []})

    async def _poll_tasks(self) -> None:
        """Running tasks. Start times need the detail rows (3x the bytes): they are read when unknown tasks
        appear and at most every ``DETAIL_REFRESH_S / 3``; until then a new task's start is estimated as
        the middle of the poll interval it appeared in."""
        now = time.time()
        starts = self._task_starts
        since = now - (self._task_detail_at or 0)
        r = await D.fetch_running_tasks(self.client, self.iv.timeout_s, detail=self._task_detail_at is None)
        detailed = self._task_detail_at is None
        if r.ok and not detailed:
            unknown = [t for t in r.value or [] if t.task_id not in starts]
            if unknown and since > DETAIL_REFRESH_S / 3:
                r = await D.fetch_running_tasks(self.client, self.iv.timeout_s, detail=True)
                detailed = True
        if not self._record(self.src.tasks, r):
            return
        if r.unchanged and not detailed:
            self.src.tasks.value = list(self._task_objs.values())
            self._last_task_poll = r.taken_at
            await self._hist_ready()
            self.timeline.tracker.polled(r.taken_at)  # nothing started or ended up to now
            self.timeline.maybe_refine(self._actor_map, self._hist_ready)  # a step stuck this long?
            return
        rows = r.value or []
        if detailed:
            self._task_detail_at = r.taken_at
            starts.clear()
            starts.update({t.task_id: t.start_time_ms for t in rows if t.start_time_ms})
        prev = self._last_task_poll or r.taken_at
        guess = (prev + r.taken_at) / 2 * 1000
        fixed = []
        objs = self._task_objs
        for t in rows:
            if t.start_time_ms is None:
                if t.task_id not in starts:
                    starts[t.task_id] = guess
                old = objs.get(t.task_id)
                # the same task as last poll keeps its object (no copy per task per poll)
                if old is not None and old.worker_pid == t.worker_pid and old.start_time_ms == starts[t.task_id]:
                    t = old
                else:
                    t = replace(t, start_time_ms=starts[t.task_id])
            fixed.append(t)
        live = {t.task_id for t in rows}
        for k in [k for k in starts if k not in live]:
            del starts[k]
        self._task_objs = {t.task_id: t for t in fixed}
        self._last_task_poll = r.taken_at
        self.src.tasks.value = fixed
        actors = {a.actor_id: a for a in (self.src.actors.value or [])}
        await self._hist_ready()
        self.hist.observe(running_task_rows(tuple(fixed), actors), r.taken_at, complete=r.truncated is None)
        self.timeline.observe(fixed, actors, r.taken_at, complete=r.truncated is None)
        self.work.note(fixed, actors)
        self.timeline.maybe_refine(self._actor_map, self._hist_ready)

    def _actor_map(self) -> dict[str, RawActor]:
        return {a.actor_id: a for a in (self.src.actors.value or [])}

    async def _poll_waiting(self) -> None:
        """Tasks submitted and not yet running (their count per group; retries among them)."""
        r = await D.fetch_waiting_tasks(self.client, self.iv.timeout_s)
        if not r.ok:
            return  # the running-task poll reports the dashboard's problems; this one only adds detail
        if r.unchanged:
            return
        self.waiting = r.value or []
        self.work.note(self.waiting, self._actor_map())
        self._dirty.set()

    async def _poll_nodes(self) -> None:
        ident, summary = await asyncio.gather(
            D.fetch_nodes(self.client, self.iv.timeout_s), D.fetch_nodes_summary(self.client, self.iv.timeout_s)
        )
        self.take_nodes(ident, summary)

    def take_nodes(self, ident: D.Result, summary: D.Result | None) -> None:
        """The node list (``/api/v0/nodes``) with the stats of the all-node summary (``/nodes``) when it
        came: one-shot commands take the list first (which node is this machine) and the stats later."""
        if not ident.ok:
            self._record(self.src.nodes, ident)
            return
        stats = {n.node_id: n for n in (summary.value or [])} if summary is not None and summary.ok else {}
        merged = []
        for n in ident.value or []:
            s = stats.get(n.node_id)
            if s is not None:
                n = Node(node_id=n.node_id, ip=n.ip or s.ip, hostname=s.hostname or n.hostname, state=n.state,
                         is_head=n.is_head, cpu_percent=s.cpu_percent, mem_used_bytes=s.mem_used_bytes,
                         mem_total_bytes=s.mem_total_bytes, gpus=s.gpus, stats_age_s=s.stats_age_s,
                         object_store_used_bytes=s.object_store_used_bytes,
                         object_store_total_bytes=s.object_store_total_bytes,
                         object_store_spilled_bytes=s.object_store_spilled_bytes,
                         resources_total=n.resources_total)
            merged.append(n)
        self._record(self.src.nodes, D.Result(merged, None, ident.taken_at, ident.elapsed_s))
        if summary is not None and not summary.ok and summary.error is not None:
            self.src.nodes.error = summary.error.with_message(f"node stats: {summary.error.message}")

    def candidate_local_ids(self) -> frozenset[str]:
        nodes: list[Node] = self.src.nodes.value or []
        here = self._local_addrs
        return frozenset(n.node_id for n in nodes if n.ip in here or n.hostname in here
                         or (n.hostname is not None and n.hostname == this_fqdn()))

    def local_node_ids(self) -> frozenset[str]:
        """Nodes on this machine: address matches AND their actors' pids are Ray workers here (an IP or a
        hostname like "vm" can match another machine, and containers have their own pid namespace)."""
        if not self.use_local:
            return frozenset()
        cand = self.candidate_local_ids()
        ls: LocalSample | None = self.src.local.value
        if not cand or ls is None:
            return cand
        out = set()
        for nid in cand:
            pids = {a.pid for a in self._actors_on({nid}) if a.pid}
            # the sample may predate these actors (nodes and actors arrive at different moments): then
            # look at a few of their pids directly
            if not pids or pids & set(ls.procs) or any(is_actor_process(p) for p in sorted(pids)[:3]):
                out.add(nid)
        return frozenset(out)

    def _actors_on(self, node_ids: frozenset[str] | set[str]) -> list[RawActor]:
        return [a for a in (self.src.actors.value or []) if a.node_id in node_ids and a.state == "ALIVE"]

    async def _poll_node_details(self, all_nodes: bool = False) -> None:
        """Per-worker CPU/RSS of remote nodes that host actors. Nodes whose rows are on screen come first;
        at most ``max_node_details`` requests per cycle (``all_nodes`` for one-shot snapshots)."""
        local = self.local_node_ids()
        known = {n.node_id for n in (self.src.nodes.value or [])} | {a.node_id or "" for a in (self.src.actors.value or [])}
        wanted = sorted({a.node_id for a in self._actors_on(known) if a.node_id and a.node_id not in local})
        if not wanted:
            return
        if all_nodes:
            pick = wanted
        else:
            wanted_set = set(wanted)
            shown = [n for n in self._focus if n in wanted_set]  # screen order, top first
            rest = [n for n in wanted if n not in self._focus]
            n = max(self.iv.max_node_details, min(32, len(shown)))
            pick = shown[:n]
            if len(pick) < n and rest:
                start = self._detail_cursor % len(rest)
                pick += (rest + rest)[start : start + n - len(pick)]
                self._detail_cursor += n - len(shown[:n])
        sem = asyncio.Semaphore(self.iv.max_node_details)

        async def one(nid: str) -> D.Result:
            async with sem:
                return await D.fetch_node_detail(self.client, nid, self.iv.timeout_s)

        results = await asyncio.gather(*(one(nid) for nid in pick))
        for nid, r in zip(pick, results, strict=True):
            if r.ok and r.value is not None:
                self.node_details[nid] = r.value
                self._dirty.set()
        for nid in [k for k in self.node_details if k not in wanted]:
            del self.node_details[nid]

    def _known_nodes(self) -> set[str]:
        return {n.node_id for n in (self.src.nodes.value or [])} | {a.node_id or "" for a in (self.src.actors.value or [])}

    async def _poll_trees(self) -> None:
        """Asked-about nodes on screen whose tree is older than ``trees_s``."""
        if self.remote.asked:
            await self._read_trees(self.remote.due(self._focus, time.time()))

    async def _read_trees(self, node_ids: list[str]) -> None:
        if node_ids and await self.remote.read_nodes(node_ids, self._actors_on(set(node_ids)), self.data().nodes):
            self._dirty.set()

    async def _poll_local(self, tree_now: bool = False, procs: bool = True) -> None:
        """This machine's Ray workers (CPU, RSS), their process trees and the GPUs; ``procs=False``: no CPU %
        or RSS (a dump shows none, and skips psutil's import)."""
        if self.sampler is None or not (procs or self.sampler.use_nvml):
            return  # nothing a dump would use
        pids = {a.pid for a in self._actors_on(self.candidate_local_ids()) if a.pid}
        try:
            s = await asyncio.to_thread(self.sampler.sample, pids, tree_now, procs)
        except Exception as e:
            log.error("local sampling failed", exc_info=True)
            self._record(self.src.local, D.Result(None, Problem("internal", f"local sampling failed: {one_line(e)}"),
                                                  time.time()))
            return
        self._record(self.src.local, D.Result(s, None, s.taken_at))
        await self._hist_ready()
        self._note_gpu_use(s)

    def _note_gpu_use(self, s: LocalSample) -> None:
        if not s.gpus:
            return
        # a child's GPU counts for its actor's task (a rollout server's engine holds the GPU)
        root_of: dict[int, int] = {}
        if s.tree is not None:
            roots = set(s.tree.roots)
            for p in s.tree.procs:
                if p.ppid is not None:
                    root_of[p.pid] = p.ppid if p.ppid in roots else root_of.get(p.ppid, p.ppid)
        util_by_pid: dict[int, float | None] = {}
        for g in s.gpus:
            for pid, _, _ in g.processes:
                util_by_pid[root_of.get(pid, pid)] = g.util_percent
        for t in self.src.tasks.value or []:
            if t.worker_pid in util_by_pid:
                self.hist.note_gpu(t.task_id, util_by_pid[t.worker_pid])

    # ---------------------------------------------------------- one-shot building blocks (engine/oneshot.py)

    async def poll_actors(self) -> None:
        await self._guarded(self._poll_actors, self.src.actors)

    async def poll_tasks(self) -> None:
        await self._guarded(self._poll_tasks, self.src.tasks)

    async def poll_local(self, procs: bool = True) -> None:
        async def local() -> None:
            await self._poll_local(procs=procs)

        await self._guarded(local, self.src.local)

    # ---------------------------------------------------------- the joined view

    def data(self, now: float | None = None) -> ClusterData:
        now = self.clock() if now is None else now
        nodes: list[Node] = list(self.src.nodes.value or [])
        if self.node_details:
            nodes = [_with_detail(n, self.node_details[n.node_id]) if n.node_id in self.node_details else n
                     for n in nodes]
        ls: LocalSample | None = self.src.local.value
        procs: dict[int, ProcStat] = ls.procs if ls else {}
        statuses = [s.status(now) for s in self.src.all()
                    if (s is not self.src.local or self.use_local) and (s is not self.src.engine or s.error)]
        if self.remote.asked:  # no age: a node off screen is not re-read, and that is not staleness
            statuses.append(SourceStatus("processes", None, self.remote.error))
        # pending work's own line only when the actors' read is fine (else it repeats the same problem)
        if not self.pending.unsupported and self.src.actors.error is None:
            statuses.append(self.pending.state.status(now))
        return ClusterData(
            address=self.endpoint.address,
            actors=tuple(self.src.actors.value or ()),
            tasks=tuple(self.src.tasks.value or ()),
            nodes=tuple(nodes),
            local_node_ids=self.local_node_ids(),
            local_procs=procs,
            local_gpus=ls.gpus if ls else None,
            local_gpu_error=ls.gpu_error if ls else None,
            sources=tuple(statuses),
            truncated=self.truncated,
            ras=self.ras,
            local_tree=ls.tree if ls else None,
            remote_trees=tuple(self.remote.trees.values()),
            pending=self.pending.data(),
        )

    async def snapshot_async(self, now: float | None = None) -> Snapshot:
        """``snapshot`` with the analysis in a worker thread; polls that would change the history wait
        for it (``_hist_ready``), so the thread never reads a history being written."""
        now = now if now is not None else self.clock()
        data = self.data(now)
        self._hist_free.clear()
        try:
            return await asyncio.to_thread(self._build, data, now)
        finally:
            self._hist_free.set()

    def _build(self, data: ClusterData, now: float) -> Snapshot:
        """The joined view, with the step timeline, the trends' marks and the pending work."""
        snap = build_snapshot(data, self.hist, now, self.stall)
        self.trends.record(snap.actors, now)
        actors = {a.actor_id: a for a in data.actors}
        return replace(snap, steps=self.timeline.steps(now, snap.actors),
                       work=self.work.summary(self.waiting, actors, snap.actors))

    def trend(self, actor_id: str, now: float | None = None) -> Any:
        """The actor's trend rings (``analysis.trends.Trend``), or None."""
        return self.trends.trend(actor_id, self.clock() if now is None else now)

    async def _hist_ready(self) -> None:
        await self._hist_free.wait()

    def snapshot(self, now: float | None = None) -> Snapshot:
        now = now if now is not None else self.clock()
        return self._build(self.data(now), now)

    def rows_by_id(self, now: float | None = None) -> dict[str, ActorRow]:
        """The current rows (fresh role names included), for a dump that learnt them while it ran."""
        return {a.actor_id: a for a in self.snapshot(now).actors}


def _same_or_updated(cached: RawActor, pid: int | None, node_id: str | None) -> RawActor:
    if cached.pid == pid and cached.node_id == node_id:
        return cached
    return replace(cached, pid=pid, node_id=node_id)


def _with_detail(n: Node, d: Node) -> Node:
    """A node's identity with the stats of its (fresher) /nodes/{id} read."""
    return replace(n, cpu_percent=d.cpu_percent if d.cpu_percent is not None else n.cpu_percent,
                   mem_used_bytes=d.mem_used_bytes or n.mem_used_bytes, mem_total_bytes=d.mem_total_bytes or n.mem_total_bytes,
                   gpus=d.gpus or n.gpus, stats_age_s=d.stats_age_s, procs=d.procs,
                   object_store_used_bytes=_first(d.object_store_used_bytes, n.object_store_used_bytes),
                   object_store_total_bytes=_first(d.object_store_total_bytes, n.object_store_total_bytes),
                   object_store_spilled_bytes=_first(d.object_store_spilled_bytes, n.object_store_spilled_bytes))


def _first(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b
