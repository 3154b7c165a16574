"""Capture py-spy stacks of many processes at once: local ones directly, other nodes through the dashboard's
``/worker/traceback`` or, where profiling is off there, a probe actor on each node.

Every failure is a value on the process (``ProcessDump.error``, a ``Problem`` with its fix). Nothing here runs
on a timer: only when someone asks for a dump.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from verltop.model import ActorRow, ChildProc, Problem, ProcessDump
from verltop.sources import headstart, pyspy
from verltop.sources.children import MAX_PER_ACTOR, child_title, local_descendants
from verltop.sources.dashboard import fetch_traceback
from verltop.sources.http import DashboardClient
from verltop.sources.local import is_actor_process, process_exited
from verltop.sources.pyspy import EXITED, DumpOptions


@dataclass(frozen=True, slots=True)
class Target:
    """A process to dump that is not an actor's own: an actor's child (``row`` is the actor's row with the
    child's pid) or a job's driver. ``title``, when known, is checked against the pid on this machine."""

    key: str
    row: ActorRow
    title: str | None = None

ProgressFn = Callable[[ActorRow, ProcessDump, int, int], None]

# multiprocessing's helpers (one per spawning process under vLLM and SGLang): never where a job waits
_PLUMBING = headstart.PLUMBING

NODE_FAILURES = ("timeout", "node_silent", "probe")  # the node did not answer, not the process
PER_NODE = 8  # py-spy runs at once on one other node (its agent or probe runs them side by side)
MISSING_NAMED = 4  # nodes named in a line for those that gave no stack for one reason
PROFILING_OFF_NOTE = "dashboard profiling is off (RAY_DASHBOARD_ENABLE_PROFILING); using a probe actor per node"


class StackCapture:
    """Dumps a set of actors ``samples`` times, about ``interval_s`` apart, all in parallel."""

    def __init__(self, client: DashboardClient | None, local_node_ids: frozenset[str], opts: DumpOptions,
                 probe_address: str = "auto") -> None:
        self.client = client
        self.local_node_ids = local_node_ids
        self.opts = opts
        self.pyspy = pyspy.find_pyspy()
        n = opts.concurrency or max(32, 8 * (os.cpu_count() or 2))  # a node's processes at once: none waits a turn
        self._sem = asyncio.Semaphore(n)
        self._node_sems: dict[str, asyncio.Semaphore] = {}  # py-spy runs at once on one other node
        self.silent: dict[str, Problem] = {}  # other nodes given up on: not asked again in this dump
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

    async def one_process(self, t: Target) -> ProcessDump:
        """A child or a driver: on this machine it must still be the process with that title."""
        a, pid = t.row, t.row.pid
        if pid is None:
            return ProcessDump(-1, error=Problem("no_pid", "no pid"))
        if self.opts.via in ("auto", "local") and a.node_id in self.local_node_ids:
            if process_exited(pid):
                return ProcessDump(pid, error=EXITED)
            if t.title is not None and child_title(pid) != t.title:
                return ProcessDump(pid, error=Problem("pid_reused", f"pid {pid} is no longer {t.title}"))
            if self.pyspy is None:
                return ProcessDump(pid, error=pyspy.no_pyspy_problem())
            async with self._sem:
                return await pyspy.dump_local(pid, self.opts, self.pyspy)
        if self.opts.via == "local":
            return await pyspy.dump_local(pid, self.opts, self.pyspy) if self.pyspy else \
                ProcessDump(pid, error=pyspy.no_pyspy_problem())
        return await self._remote(a)

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
        """Another node's process, at most ``PER_NODE`` at once there (all nodes at once); once one of a node's
        requests timed out, its other ranks are not asked: a dead node costs one timeout, not one a rank."""
        node = a.node_id or ""
        sem = self._node_sems.setdefault(node, asyncio.Semaphore(PER_NODE))
        async with sem:
            if node in self.silent:
                return ProcessDump(a.pid or -1, error=self.silent[node], taken_at=time.time())
            d = await self._remote_once(a)
        if d.error is not None and d.error.kind == "timeout" and node not in self.silent:
            self.silent[node] = Problem("node_silent", f"node {a.node_ip or node[:8]} did not answer within "
                                        f"{self.opts.per_process_timeout + 5:g} s; not asked again in this dump",
                                        d.error.remedy)
        return d

    async def _remote_once(self, a: ActorRow) -> ProcessDump:
        assert a.pid is not None
        use_dashboard = (self.opts.via in ("auto", "dashboard") and not self.opts.nonblocking
                         and self.client is not None and self.dashboard_profiling is not False)
        if use_dashboard and a.node_id:
            # the node's own cap is held by the caller (_remote)
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
        elif self.opts.via == "auto" and self.dashboard_profiling is False:  # known before the first call
            self._note(PROFILING_OFF_NOTE)
        return await self._probe_dump(a)

    async def _probe_dump(self, a: ActorRow) -> ProcessDump:
        if not a.node_id:
            return ProcessDump(a.pid or -1, error=Problem("node_unknown", "actor's node is unknown"))
        if self.probe is None:
            from verltop.sources.probe import ProbePool  # imports ray: only here, only when asked

            self.probe = ProbePool(self.opts, self.probe_address)
        return await self.probe.dump(a.node_id, a.pid or -1)

    async def children(self, rows: list[ActorRow]) -> list[ChildProc]:
        """Every descendant process of the live ``rows``: read from /proc here, through the probe on other
        nodes when the probe is the route there, else from the snapshot's process trees (``processes``)."""
        live = [a for a in rows if a.state == "ALIVE" and a.pid]
        local = [a for a in live if self.is_local(a)]
        out: list[ChildProc] = []
        if local:
            pids = [a.pid for a in local if a.pid]
            found = headstart.descendants(pids)  # the early scan of /proc, when `dump` made one just now
            if found is None:
                found = await asyncio.to_thread(local_descendants, pids)
            for a in local:
                out += [ChildProc(a.actor_id, p, pp, t) for p, pp, t in found.get(a.pid or -1, [])]
        remote = [a for a in live if a not in local]
        by_node: dict[str, list[ActorRow]] = {}
        for a in remote:
            known = getattr(a, "processes", None)  # the snapshot's process tree, when it has one
            if known:
                out += [ChildProc(a.actor_id, c.pid, c.ppid, c.title) for c in known]
            elif a.node_id and (self.opts.via == "probe" or self.dashboard_profiling is False):
                by_node.setdefault(a.node_id, []).append(a)
        if by_node and self.probe is None:
            from verltop.sources.probe import ProbePool  # imports ray: only here, only when asked

            self.probe = ProbePool(self.opts, self.probe_address)
        probe = self.probe
        # every node's probe at once: each one's start (a worker process there) takes about a second
        answers = await asyncio.gather(*(probe.descendants(node_id, [a.pid for a in rs if a.pid], MAX_PER_ACTOR)
                                         for node_id, rs in by_node.items()))
        for (node_id, rs), got in zip(by_node.items(), answers, strict=True):
            if isinstance(got, Problem):
                self._note(f"child processes on node {node_id[:8]} unknown: {got.message}")
                continue
            for a in rs:
                # JSON turns the int keys into strings on the way back
                found = got.get(a.pid) or got.get(str(a.pid)) or []  # type: ignore[call-overload]
                out += [ChildProc(a.actor_id, int(p), int(pp), t) for p, pp, t in found]
        return [c for c in out if not (c.title and any(p in c.title for p in _PLUMBING))]

    def _note(self, s: str) -> None:
        if s not in self.notes:
            self.notes.append(s)

    async def capture(self, targets: list[ActorRow] | list[ActorRow | Target], on_progress: ProgressFn | None = None
                      ) -> dict[str, list[ProcessDump]]:
        """``samples`` rounds; returns each target's samples in order (an actor's under its id, a ``Target``'s
        under its key). Cancel-safe (Esc in the UI)."""
        out: dict[str, list[ProcessDump]] = {(t.key if isinstance(t, Target) else t.actor_id): [] for t in targets}
        live = [t for t in targets if isinstance(t, Target) or t.state == "ALIVE"]
        total = len(live) * max(1, self.opts.samples)
        done = 0
        try:
            for i in range(max(1, self.opts.samples)):
                t0 = time.monotonic()

                async def run(t: ActorRow | Target) -> tuple[str, ActorRow, ProcessDump]:
                    if isinstance(t, Target):
                        return t.key, t.row, await self.one_process(t)
                    return t.actor_id, t, await self.one(t)

                for fut in asyncio.as_completed([run(t) for t in live]):
                    key, a, d = await fut
                    out[key].append(d)
                    done += 1
                    if on_progress:
                        on_progress(a, d, done, total)
                if i + 1 < self.opts.samples:
                    await asyncio.sleep(max(0.0, self.opts.interval_s - (time.monotonic() - t0)))
            self._missing_notes(live, out)
        finally:
            if self.probe is not None:
                await self.probe.close()
        return out


    def _missing_notes(self, live: list[ActorRow | Target], out: dict[str, list[ProcessDump]]) -> None:
        """A partial dump says what is missing: each node whose ranks got no stack because the node itself did
        not answer (timed out, or its probe could not start), with how many."""
        by_node: dict[str, list[Problem]] = {}
        ips: dict[str, str | None] = {}
        for t in live:
            row = t.row if isinstance(t, Target) else t
            got = out.get(t.key if isinstance(t, Target) else t.actor_id) or []
            if row.node_id in self.local_node_ids or not got or got[-1].error is None:
                continue
            if got[-1].error.kind in NODE_FAILURES and row.node_id:
                by_node.setdefault(row.node_id, []).append(got[-1].error)
                ips[row.node_id] = row.node_ip
        # nodes that failed for the same reason (no probe can start anywhere: one cause) share one line
        by_why: dict[str, list[tuple[str, int]]] = {}
        for node, errs in sorted(by_node.items(), key=lambda kv: _natural(ips[kv[0]] or kv[0])):
            first = errs[0]
            why = (f"no answer within {self.opts.per_process_timeout + 5:g} s" if first.kind != "probe"
                   else first.message)
            by_why.setdefault(why, []).append((ips[node] or node[:8], len(errs)))
        for why, nodes in by_why.items():
            if len(nodes) == 1:
                (name, n), = nodes
                self._note(f"node {name}: no stack from {n} process(es) there ({why})")
                continue
            names = ", ".join(name for name, _ in nodes[:MISSING_NAMED])
            more = f" and {len(nodes) - MISSING_NAMED} more" if len(nodes) > MISSING_NAMED else ""
            self._note(f"{len(nodes)} nodes ({names}{more}): no stack from {sum(n for _, n in nodes)} "
                       f"processes there ({why})")


def _natural(s: str) -> tuple:
    """Sort key: 10.1.0.2 before 10.1.0.10 (digits as numbers; strings and numbers alternate, so they align)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", s)))


def _remote_problem(p: Problem) -> Problem:
    """The dashboard relays py-spy's failures on the other node as text: say which fix applies there."""
    if "ermission" in p.message or "Operation not permitted" in p.message:
        return pyspy.ptrace_problem(" (on that node)")
    if "not installed" in p.message:
        return pyspy.no_pyspy_problem(" (on that node)")
    return p
