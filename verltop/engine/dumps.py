"""A cross-rank dump, start to end: capture every target's stacks (progress per rank, cancel), gather the
evidence that names collectives (NCCL watchdog lines, Flight Recorder files), analyse. The one pipeline that
the TUI, ``verltop dump`` and (later) ``watch`` share.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from verltop.analysis.deaths import classify
from verltop.analysis.dump import analyse, analyse_child, analyse_rank, child_key
from verltop.analysis.flight_recorder import collective_info, match
from verltop.analysis.sticky import carry
from verltop.convert import one_line
from verltop.engine import nccl_ras
from verltop.engine.prefetch import JOBS_TIMEOUT_S, WAIT_GRAPH_TIMEOUT_S
from verltop.model import (
    ActorRow,
    ChildProc,
    CollectiveInfo,
    Death,
    DumpReport,
    FrRank,
    Node,
    PendingItem,
    Problem,
    ProcessDump,
    RankDump,
    RasReport,
    RawObjectRef,
    RawTask,
)
from verltop.model.memory import OomVerdict
from verltop.sources import flight_recorder as fr
from verltop.sources.dashboard import (
    fetch_failed_tasks,
    fetch_jobs,
    fetch_log_tail,
    fetch_pending_refs,
    fetch_running_tasks,
)
from verltop.sources.http import DashboardClient
from verltop.sources.local import process_title
from verltop.sources.pyspy import DumpOptions
from verltop.sources.stacks import StackCapture, Target
from verltop.sources.watchdog import TAIL_LINES, fetch_watchdog, parse_watchdog
from verltop.text.ras import ras_notes

log = logging.getLogger("verltop.dump")

MAX_LOGS = 256  # log tails per dump; beyond that the stacks alone have to do


@dataclass(frozen=True, slots=True)
class DumpProgress:
    """Where a dump stands. ``rank`` is the rank whose sample just arrived, analysed on its own."""

    stage: str  # "stacks" | "evidence" | "done" | "failed" | "cancelled"
    done: int  # stacks read
    total: int  # stacks to read (live targets × samples)
    ranks_seen: int
    ranks_live: int
    rank: RankDump | None = None
    report: DumpReport | None = None
    problem: Problem | None = None


ProgressFn = Callable[[DumpProgress], None]


class DumpJob:
    """One dump of ``targets``. ``await run()`` returns the report, or ``None`` when it failed (``problem``
    says why) — it never raises but for cancellation, which kills every py-spy it started."""

    def __init__(self, client: DashboardClient | None, local_node_ids: frozenset[str], targets: list[ActorRow],
                 opts: DumpOptions, on_progress: ProgressFn | None = None, use_logs: bool = True,
                 refresh_rows: Callable[[], Awaitable[dict[str, ActorRow]]] | None = None, probe_address: str = "auto",
                 clock: Callable[[], float] = time.time, nodes: tuple[Node, ...] = (),
                 processes: bool = True, drivers: bool = True, ras_addrs: list[tuple[str, int]] | None = None,
                 pending: tuple[PendingItem, ...] = (), native_ids: frozenset[str] = frozenset(),
                 previous: DumpReport | None = None, ooms: tuple[OomVerdict, ...] = ()) -> None:
        self.client = client
        self.local_node_ids = local_node_ids
        self.targets = targets
        self.opts = opts
        self.on_progress = on_progress
        self.use_logs = use_logs
        self.refresh_rows = refresh_rows
        self.probe_address = probe_address
        self.clock = clock
        self.ras_addrs = ras_addrs or []
        self.ras: RasReport | None = None
        self.pending = pending  # unplaced placement groups: where a wait on absent workers ends
        self.ooms = ooms  # the snapshot's OOM verdicts: such a rank's reason is its OOM
        self.samples: dict[str, list[ProcessDump]] = {}
        self.collectives: dict[str, CollectiveInfo] = {}
        self.notes: tuple[str, ...] = ()
        self.report: DumpReport | None = None
        self.problem: Problem | None = None
        self.stage = "new"
        self.started = time.perf_counter()
        self.first_rank_s: float | None = None
        self.elapsed_s: float | None = None
        self.nodes = nodes
        self.processes = processes  # children and drivers too (every process of the job)
        self.with_drivers = drivers  # a dump of one group or actor leaves the driver out
        self.children: list[ChildProc] = []
        self.drivers: list[ActorRow] = []
        self.deaths: dict[str, Death] = {}
        # ranks read with native frames whatever ``opts`` says (``watch``: ranks on a pegged GPU, where the
        # Python stack alone shows only the line that waits on the GPU)
        self.native_ids = native_ids if not opts.nonblocking else frozenset()
        self.native_used = opts.native
        self.tasks: list[RawTask] = []
        self.refs: list[RawObjectRef] = []
        self.probe: Any = None  # a ProbePool already joining the cluster (``oneshot``), else made when needed
        self.dashboard_profiling: bool | None = None  # known before the dump: no 403 to learn it from
        self.previous = previous  # an earlier dump of the job: its strong suspects stay while they do not change
        self.failed: list[RawTask] = []  # FAILED calls: peers whose collective gave up on a straggler
        self.ras_later = False  # RAS on other nodes left for ``remote_ras`` after the dump (``watch``)

    @property
    def waiting_jobs(self) -> set[str]:
        """Jobs whose placement groups Ray has not placed: their drivers may wait on them in ``ray.get`` (a
        job whose workers do not exist yet has nothing else to dump)."""
        if not self.with_drivers:
            return set()
        return {p.job_id for p in self.pending if p.kind == "placement_group" and p.job_id}

    @property
    def live(self) -> int:
        return sum(1 for a in self.targets if a.state == "ALIVE") + len(self.children) + len(self.drivers)

    @property
    def total(self) -> int:
        return self.live * max(1, self.opts.samples)

    def _emit(self, stage: str, done: int = 0, rank: RankDump | None = None) -> None:
        self.stage = stage
        if self.on_progress is not None:
            self.on_progress(DumpProgress(stage, done, self.total, len(self.samples), self.live, rank, self.report,
                                          self.problem))

    async def run(self) -> DumpReport | None:
        self.started = time.perf_counter()
        try:
            return await self._run()
        except asyncio.CancelledError:
            self.stage = "cancelled"
            raise
        except Exception as e:
            log.error("dump failed", exc_info=True)
            self.problem = Problem("internal", f"the dump failed: {e.__class__.__name__}: {one_line(e, 200)}")
            self._emit("failed")
            return None

    async def _run(self) -> DumpReport:
        cap = StackCapture(self.client, self.local_node_ids, self.opts, self.probe_address)
        cap.probe, cap.dashboard_profiling = self.probe, self.dashboard_profiling
        got: dict[str, list[ProcessDump]] = {}
        self.samples = got
        # the task tree and the object table are read while the stacks are taken (they cost no wait)
        graph = asyncio.create_task(self._wait_graph()) if self.processes and self.client is not None else None
        failed = asyncio.create_task(self.read_failed()) if self.client is not None else None
        try:
            procs: list[Target] = []
            if self.processes:
                self.children, self.drivers = await asyncio.gather(cap.children(self.targets), self._drivers())
                rows = {a.actor_id: a for a in self.targets}
                procs = [Target(child_key(c), replace(rows[c.actor_id], pid=c.pid), c.title) for c in self.children]
                procs += [Target(d.actor_id, d) for d in self.drivers]
            child_of = {(c.actor_id, c.pid): c for c in self.children}

            count = [0]

            def progress(a: ActorRow, d: ProcessDump, done: int, n: int) -> None:
                c = child_of.get((a.actor_id, a.pid or -1))
                key = child_key(c) if c is not None else a.actor_id
                got.setdefault(key, []).append(d)
                count[0] += 1
                if self.first_rank_s is None:
                    self.first_rank_s = time.perf_counter() - self.started
                rd = analyse_child(a, c, got[key]) if c is not None else analyse_rank(a, got[key])
                self._emit("stacks", count[0], rd)

            self._emit("stacks")
            asked_remote = False
            # RAS first: it answers in a millisecond, and what it says is the state the stacks are taken in
            self.ras, ras_problems = await nccl_ras.read(self.ras_addrs)
            native = [a for a in self.targets if a.actor_id in self.native_ids] if not self.opts.native else []
            if native:  # two captures at once: py-spy's native mode is per run
                rest = [*(a for a in self.targets if a.actor_id not in self.native_ids), *procs]
                ncap = StackCapture(self.client, self.local_node_ids, replace(self.opts, native=True),
                                    self.probe_address)
                parts = await asyncio.gather(cap.capture(rest, progress), ncap.capture(native, progress))
                samples = {**parts[0], **parts[1]}
                cap.notes += [n for n in ncap.notes if n not in cap.notes]
                self.native_used = True
            else:
                samples = await cap.capture([*self.targets, *procs], progress)
            self.samples = samples
            if self.ras is None and not self.ras_later:
                # nothing answered on this machine: RAS is job-wide, so a node of NCCL ranks can answer for all
                cap.probe, more = await self._read_remote_ras(cap.probe)
                ras_problems += more
                asked_remote = bool(more)
            self._emit("evidence", self.total)
            if self.refresh_rows is not None:
                # the rows as they are now (tasks, role names, GPU figures read while the stacks were taken);
                # a target they leave out was only a candidate, and so were its children
                fresh = await self.refresh_rows()
                self.targets = [fresh[a.actor_id] for a in self.targets if a.actor_id in fresh]
                self.children = [c for c in self.children if c.actor_id in fresh]
            (colls, ev_notes), (self.deaths, dead_colls) = await asyncio.gather(self.evidence(samples),
                                                                                 self.post_mortem())
            self.collectives = {**dead_colls, **colls}
            if graph is not None:
                self.tasks, self.refs = await graph
            if failed is not None:
                self.failed = await failed
        finally:
            for t in (graph, failed):
                if t is not None and not t.done():
                    t.cancel()
            if cap.probe is not None:  # started to list children even if no stack was taken
                await cap.probe.close()
        if self.ras is None:  # asked where ranks said it listens, and nobody answered
            ev_notes += [p.text for p in ras_problems if asked_remote or any(a.ras_addr for a in self.targets)]
        self.notes = tuple(dict.fromkeys((*cap.notes, *ev_notes)))
        self.report = self._analyse()
        self.elapsed_s = time.perf_counter() - self.started
        self._emit("done", self.total)
        return self.report

    def _analyse(self) -> DumpReport:
        notes = tuple(dict.fromkeys((*self.notes, *ras_notes(self.ras))))  # what RAS found, in words
        rep = analyse([*self.targets, *self.drivers], self.samples, self.clock(), self.collectives,
                      native=self.native_used, notes=notes, children=self.children, deaths=self.deaths,
                      tasks=self.tasks, refs=self.refs, ras=self.ras, pending=self.pending, failed=self.failed,
                      ooms=self.ooms)
        # what this dump found before (more evidence came since) or an earlier dump found, where nothing moved
        return carry(self.report or self.previous, rep)

    @property
    def ras_pending(self) -> bool:
        """A finished dump that left NCCL RAS on other nodes for later (``ras_later``) and has such nodes."""
        return (self.ras_later and self.report is not None and self.ras is None and self.opts.via in ("auto", "probe")
                and bool(nccl_ras.remote_nodes(self.targets, self.local_node_ids, self.nodes)))

    async def _read_remote_ras(self, probe: Any) -> tuple[Any, list[Problem]]:
        """NCCL RAS asked through a probe on a node of NCCL ranks (``self.ras`` when one answered): the probe
        (``probe``, else one made here) and what went wrong."""
        if self.opts.via not in ("auto", "probe"):
            return probe, []
        remote = nccl_ras.remote_nodes(self.targets, self.local_node_ids, self.nodes)
        if not remote:
            return probe, []
        if probe is None:
            from verltop.sources.probe import ProbePool  # imports ray: only here

            probe = ProbePool(self.opts, self.probe_address)
        self.ras, problems = await nccl_ras.read_remote(probe.call, remote)
        return probe, problems

    async def remote_ras(self) -> list[str]:
        """The RAS read a dump with ``ras_later`` left out (``watch``: joining the cluster for a probe can take
        ``ray.init``'s 15 s, and the incident must not wait for it), after the dump; the report analysed again
        with it. Returns what went wrong (also in the report's notes) when no node answered."""
        if not self.ras_pending:
            return []
        own = self.probe is None
        probe, problems = await self._read_remote_ras(self.probe)
        if own and probe is not None:
            await probe.close()
        notes = [p.text for p in problems] if self.ras is None else []
        self.notes = tuple(dict.fromkeys((*self.notes, *notes)))
        self.report = self._analyse()
        return notes

    async def read_failed(self) -> list[RawTask]:
        """FAILED calls of the targets (their errors say whether a collective gave up waiting)."""
        assert self.client is not None
        r = await fetch_failed_tasks(self.client, timeout_s=WAIT_GRAPH_TIMEOUT_S)
        ids = {a.actor_id for a in self.targets}
        return [t for t in r.value or [] if t.actor_id in ids] if r.ok else []

    def add_failures(self, failed: list[RawTask]) -> DumpReport | None:
        """Calls that failed after the dump (``watch``: the peers' collective timed out later), analysed with
        the stacks already taken; the new report, or None when the dump never finished."""
        known = {t.task_id for t in self.failed}
        self.failed = [*self.failed, *(t for t in failed if t.task_id not in known)]
        if self.report is None:
            return None
        self.report = self._analyse()
        return self.report

    async def _wait_graph(self) -> tuple[list[RawTask], list[RawObjectRef]]:
        """Running tasks (with their parents) and pending object references: who waits on whom."""
        assert self.client is not None
        # bounded: on a large cluster the object table asks every worker; the chains can do without it
        t, o = await asyncio.gather(fetch_running_tasks(self.client, timeout_s=WAIT_GRAPH_TIMEOUT_S, detail=False),
                                    fetch_pending_refs(self.client, timeout_s=WAIT_GRAPH_TIMEOUT_S))
        return (t.value or []) if t.ok else [], (o.value or []) if o.ok else []

    async def _drivers(self) -> list[ActorRow]:
        """The drivers of the targets' jobs that run on a reachable node, as rows with role ``driver``."""
        jobs = {a.job_id for a in self.targets if a.job_id} | self.waiting_jobs
        if not jobs or self.client is None or not self.with_drivers:
            return []
        r = await fetch_jobs(self.client, JOBS_TIMEOUT_S)
        out = []
        for j in r.value or []:
            if j.job_id not in jobs or j.driver_pid is None or (j.status and j.status != "RUNNING"):
                continue
            nodes = [n for n in self.nodes if n.ip == j.driver_ip and n.state == "ALIVE"]
            here = [n for n in nodes if n.node_id in self.local_node_ids]
            node = (here or nodes or [None])[0]
            if node is None:
                continue  # not on a node of this cluster (a Ray Client driver elsewhere): nothing can reach it
            if here:
                title = process_title(j.driver_pid)
                if title is None:
                    continue  # another pid namespace, or gone
            else:
                title = None
            out.append(ActorRow(
                actor_id=f"driver:{j.job_id}", actor_name="driver", class_name="driver", pid=j.driver_pid,
                node_id=node.node_id, node_ip=node.ip, state="ALIVE", worker_group=None, rank=None,
                world_size=None, role="driver", roles=("driver",), task=title, task_id=None, task_running_s=None,
                gpu_index=None, gpu_util_percent=None, gpu_mem_bytes=None, gpu_mem_total_bytes=None,
                cpu_percent=None, rss_bytes=None, host_mem_total_bytes=None, job_id=j.job_id))
        return out

    async def post_mortem(self) -> tuple[dict[str, Death], dict[str, CollectiveInfo]]:
        """Each DEAD target's death, from Ray's whole cause and the tail of its own stderr (read while its node
        is up: the log stays on the node after the process is gone)."""
        dead = [a for a in self.targets if a.state == "DEAD"][:MAX_LOGS]
        up = {n.node_id for n in self.nodes if n.state == "ALIVE"}
        sem = asyncio.Semaphore(16)

        colls: dict[str, CollectiveInfo] = {}

        async def one(a: ActorRow) -> tuple[str, Death]:
            log = None
            if self.use_logs and self.client is not None and (not up or a.node_id in up):
                async with sem:
                    r = await fetch_log_tail(self.client, a.actor_id, "err", TAIL_LINES, 5.0)
                log = r.value if r.ok else None
            coll = parse_watchdog(log or "")
            if coll is not None:  # what the dead rank waited in when the watchdog killed it
                colls[a.actor_id] = coll
            return a.actor_id, classify(a.death_text or a.death_cause, log, coll)

        return dict(await asyncio.gather(*(one(a) for a in dead))), colls

    async def evidence(self, samples: dict[str, list[ProcessDump]]) -> tuple[dict[str, CollectiveInfo], list[str]]:
        """What names each rank's collective: Flight Recorder dumps on this machine win over watchdog lines."""
        out: dict[str, CollectiveInfo] = {}
        if self.use_logs and self.client is not None:
            # no GPU, no NCCL: no watchdog lines to find; the controller has no NCCL group
            gpu_groups = {a.worker_group for a in self.targets if a.gpu_index is not None and a.worker_group}
            ids = [a.actor_id for a in self.targets
                   if a.state == "ALIVE" and a.role != "controller" and a.worker_group in gpu_groups][:MAX_LOGS]
            if ids:
                out.update(await fetch_watchdog(self.client, ids))
        states, notes, _ = await asyncio.to_thread(fr.read_local, self._local_ranks())
        return {**out, **fr_infos(states)}, fr_findings(self.targets, states) + notes

    def _local_ranks(self) -> list[ActorRow]:
        return [a for a in self.targets if a.node_id in self.local_node_ids and a.role != "controller"]

    async def refresh_flight_recorder(self, wait_s: float = 15.0) -> tuple[DumpReport | None, list[str]]:
        """Ask the local ranks for fresh Flight Recorder dumps (``f``), waiting up to ``wait_s`` for them, and
        analyse again with them."""
        if self.report is None:
            return None, ["the dump is not finished yet"]
        states, notes = await fr.trigger_and_read(self._local_ranks(), wait_s)
        if not states:
            return None, notes or ["no dump came back"]
        self.collectives = {**self.collectives, **fr_infos(states)}
        self.notes = tuple(dict.fromkeys((*self.notes, *fr_findings(self.targets, states), *notes)))
        self.report = self._analyse()
        return self.report, notes

    def add_evidence(self, collectives: dict[str, CollectiveInfo], notes: list[str]) -> DumpReport | None:
        """Evidence found after the dump (``watch``: the watchdog's lines come at the collective's timeout),
        analysed with the stacks already taken; the new report, or None when the dump never finished."""
        self.collectives = {**self.collectives, **collectives}
        self.notes = tuple(dict.fromkeys((*self.notes, *notes)))
        if self.report is None:
            return None
        self.report = self._analyse()
        return self.report


def fr_infos(states: dict[str, FrRank]) -> dict[str, CollectiveInfo]:
    return {aid: collective_info(s) for aid, s in states.items()}


def fr_findings(targets: list[ActorRow], states: dict[str, FrRank]) -> list[str]:
    """Cross-rank Flight Recorder findings per worker group ("ranks [1] never joined collective #5")."""
    group_of = {a.actor_id: a.worker_group for a in targets}
    by_group: dict[str | None, list[FrRank]] = {}
    for aid, s in states.items():
        by_group.setdefault(group_of.get(aid), []).append(s)
    return [f"{g}: {f}" for g, rs in by_group.items() for f in match(rs)]


__all__ = ["DumpJob", "DumpOptions", "DumpProgress"]
