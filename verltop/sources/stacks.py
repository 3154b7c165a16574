"""Capture py-spy stacks of many processes at once: local ones directly, other nodes through the dashboard's
``/worker/traceback`` or, where profiling is off there, a probe actor on each node.

Every failure is a value on the process (``ProcessDump.error``, a ``Problem`` with its fix). Nothing here runs
on a timer: only when someone asks for a dump.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from verltop.model import ActorRow, Problem, ProcessDump
from verltop.sources import pyspy
from verltop.sources.dashboard import fetch_traceback
from verltop.sources.http import DashboardClient
from verltop.sources.local import is_actor_process, process_exited
from verltop.sources.pyspy import EXITED, DumpOptions

ProgressFn = Callable[[ActorRow, ProcessDump, int, int], None]

PROFILING_OFF_NOTE = "dashboard profiling is off (RAY_DASHBOARD_ENABLE_PROFILING); using a probe actor per node"


class StackCapture:
    """Dumps a set of actors ``samples`` times, about ``interval_s`` apart, all in parallel."""

    def __init__(self, client: DashboardClient | None, local_node_ids: frozenset[str], opts: DumpOptions,
                 probe_address: str = "auto") -> None:
        self.client = client
        self.local_node_ids = local_node_ids
        self.opts = opts
        self.pyspy = pyspy.find_pyspy()
        n = opts.concurrency or max(8, 4 * (os.cpu_count() or 2))
        self._sem = asyncio.Semaphore(n)
        self._remote_sem = asyncio.Semaphore(16)
        self.dashboard_profiling: bool | None = None  # learnt from the first remote call
        self.probe = None
        self.probe_address = probe_address
        self.notes: list[str] = []

    def is_local(self, a: ActorRow) -> bool:
        if self.opts.via == "local":
            return True
        if self.opts.via in ("dashboard", "probe"):
            return False
        return a.node_id in self.local_node_ids and a.pid is not None and is_actor_process(a.pid, a.class_name)

    async def one(self, a: ActorRow) -> ProcessDump:
        pid = a.pid
        if pid is None:
            return ProcessDump(-1, error=Problem("no_pid", "actor has no pid (not started yet?)"))
        if self.opts.via == "auto" and a.node_id in self.local_node_ids and not is_actor_process(pid, a.class_name):
            # on this machine, but no longer that Ray worker: never ask a dashboard to dump whatever has
            # the pid now
            if process_exited(pid):
                return ProcessDump(pid, error=EXITED)
            return ProcessDump(pid, error=Problem("pid_reused", f"pid {pid} is no longer this actor's process "
                                                  "(it exited and the pid was reused)"))
        if self.is_local(a):
            if self.pyspy is None:
                return ProcessDump(pid, error=pyspy.no_pyspy_problem())
            if process_exited(pid):
                return ProcessDump(pid, error=EXITED)
            async with self._sem:
                return await pyspy.dump_local(pid, self.opts, self.pyspy)
        return await self._remote(a)

    async def _remote(self, a: ActorRow) -> ProcessDump:
        assert a.pid is not None
        use_dashboard = (self.opts.via in ("auto", "dashboard") and not self.opts.nonblocking
                         and self.client is not None and self.dashboard_profiling is not False)
        if use_dashboard and a.node_id:
            async with self._remote_sem:
                r = await fetch_traceback(self.client, a.pid, a.node_id, self.opts.native,  # type: ignore[arg-type]
                                          timeout_s=self.opts.per_process_timeout + 5)
            if r.ok:
                self.dashboard_profiling = True
                threads, perr = pyspy.parse_text(r.value or "")
                err = None
                if perr:
                    err = (pyspy.ptrace_problem(f" (on node {a.node_ip or '?'})") if "ermission" in (r.value or "")
                           else Problem("pyspy", perr))
                return ProcessDump(a.pid, threads=threads, error=err, native=self.opts.native, taken_at=r.taken_at,
                                   duration_s=r.elapsed_s)
            assert r.error is not None
            profiling_off = r.error.kind == "profiling_off"
            if profiling_off:
                self.dashboard_profiling = False
            if self.opts.via == "dashboard" or not profiling_off:
                return ProcessDump(a.pid, error=_remote_problem(r.error), taken_at=r.taken_at)
            self._note(PROFILING_OFF_NOTE)
        elif self.opts.via == "dashboard":
            return ProcessDump(a.pid, error=Problem("profiling_off", "dashboard profiling is off on this cluster (403)",
                                                    "start Ray with RAY_DASHBOARD_ENABLE_PROFILING=1, or use --via probe"),
                               taken_at=time.time())
        return await self._probe_dump(a)

    async def _probe_dump(self, a: ActorRow) -> ProcessDump:
        if not a.node_id:
            return ProcessDump(a.pid or -1, error=Problem("node_unknown", "actor's node is unknown"))
        if self.probe is None:
            from verltop.sources.probe import ProbePool  # imports ray: only here, only when asked

            self.probe = ProbePool(self.opts, self.probe_address)
        return await self.probe.dump(a.node_id, a.pid or -1)

    def _note(self, s: str) -> None:
        if s not in self.notes:
            self.notes.append(s)

    async def capture(self, targets: list[ActorRow], on_progress: ProgressFn | None = None
                      ) -> dict[str, list[ProcessDump]]:
        """``samples`` rounds; returns each actor's samples in order. Cancel-safe (Esc in the UI)."""
        out: dict[str, list[ProcessDump]] = {a.actor_id: [] for a in targets}
        live = [a for a in targets if a.state == "ALIVE"]
        total = len(live) * max(1, self.opts.samples)
        done = 0
        try:
            for i in range(max(1, self.opts.samples)):
                t0 = time.monotonic()

                async def run(a: ActorRow) -> tuple[ActorRow, ProcessDump]:
                    return a, await self.one(a)

                for fut in asyncio.as_completed([run(a) for a in live]):
                    a, d = await fut
                    out[a.actor_id].append(d)
                    done += 1
                    if on_progress:
                        on_progress(a, d, done, total)
                if i + 1 < self.opts.samples:
                    await asyncio.sleep(max(0.0, self.opts.interval_s - (time.monotonic() - t0)))
        finally:
            if self.probe is not None:
                await self.probe.close()
        return out


def _remote_problem(p: Problem) -> Problem:
    """The dashboard relays py-spy's failures on the other node as text: say which fix applies there."""
    if "ermission" in p.message or "Operation not permitted" in p.message:
        return pyspy.ptrace_problem(" (on that node)")
    if "not installed" in p.message:
        return pyspy.no_pyspy_problem(" (on that node)")
    return p
