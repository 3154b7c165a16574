"""``NodeRunner``: one probe actor per node that runs plain functions there (``verltop doctor``), each call with
its own timeout, failing the calls of a node that leaves the cluster meanwhile within about ``watch_s``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from verltop.convert import one_line
from verltop.model import Problem
from verltop.sources.aio import within
from verltop.sources.probe_actor import kill_all, probe_class, ship_by_value
from verltop.sources.probe_connect import NAMESPACE, RayNode, connect, in_daemon_thread, ray_nodes


class NodeRunner:
    """One probe actor per node that runs plain functions there. Each call has its own timeout, and a node
    that leaves the cluster meanwhile fails its calls within about ``watch_s`` (the GCS is asked)."""

    def __init__(self, address: str = "auto", connect_timeout_s: float = 15.0, watch_s: float = 1.0) -> None:
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.watch_s = watch_s
        self._cls: Any = None
        self._actors: dict[str, Any] = {}
        self._nodes: dict[str, RayNode] = {}
        self._watch: asyncio.Task | None = None
        self._joined = False

    async def connect(self, node_ids: Iterable[str]) -> Problem | None:
        """Join the cluster (``ray.init`` in a daemon thread); the problem when that is not possible. Once joined,
        only checks that ``node_ids`` are nodes of the cluster joined (the GCS is asked again only when not)."""
        ids = list(node_ids)
        remedy = "run verltop on a node of the cluster (the head), or set RAY_ADDRESS to its GCS address (host:6379)"
        if self._joined:
            if not set(ids) <= set(self._nodes):
                await self._refresh()
            if not set(ids) <= set(self._nodes):
                return Problem("probe", "cannot start the probes: the Ray cluster on this machine is not the "
                               "dashboard's cluster", remedy)
            return None
        try:
            await within(in_daemon_thread(connect, self.address, ids), self.connect_timeout_s)
        except asyncio.TimeoutError:
            return Problem("probe", "cannot start the probes: connecting to the Ray cluster timed out", remedy)
        except ImportError:
            return Problem("probe", "cannot start the probes: ray is not installed in verltop's Python",
                           "pip install ray (the cluster's version) next to verltop")
        except Exception as e:  # noqa: BLE001 - ray raises many kinds; all mean "no probe"
            return Problem("probe", f"cannot start the probes: {one_line(e, 160)}", remedy)
        self._nodes = await asyncio.to_thread(ray_nodes)
        self._joined = True
        return None

    def start(self, node_ids: Iterable[str]) -> None:
        """Start the probes of ``node_ids`` now, all at once: their workers start in parallel while the first
        calls are being prepared (a worker's start is most of a call's first answer)."""
        for nid in node_ids:
            if self._left(nid) is None:
                self._actor(nid)

    @property
    def nodes(self) -> dict[str, RayNode]:
        """The GCS's view of the nodes, refreshed while calls are pending."""
        return self._nodes

    async def _refresh(self) -> None:
        try:
            self._nodes = await asyncio.to_thread(ray_nodes)
        except Exception:  # noqa: BLE001 - the GCS did not answer this time; calls still time out
            pass

    async def _watcher(self) -> None:
        while True:
            await asyncio.sleep(self.watch_s)
            await self._refresh()

    def _left(self, node_id: str) -> Problem | None:
        n = self._nodes.get(node_id)
        if n is None or n.alive:
            return None
        why = f" ({one_line(n.death, 160)})" if n.death else ""
        return Problem("node_left", f"the node left the cluster during the check{why}",
                       "see `ray status` and the raylet log of that node")

    def _actor(self, node_id: str) -> Any:
        if node_id not in self._actors:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            if self._cls is None:
                self._cls = probe_class()
            self._actors[node_id] = self._cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False), namespace=NAMESPACE,
            ).remote()
        return self._actors[node_id]

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, Problem | None]:
        """``fn(*args)`` on the node (its probe is started on first use): ``(value, None)`` or ``(None, why)``."""
        if (left := self._left(node_id)) is not None:
            return None, left
        import ray

        if self._watch is None:
            self._watch = asyncio.create_task(self._watcher(), name="verltop-node-watch")
        ship_by_value(fn)
        ref = self._actor(node_id).call.remote(fn, *args)
        fut = asyncio.wrap_future(ref.future())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    return None, Problem("no_answer", f"no answer within {timeout_s:g} s",
                                         "the node may be overloaded or its raylet hung: see `ray status` and "
                                         "the raylet log there")
                done, _ = await asyncio.wait({fut}, timeout=min(left_s, self.watch_s / 2))
                if done:
                    return fut.result(), None
                if (left := self._left(node_id)) is not None:
                    return None, left
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the actor died, the node left, the function raised
            await self._refresh()
            if (left := self._left(node_id)) is not None:
                return None, left
            return None, Problem("probe", f"the probe failed: {one_line(e, 200)}")
        finally:
            if not fut.done():
                fut.cancel()
                try:  # force=True raises for actor tasks; a queued call is dropped without it
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort: the probe is killed in close() anyway
                    pass

    async def close(self) -> None:
        """Kill every probe (they are not detached, so they die with this process anyway)."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        kill_all(self._actors)
