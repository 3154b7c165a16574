"""A cross-rank dump, start to end: capture every target's stacks (progress per rank, cancel), gather the
evidence that names collectives (NCCL watchdog lines, Flight Recorder files), analyse. The one pipeline that
the TUI, ``verltop dump`` and (later) ``watch`` share.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from verltop.analysis.dump import analyse, analyse_rank
from verltop.analysis.flight_recorder import collective_info, match
from verltop.convert import one_line
from verltop.engine import nccl_ras
from verltop.model import (
    ActorRow,
    CollectiveInfo,
    DumpReport,
    FrRank,
    Problem,
    ProcessDump,
    RankDump,
    RasReport,
)
from verltop.sources import flight_recorder as fr
from verltop.sources.http import DashboardClient
from verltop.sources.pyspy import DumpOptions
from verltop.sources.stacks import StackCapture
from verltop.sources.watchdog import fetch_watchdog

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
                 clock: Callable[[], float] = time.time, ras_addrs: list[tuple[str, int]] | None = None) -> None:
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
        self.samples: dict[str, list[ProcessDump]] = {}
        self.collectives: dict[str, CollectiveInfo] = {}
        self.notes: tuple[str, ...] = ()
        self.report: DumpReport | None = None
        self.problem: Problem | None = None
        self.stage = "new"
        self.started = time.perf_counter()
        self.first_rank_s: float | None = None
        self.elapsed_s: float | None = None

    @property
    def live(self) -> int:
        return sum(1 for a in self.targets if a.state == "ALIVE")

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
        got: dict[str, list[ProcessDump]] = {}
        self.samples = got

        def progress(a: ActorRow, d: ProcessDump, done: int, n: int) -> None:
            got.setdefault(a.actor_id, []).append(d)
            if self.first_rank_s is None:
                self.first_rank_s = time.perf_counter() - self.started
            self._emit("stacks", done, analyse_rank(a, got[a.actor_id]))

        self._emit("stacks")
        # RAS first: it answers in a millisecond, and what it says is the state the stacks are taken in
        self.ras, ras_problems = await nccl_ras.read(self.ras_addrs)
        samples = await cap.capture(self.targets, progress)
        self.samples = samples
        self._emit("evidence", self.total)
        self.collectives, ev_notes = await self.evidence(samples)
        if self.refresh_rows is not None:  # role names learnt while the stacks were taken
            fresh = await self.refresh_rows()
            self.targets = [fresh.get(a.actor_id, a) for a in self.targets]
        if self.ras is None:  # asked where ranks said it listens, and nobody answered
            ev_notes += [p.text for p in ras_problems if any(a.ras_addr for a in self.targets)]
        self.notes = tuple(dict.fromkeys((*cap.notes, *ev_notes)))
        self.report = analyse(self.targets, samples, self.clock(), self.collectives, native=self.opts.native,
                              notes=self.notes, ras=self.ras)
        self.elapsed_s = time.perf_counter() - self.started
        self._emit("done", self.total)
        return self.report

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
        self.report = analyse(self.targets, self.samples, self.clock(), self.collectives, native=self.opts.native,
                              notes=self.notes, ras=self.ras)
        return self.report, notes


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
