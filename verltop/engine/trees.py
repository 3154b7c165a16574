"""Process trees of other nodes, read through a probe actor per node (``sources/probe.py``).

Not on a timer by default: ``ray`` is imported and a probe started only once the user asks for a node's
processes (the ``c`` key on one of its actors, or ``snapshot --remote-processes``). From then on, the nodes
asked about are re-read every ``interval_s`` while their rows are on screen, at most ``max_nodes`` per
cycle: one small actor call per node, answered from an incremental /proc reader on that node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from verltop.model import Node, Problem, ProcTree, RawActor


class RemoteTrees:
    """The latest tree of each node asked about, and the last problem reading one."""

    def __init__(self, address: str = "auto", interval_s: float = 10.0, max_nodes: int = 8) -> None:
        self.address = address
        self.interval_s = interval_s
        self.max_nodes = max_nodes
        self.asked: dict[str, None] = {}  # node ids, in the order asked
        self.trees: dict[str, ProcTree] = {}
        self.error: Problem | None = None
        self.ok_at: float | None = None
        self._pool = None
        self._lock = asyncio.Lock()

    def ask(self, node_ids: Iterable[str]) -> list[str]:
        """Remember ``node_ids``; returns the ones not asked before."""
        new = [n for n in node_ids if n and n not in self.asked]
        self.asked.update(dict.fromkeys(new))
        return new

    def due(self, focus: Iterable[str], now: float) -> list[str]:
        """Nodes to read this cycle: asked, on screen (top first), not read within ``interval_s``."""
        shown = [n for n in focus if n in self.asked]
        return [n for n in shown if now - self._read_at(n) >= self.interval_s][: self.max_nodes]

    def _read_at(self, node_id: str) -> float:
        t = self.trees.get(node_id)
        return t.taken_at if t is not None else 0.0

    async def read_nodes(self, node_ids: list[str], actors: Iterable[RawActor], nodes: Iterable[Node]) -> bool:
        """Read ``node_ids``: roots are the pids of ``actors`` there (live ones), ``extra`` the pids that hold
        GPU memory there (the dashboard's per-GPU lists). True when anything changed (a tree, or an error)."""
        roots: dict[str, list[int]] = {}
        for a in actors:
            if a.pid and a.node_id in node_ids and a.state == "ALIVE":
                roots.setdefault(a.node_id, []).append(a.pid)
        gpu_pids = {n.node_id: sorted({pid for g in n.gpus for pid, _, _ in g.processes} - set(roots[n.node_id]))
                    for n in nodes if n.node_id in roots}
        before = self.error
        return await self.read([n for n in node_ids if n in roots], roots, gpu_pids) or self.error != before

    async def read(self, node_ids: list[str], roots: Mapping[str, list[int]],
                   gpu_pids: Mapping[str, list[int]]) -> bool:
        """Read ``node_ids`` in parallel; True when any tree arrived."""
        if not node_ids:
            return False
        async with self._lock:
            if self._pool is None:
                from verltop.sources.probe import ProbePool  # imports ray: only here, only once asked
                from verltop.sources.pyspy import DumpOptions

                self._pool = ProbePool(DumpOptions(), self.address)
            pool = self._pool
            got = await asyncio.gather(*(pool.tree(n, roots.get(n, []), gpu_pids.get(n, [])) for n in node_ids))
        fresh = False
        for n, t in zip(node_ids, got, strict=True):
            if t.error is None:
                self.trees[n] = t
                self.ok_at = time.time()
                fresh = True
            else:
                self.error = t.error
                self.trees.pop(n, None)
        if fresh and all(t.error is None for t in got):
            self.error = None
        return fresh

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, Problem | None]:
        """``fn(*args)`` on that node through its probe (started on first use, as for trees)."""
        async with self._lock:
            if self._pool is None:
                from verltop.sources.probe import ProbePool  # imports ray: only here, only once asked
                from verltop.sources.pyspy import DumpOptions

                self._pool = ProbePool(DumpOptions(), self.address)
            pool = self._pool
        return await pool.call(node_id, timeout_s, fn, *args)

    def forget(self, alive: set[str]) -> None:
        """Drop the trees of nodes that left the cluster, and stop asking about them (a long run sees many
        nodes come and go)."""
        for n in [n for n in self.trees if n not in alive]:
            del self.trees[n]
        for n in [n for n in self.asked if n not in alive]:
            del self.asked[n]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
