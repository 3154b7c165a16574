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
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from verltop.analysis import roles as R
from verltop.analysis.dump import dump_targets
from verltop.analysis.history import TaskHistory
from verltop.analysis.stalls import StallSettings
from verltop.analysis.view import ClusterData, build_snapshot, group_key, running_task_rows
from verltop.convert import one_line
from verltop.engine.base import Engine
from verltop.engine.dumps import DumpJob, ProgressFn
from verltop.engine.timeline import Timeline, TrendStore, Work
from verltop.model import ActorRow, Node, Problem, ProcStat, RawActor, RawTask, Snapshot, SourceStatus
from verltop.sources import dashboard as D
from verltop.sources.config import Endpoint
from verltop.sources.http import DashboardClient
from verltop.sources.local import LocalSample, LocalSampler, is_actor_process, local_addresses
from verltop.sources.pyspy import DumpOptions

log = logging.getLogger("verltop.engine")

DETAIL_REFRESH_S = 30.0  # detail rows are re-read at least this often


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
    pending_s: float = 5.0  # tasks waiting to run (per group, with retries)

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

    def all(self) -> list[SourceState]:
        return [self.actors, self.tasks, self.nodes, self.local]


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
        self.use_local = use_local
        self.sampler = LocalSampler(use_nvml=use_nvml) if use_local else None
        self._local_addrs = local_addresses() if use_local else set()
        self._tasks: list[asyncio.Task] = []
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
        self._hist_free = asyncio.Event()
        self._hist_free.set()
        self._dirty = asyncio.Event()  # a poll brought something new
        self._dirty.set()
        self._last_build = 0.0
        self.snapshots_built = 0
        self.last_build_ms = 0.0
        self.timeline = Timeline(self.client, self.iv.timeout_s, enabled=timeline)
        self.trends = TrendStore()
        self.work = Work()
        self.pending: list[RawTask] = []

    # ---------------------------------------------------------- Engine

    def set_focus(self, node_ids: Iterable[str]) -> None:
        self._focus = dict.fromkeys(node_ids)

    @property
    def has_data(self) -> bool:
        return self.src.actors.ok_at is not None

    def connection_problem(self) -> Problem | None:
        for s in self.src.all():
            if s.error and s.ok_at is None and s is not self.src.local:
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
            (self._poll_pending, lambda: self.iv.pending_s, None),
        ]
        if self.use_local:
            loop_specs.append((self._poll_local, lambda: self.iv.local_s, self.src.local))
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
        await self.client.close()
        if self.sampler:
            await asyncio.to_thread(self.sampler.close)

    def dump(self, snap: Snapshot, group: str | None, opts: DumpOptions,
             on_progress: ProgressFn | None = None, use_logs: bool = True,
             refresh_rows: Callable[[], Awaitable[dict[str, ActorRow]]] | None = None) -> DumpJob:
        return DumpJob(self.client, self.local_node_ids(), dump_targets(snap.actors, group), opts, on_progress,
                       use_logs=use_logs, refresh_rows=refresh_rows, clock=self.clock)

    async def log_tail(self, actor_id: str, stream: str = "err", lines: int = 200) -> tuple[str | None, Problem | None]:
        r = await D.fetch_log_tail(self.client, actor_id, stream, lines)
        return (r.value, None) if r.ok else (None, r.error)

    # ---------------------------------------------------------- publishing

    async def _publisher(self) -> None:
        """Rebuild when a poll brought news, at most once per ``min_publish_s``; never two at once."""
        while True:
            await self._dirty.wait()
            wait = self._last_build + self.min_publish_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.paused:
                await asyncio.sleep(0.2)
                continue
            self._dirty.clear()
            self._last_build = time.monotonic()
            if not self.has_data:
                continue
            try:
                t0 = time.perf_counter()
                snap = await self.snapshot_async()
                self.last_build_ms = (time.perf_counter() - t0) * 1000
                self.snapshots_built += 1
                self._publish(snap)
            except Exception:
                log.error("building a snapshot failed", exc_info=True)

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
        """One poll. An exception (a bug, not a dashboard failure: those are values) becomes that source's
        problem in the header, and is logged, instead of a loop that silently stops."""
        try:
            await fn()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.error("%s failed", fn.__name__, exc_info=True)
            if st is not None:
                st.error = Problem("internal", f"{st.name} poll failed: {e.__class__.__name__}: {one_line(e, 160)}",
                                   "a verltop bug: see the log file")
                st.backoff_s = min(10.0, max(2.0, st.backoff_s * 2 or 2.0))
            self._dirty.set()

    # ---------------------------------------------------------- one-shot

    async def poll_once(self, seed: bool = True, node_details: bool = True, cpu_window_s: float = 0.0) -> None:
        """Every source once, concurrently (``verltop snapshot``; ``dump`` skips the per-worker CPU/RSS of
        ``node_details``, which it does not show). With ``cpu_window_s``, local processes are sampled twice
        that far apart, so CPU % measures something."""
        jobs = [self._poll_actors(), self._poll_tasks(), self._poll_nodes(), self._poll_pending()]
        if seed:
            jobs.append(self._seed_history())
        await asyncio.gather(*jobs)
        t0 = time.monotonic()
        await self._poll_local()
        if node_details:
            await self._poll_node_details(all_nodes=True)
        if cpu_window_s > 0 and self.sampler is not None and self.src.local.value is not None:
            await asyncio.sleep(max(0.0, cpu_window_s - (time.monotonic() - t0)))
            await self._poll_local()

    async def seed_roles(self) -> None:
        """Method names of finished tasks (no times): which roles idle colocated workers host."""
        r = await D.fetch_finished_tasks(self.client, timeout_s=self.iv.timeout_s, detail=False)
        if not r.ok or not r.value:
            return
        await self._hist_ready()
        for t in r.value:
            method = R.method_of(t.func_name) or t.name
            if t.actor_id and method != "__init__":
                self.hist.remember_method(t.actor_id, method)

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
            if any(aid not in cache or cache[aid].state != st for aid, st, _, _ in rows):
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

    async def _poll_pending(self) -> None:
        """Tasks submitted and not yet running (their count per group; retries among them)."""
        r = await D.fetch_pending_tasks(self.client, self.iv.timeout_s)
        if not r.ok:
            return  # the running-task poll reports the dashboard's problems; this one only adds detail
        if r.unchanged:
            return
        self.pending = r.value or []
        self.work.note(self.pending, self._actor_map())
        self._dirty.set()

    async def _poll_nodes(self) -> None:
        ident, summary = await asyncio.gather(
            D.fetch_nodes(self.client, self.iv.timeout_s), D.fetch_nodes_summary(self.client, self.iv.timeout_s)
        )
        if not ident.ok:
            self._record(self.src.nodes, ident)
            return
        stats = {n.node_id: n for n in (summary.value or [])} if summary.ok else {}
        merged = []
        for n in ident.value or []:
            s = stats.get(n.node_id)
            if s is not None:
                n = Node(node_id=n.node_id, ip=n.ip or s.ip, hostname=s.hostname or n.hostname, state=n.state,
                         is_head=n.is_head, cpu_percent=s.cpu_percent, mem_used_bytes=s.mem_used_bytes,
                         mem_total_bytes=s.mem_total_bytes, gpus=s.gpus, stats_age_s=s.stats_age_s,
                         object_store_used_bytes=s.object_store_used_bytes,
                         object_store_total_bytes=s.object_store_total_bytes,
                         object_store_spilled_bytes=s.object_store_spilled_bytes)
            merged.append(n)
        self._record(self.src.nodes, D.Result(merged, None, ident.taken_at, ident.elapsed_s))
        if not summary.ok and summary.error is not None:
            self.src.nodes.error = summary.error.with_message(f"node stats: {summary.error.message}")

    def candidate_local_ids(self) -> frozenset[str]:
        nodes: list[Node] = self.src.nodes.value or []
        return frozenset(n.node_id for n in nodes if n.ip in self._local_addrs or n.hostname in self._local_addrs)

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

    async def _poll_local(self) -> None:
        if self.sampler is None:
            return
        pids = {a.pid for a in self._actors_on(self.candidate_local_ids()) if a.pid}
        try:
            s = await asyncio.to_thread(self.sampler.sample, pids)
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
        util_by_pid: dict[int, float | None] = {}
        for g in s.gpus:
            for pid, _, _ in g.processes:
                util_by_pid[pid] = g.util_percent
        for t in self.src.tasks.value or []:
            if t.worker_pid in util_by_pid:
                self.hist.note_gpu(t.task_id, util_by_pid[t.worker_pid])

    # ---------------------------------------------------------- the joined view

    def data(self, now: float | None = None) -> ClusterData:
        now = self.clock() if now is None else now
        nodes: list[Node] = list(self.src.nodes.value or [])
        if self.node_details:
            nodes = [_with_detail(n, self.node_details[n.node_id]) if n.node_id in self.node_details else n
                     for n in nodes]
        ls: LocalSample | None = self.src.local.value
        procs: dict[int, ProcStat] = ls.procs if ls else {}
        statuses = [s.status(now) for s in self.src.all() if s is not self.src.local or self.use_local]
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
                       work=self.work.summary(self.pending, actors, snap.actors))

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
