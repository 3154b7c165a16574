"""The rollout engines' own load, polled: each live rollout server on this machine is found once (its
listening sockets, tried for a ``/metrics`` that speaks vLLM or SGLang) and then read every few seconds.

Servers on other nodes: their sockets are in another machine's ``/proc``, so ``find`` (the probe on that node,
where the engine allows it) lists them; verltop then GETs their ``/metrics`` across the network, as Prometheus
would. Without it they are listed with no figures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from verltop.analysis.roles import base_role
from verltop.model import RawActor, RolloutLoad
from verltop.sources import rollout as R

OTHER_NODE = "on another node: verltop reads a rollout server's /metrics on the machine it runs on"
LOOPBACK = "it listens on its node's loopback only: not reachable from here"

# node id, pids -> each pid's listening sockets there, or why not
Finder = Callable[[str, list[int]], Awaitable[tuple[dict[int, list[tuple[str, int]]] | None, str | None]]]


class RolloutWatch:
    """The last load read from each rollout server, and where each one's ``/metrics`` is."""

    def __init__(self, timeout_s: float = 2.0, rediscover_s: float = 30.0, max_inflight: int = 8,
                 find: Finder | None = None) -> None:
        """``find``: lists the listening sockets of pids on another node (the probe); None: only this machine's."""
        self.find = find
        self.timeout_s = timeout_s
        self.rediscover_s = rediscover_s
        self.loads: dict[str, RolloutLoad] = {}
        # actor id -> (pid, address or None, when looked, why not found)
        self._where: dict[str, tuple[int, str | None, float, str]] = {}
        self._sem = asyncio.Semaphore(max_inflight)
        self.reads = 0  # GETs sent (tests, benchmarks)

    @staticmethod
    def servers(actors: Iterable[RawActor]) -> list[RawActor]:
        return [a for a in actors if a.state == "ALIVE" and a.pid and base_role(a.class_name, a.name) == "rollout_server"]

    async def poll(self, actors: Iterable[RawActor], local: frozenset[str], node_ips: dict[str, str],
                   now: float) -> bool:
        """Read every live rollout server once; True when anything changed."""
        servers = self.servers(actors)
        live = {a.actor_id for a in servers}
        changed = bool(set(self.loads) - live)
        for aid in set(self.loads) - live:
            self.loads.pop(aid, None)
            self._where.pop(aid, None)
        if not servers:
            return changed
        remote = await self._find_remote([a for a in servers if a.node_id not in local and self._due(a, now)])
        rows = await asyncio.gather(*(self._read(a, a.node_id in local, node_ips.get(a.node_id or ""), now,
                                                 remote.get(a.actor_id)) for a in servers))
        for row in rows:
            if self.loads.get(row.actor_id) != row:
                changed = True
            self.loads[row.actor_id] = row
        return changed

    def _due(self, a: RawActor, now: float) -> bool:
        """Its address must be looked for (never found, moved, or not found for ``rediscover_s``)."""
        where = self._where.get(a.actor_id)
        return where is None or where[0] != a.pid or (where[1] is None and now - where[2] >= self.rediscover_s)

    async def _find_remote(self, servers: list[RawActor]) -> dict[str, tuple[list[tuple[str, int]] | None, str]]:
        """Each remote server's listening sockets, one ``find`` per node: actor id -> (sockets or None, why)."""
        if not servers:
            return {}
        if self.find is None:
            return {a.actor_id: (None, OTHER_NODE) for a in servers}
        by_node: dict[str, list[RawActor]] = {}
        for a in servers:
            by_node.setdefault(a.node_id or "", []).append(a)
        nodes = list(by_node)
        got = await asyncio.gather(*(self.find(n, [a.pid for a in by_node[n] if a.pid]) for n in nodes))
        out: dict[str, tuple[list[tuple[str, int]] | None, str]] = {}
        for n, (socks, why) in zip(nodes, got, strict=True):
            for a in by_node[n]:
                out[a.actor_id] = (None, why or OTHER_NODE) if socks is None else (socks.get(a.pid or 0, []), "")
        return out

    async def _read(self, a: RawActor, local: bool, node_ip: str | None, now: float,
                    found: tuple[list[tuple[str, int]] | None, str] | None = None) -> RolloutLoad:
        assert a.pid is not None
        where = self._where.get(a.actor_id)
        if where is not None and where[0] == a.pid and where[1] is not None:
            text, why = await self._get(where[1])
            m = R.parse_engine_metrics(text) if text is not None else None
            if m is not None:
                return self._load(a, where[1], m, now)
            self._where.pop(a.actor_id, None)  # moved (a restart): look again next time
            return self._stale(a, where[1], why or "/metrics no longer speaks vLLM or SGLang")
        if where is not None and where[0] == a.pid and now - where[2] < self.rediscover_s:
            return RolloutLoad(a.actor_id, a.name, None, problem=where[3])
        if local:
            socks = await asyncio.to_thread(R.listening, a.pid)
        elif found is None or found[0] is None:
            why = found[1] if found is not None else OTHER_NODE
            self._where[a.actor_id] = (a.pid, None, now, why)
            return RolloutLoad(a.actor_id, a.name, None, problem=why)
        else:
            socks = found[0]
        reachable = [(ip, port) for ip, port in socks if local or not R.loopback(ip)]
        # every candidate at once (Ray's own worker port is one of them): a search costs one timeout at most
        addrs = [R.host_port(R.connect_host(ip, node_ip), port) for ip, port in reachable]
        answers = await asyncio.gather(*(self._get(addr) for addr in addrs))
        for addr, (text, _) in zip(addrs, answers, strict=True):
            m = R.parse_engine_metrics(text) if text is not None else None
            if m is not None:
                self._where[a.actor_id] = (a.pid, addr, now, "")
                return self._load(a, addr, m, now)
        why = (LOOPBACK if socks and not reachable else
               f"none of its {len(socks)} listening ports serves a vLLM or SGLang /metrics" if socks
               else "it listens on no TCP port verltop can see (another user's process? run as root)")
        self._where[a.actor_id] = (a.pid, None, now, why)
        return RolloutLoad(a.actor_id, a.name, None, problem=why)

    async def _get(self, addr: str) -> tuple[str | None, str | None]:
        async with self._sem:
            self.reads += 1
            return await R.get_metrics(addr, self.timeout_s)

    def _load(self, a: RawActor, addr: str, m: R.EngineMetrics, now: float) -> RolloutLoad:
        prev = self.loads.get(a.actor_id)
        rate = m.gen_tokens_per_s
        if (prev is not None and prev.address == addr and prev.gen_tokens_total is not None
                and m.gen_tokens_total is not None and prev.read_at is not None and now > prev.read_at
                and m.gen_tokens_total >= prev.gen_tokens_total):
            rate = (m.gen_tokens_total - prev.gen_tokens_total) / (now - prev.read_at)
        return RolloutLoad(a.actor_id, a.name, addr, m.engine, m.running, m.waiting, m.kv_cache_usage,
                           m.preemptions_total, m.gen_tokens_total, rate, now, sleep_state=m.sleep_state)

    def _stale(self, a: RawActor, addr: str, why: str) -> RolloutLoad:
        prev = self.loads.get(a.actor_id)
        if prev is None:
            return RolloutLoad(a.actor_id, a.name, addr, problem=why)
        return RolloutLoad(prev.actor_id, prev.actor_name, addr, prev.engine, prev.running, prev.waiting,
                           prev.kv_cache_usage, prev.preemptions_total, prev.gen_tokens_total, None, prev.read_at, why,
                           prev.sleep_state)

    def view(self, actor_ids: Iterable[str]) -> tuple[RolloutLoad, ...]:
        """The loads of these actors (the snapshot's), in its order."""
        loads = self.loads
        return tuple(map(loads.__getitem__, filter(loads.__contains__, actor_ids))) if loads else ()

    async def close(self) -> None:
        """Nothing to release: each read is its own connection."""
