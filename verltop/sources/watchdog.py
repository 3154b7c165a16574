"""Read the tail of each waiting rank's error log through the dashboard and parse NCCL watchdog lines."""

from __future__ import annotations

import asyncio

from verltop.analysis.watchdog import parse_watchdog
from verltop.model import ActorRow, CollectiveInfo, ProcessDump
from verltop.sources.dashboard import fetch_log_tail
from verltop.sources.http import DashboardClient

MAX_LOGS = 256  # log tails per dump; beyond that the stacks alone have to do
TAIL_LINES = 400


async def read_collectives(
    client: DashboardClient, targets: list[ActorRow], samples: dict[str, list[ProcessDump]] | None = None,
    timeout_s: float = 5.0,
) -> dict[str, CollectiveInfo]:
    """actor_id → watchdog facts, for live worker ranks of groups that hold GPUs (no GPU, no NCCL: no
    watchdog lines to find; the controller has no NCCL group)."""
    gpu_groups = {a.worker_group for a in targets if a.gpu_index is not None and a.worker_group}
    ranks = [a for a in targets if a.state == "ALIVE" and a.role != "controller" and a.worker_group in gpu_groups]
    ranks = ranks[:MAX_LOGS]
    sem = asyncio.Semaphore(16)

    async def one(a: ActorRow) -> tuple[str, CollectiveInfo | None]:
        async with sem:
            r = await fetch_log_tail(client, a.actor_id, "err", TAIL_LINES, timeout_s)
        return a.actor_id, parse_watchdog(r.value or "") if r.ok else None

    out = {}
    for aid, info in await asyncio.gather(*(one(a) for a in ranks)):
        if info is not None:
            out[aid] = info
    return out


async def collective_evidence(
    client: DashboardClient, targets: list[ActorRow], samples: dict[str, list[ProcessDump]] | None = None,
    use_logs: bool = True, local_node_ids: frozenset[str] = frozenset(),
) -> tuple[dict[str, CollectiveInfo], list[str]]:
    """What names each rank's collective: Flight Recorder dumps on this machine win over watchdog lines."""
    from verltop.sources.flight_recorder import read_local

    out: dict[str, CollectiveInfo] = {}
    if use_logs:
        out.update(await read_collectives(client, targets, samples))
    local = [a for a in targets if a.node_id in local_node_ids and a.role != "controller"]
    fr, notes, _ = await asyncio.to_thread(read_local, local)
    out.update(fr)
    return out, notes
