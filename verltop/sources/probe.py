"""Probes for dumps and process trees: ``ProbePool`` starts one probe actor (``probe_actor``) per node that is
asked for, on first use, and asks it for a py-spy dump, a process tree, an actor's descendants or a function's
result there.

Used for a remote dump when the dashboard's profiling endpoint is off (Ray ≥ 2.56 default), for the process
trees of other nodes when someone asks for them, and for NCCL's RAS report. The actors live in their own
namespace, take no CPU, are not detached, and are killed when the job ends or verltop stops (and die with
this driver anyway).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from verltop.convert import one_line
from verltop.model import Problem, ProcessDump, ProcTree
from verltop.sources import pyspy
from verltop.sources.aio import within
from verltop.sources.local import tree_from_plain
from verltop.sources.probe_actor import kill_all, probe_class, ship_by_value
from verltop.sources.probe_connect import NAMESPACE, connect, in_daemon_thread
from verltop.sources.pyspy import DumpOptions


class ProbePool:
    """Lazily connects to the cluster and starts one probe per node that is asked for."""

    def __init__(self, opts: DumpOptions, address: str = "auto", schedule_timeout_s: float = 15.0) -> None:
        self.opts = opts
        self.address = address
        self.schedule_timeout_s = schedule_timeout_s
        self._actors: dict[str, Any] = {}
        self._failed: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._init_error: str | None = None
        self._inited = False
        self._warming: list[asyncio.Future] = []

    def _init(self, node_id: str) -> None:
        connect(self.address, [node_id])

    def warm(self, node_ids: list[str]) -> None:
        """Join the cluster and start the probes of ``node_ids`` now, in the background: a dump through the
        probes would otherwise wait for both at its first call there (about a second each)."""
        async def start(node_id: str) -> None:
            try:
                await self._actor(node_id)
            except RuntimeError:
                pass  # the calls there will say why

        self._warming = [asyncio.ensure_future(start(n)) for n in node_ids]

    async def _actor(self, node_id: str) -> Any:
        async with self._lock:
            if not self._inited:
                self._inited = True
                try:
                    await within(in_daemon_thread(self._init, node_id), self.schedule_timeout_s)
                except asyncio.TimeoutError:
                    self._init_error = "cannot start a probe: connecting to the Ray cluster timed out"
                except Exception as e:  # noqa: BLE001 - ray raises many kinds; all mean "no probe"
                    self._init_error = ("cannot start a probe: ray.init failed "
                                        f"({one_line(e, 160)}); run verltop on the head node")
            if self._init_error:
                raise RuntimeError(self._init_error)
            if node_id in self._failed:
                raise RuntimeError(self._failed[node_id])
            if node_id not in self._actors:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                cls = probe_class()
                self._actors[node_id] = cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                    namespace=NAMESPACE,
                    name=None,
                ).remote()
            return self._actors[node_id]

    async def dump(self, node_id: str, pid: int) -> ProcessDump:
        started = time.time()
        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return ProcessDump(pid, error=Problem("probe", str(e)), taken_at=started)
        import ray

        ref = actor.dump.remote(pyspy.dump_args(pid, self.opts.native, self.opts.nonblocking),
                                self.opts.per_process_timeout)
        try:
            rc, out, err, dt = await within(
                asyncio.wrap_future(ref.future()), self.opts.per_process_timeout + self.schedule_timeout_s
            )
        except asyncio.TimeoutError:
            self._failed[node_id] = "probe actor could not be scheduled on that node (no answer)"
            try:  # force=True raises for actor tasks; a queued call is dropped without it
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - best effort: the probe is killed in close() anyway
                pass
            return ProcessDump(pid, error=Problem("probe", self._failed[node_id]), taken_at=started)
        except Exception as e:  # noqa: BLE001 - actor died, node left: all are "no stack here"
            return ProcessDump(pid, error=Problem("probe", f"probe failed: {one_line(e, 160)}"), taken_at=started)
        if rc == -2:
            return ProcessDump(pid, error=pyspy.no_pyspy_problem(" (on that node)"), taken_at=started)
        if rc == -1:
            return ProcessDump(pid, error=pyspy.timeout_problem(self.opts.per_process_timeout), taken_at=started,
                               duration_s=dt)
        if rc != 0:
            return ProcessDump(pid, error=pyspy.explain_error(err + out, rc), taken_at=started, duration_s=dt)
        threads, perr = pyspy.parse_json(out)
        return ProcessDump(pid, threads=threads, error=Problem("pyspy", perr) if perr else None,
                           native=self.opts.native, taken_at=started, duration_s=dt)

    async def tree(self, node_id: str, roots: list[int], extra: list[int] | None = None) -> ProcTree:
        """The processes below ``roots`` on ``node_id`` (and the loose ones, ``extra``: its GPU holders)."""
        started = time.time()

        def failed(msg: str) -> ProcTree:
            return ProcTree(started, tuple(sorted(roots)), node_id=node_id, error=Problem("probe", msg))

        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return failed(str(e))
        ref = actor.tree.remote(list(roots), list(extra or ()))
        try:
            plain = await within(asyncio.wrap_future(ref.future()), self.schedule_timeout_s)
        except asyncio.TimeoutError:
            self._failed[node_id] = "probe actor could not be scheduled on that node (no answer)"
            return failed(self._failed[node_id])
        except Exception as e:  # noqa: BLE001 - actor died, node left, no /proc there: all are "no tree"
            return failed(f"probe failed: {one_line(e, 160)}")
        return tree_from_plain(plain, roots, node_id)

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, Problem | None]:
        """``fn(*args)`` on that node through its probe (``fn`` shipped by value): ``(value, None)`` or
        ``(None, why)``."""
        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return None, Problem("probe", str(e))
        ship_by_value(fn)
        ref = actor.call.remote(fn, *args)
        try:
            return await within(asyncio.wrap_future(ref.future()), timeout_s + self.schedule_timeout_s), None
        except Exception as e:  # noqa: BLE001 - timeout, actor died, node left, the function raised
            return None, Problem("probe", f"probe failed: {one_line(e, 160) or e.__class__.__name__}")

    async def descendants(self, node_id: str, pids: list[int], limit: int = 64
                          ) -> dict[int, list[tuple[int, int, str]]] | Problem:
        """The descendant processes of ``pids`` on that node, through its probe."""
        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return Problem("probe", str(e))
        ref = actor.descendants.remote(pids, limit)
        try:
            return await within(asyncio.wrap_future(ref.future()), self.schedule_timeout_s)
        except Exception as e:  # noqa: BLE001 - timeout, actor died, node left: no children known there
            return Problem("probe", f"probe failed: {one_line(e, 160)}")

    async def close(self) -> None:
        for w in self._warming:
            w.cancel()
        kill_all(self._actors)

