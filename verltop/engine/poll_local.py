"""This machine: its Ray workers' CPU and memory, process trees and GPUs; NCCL RAS while a rank looks stalled."""

from __future__ import annotations

import asyncio
import logging
import time

from verltop.convert import one_line
from verltop.engine import nccl_ras
from verltop.engine.polling import PollState
from verltop.model import ActorRow, Problem
from verltop.sources import dashboard as D
from verltop.sources.hostmem import host_memory
from verltop.sources.local import LocalSample

log = logging.getLogger("verltop.engine")


class LocalPolls(PollState):
    """This machine's sampler and NCCL RAS."""

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

    async def _poll_local(self, tree_now: bool = False, procs: bool = True) -> None:
        """This machine's Ray workers (CPU, RSS), their process trees and the GPUs; ``procs=False``: no CPU %
        or RSS (a dump shows none, and skips psutil's import)."""
        if self.sampler is None or not (procs or self.sampler.use_nvml):
            return  # nothing a dump would use
        here = self._actors_on(self.candidate_local_ids())
        pids = {a.pid for a in here if a.pid}
        try:
            s, host = await asyncio.to_thread(self._sample, pids, tree_now, procs)
        except Exception as e:
            log.error("local sampling failed", exc_info=True)
            self._record(self.src.local, D.Result(None, Problem("internal", f"local sampling failed: {one_line(e)}"),
                                                  time.time()))
            return
        self._record(self.src.local, D.Result(s, None, s.taken_at))
        await self._hist_ready()
        self._note_gpu_use(s)
        if procs:
            self._book_memory(s, host)

    def _sample(self, pids: set[int], tree_now: bool, procs: bool) -> tuple[LocalSample, tuple[int, int, str] | None]:
        s = self.sampler.sample(pids, tree_now, procs)  # type: ignore[union-attr]
        return s, (host_memory() if procs else None)

    def _book_memory(self, s: LocalSample, host: tuple[int, int, str] | None) -> None:
        """Each local actor's memory under the phase it runs (or the job's): every local sample."""
        local = self.local_node_ids()
        try:
            self.memory.feed_local(s, self._actors_on(local), self.src.tasks.value, self._actor_map(), host)
        except Exception:  # book-keeping must not stop the sampler
            log.error("memory book-keeping failed", exc_info=True)

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
