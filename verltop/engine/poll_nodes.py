"""The node list and stats, per-node details of nodes with actors, which nodes are this machine,
and the process trees of other nodes."""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from itertools import compress

from verltop.engine.polling import PollState
from verltop.model import Node
from verltop.sources import dashboard as D
from verltop.sources.local import LocalSample, is_actor_process, this_fqdn

log = logging.getLogger("verltop.engine")
_NODE_ID, _STATE = operator.attrgetter("node_id"), operator.attrgetter("state")


class NodePolls(PollState):
    """The nodes source, node details and remote process trees."""

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
        if merged:  # a cluster has a node; an empty list is a dashboard's glitch, not every node leaving
            self.remote.forget({n.node_id for n in merged if n.state != "DEAD"})
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

    async def _poll_node_details(self, all_nodes: bool = False, with_local: bool = False) -> None:
        """Per-worker CPU/RSS of remote nodes that host actors. Nodes whose rows are on screen come first;
        at most ``max_node_details`` requests per cycle (``all_nodes`` for one-shot snapshots; ``with_local``:
        this machine's nodes too, for a snapshot that does not sample CPU itself)."""
        local = frozenset() if with_local else self.local_node_ids()
        acts = self.src.actors.value or []
        # the nodes of the live actors (in C: 10,000 actors on 128 nodes)
        wanted = sorted(set(map(_NODE_ID, compress(acts, map("ALIVE".__eq__, map(_STATE, acts))))) - local - {None, ""})
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
            if not r.ok or r.value is None:
                continue
            if self.node_details.get(nid) is not r.value:
                self.node_details[nid] = r.value
                self._dirty.set()
            # a report read before (``unchanged``) was booked when first read
            if not r.unchanged and nid not in local:
                self._book_node_memory(r.value, r.taken_at - (r.value.stats_age_s or 0.0))
        for nid in [k for k in self.node_details if k not in wanted]:
            del self.node_details[nid]
            self.client.memo.pop(f"node:{nid}", None)

    def _book_node_memory(self, node: Node, at: float) -> None:
        """Another node's actors' memory as its agent reported it (every 5 s), under their phases."""
        try:
            self.memory.feed_node(node, at, self._actors_on({node.node_id}), self.src.tasks.value, self._actor_map(),
                                  self.remote.trees.get(node.node_id))
        except Exception:  # book-keeping must not stop the node reads
            log.error("memory book-keeping failed", exc_info=True)

    async def _poll_trees(self) -> None:
        """Asked-about nodes on screen whose tree is older than ``trees_s``."""
        if self.remote.asked:
            await self._read_trees(self.remote.due(self._focus, time.time()))

    async def _read_trees(self, node_ids: list[str]) -> None:
        if node_ids and await self.remote.read_nodes(node_ids, self._actors_on(set(node_ids)), self.data().nodes):
            self._dirty.set()
