"""Where to ask NCCL RAS, and one merged answer from every address asked (RAS threads of one job know the
whole job; several jobs or meshes on a node listen on their own ``NCCL_RAS_ADDR``)."""

from __future__ import annotations

import asyncio

from verltop.model import ActorRow, Problem, RasReport
from verltop.sources import ras


def addresses(actors: tuple[ActorRow, ...] | list[ActorRow], local_node_ids: frozenset[str],
              explicit: tuple[str, ...] = (), gpu_host: bool = False) -> list[tuple[str, int]]:
    """The RAS addresses on this machine: the user's, else those of local ranks that can run NCCL (a GPU, or
    ``NCCL_RAS_ADDR`` in their runtime env; the default address when they set none). ``gpu_host``: this
    machine has NVIDIA GPUs and which rank uses one is not read yet (a one-shot dump asks RAS before the GPU
    reads answer): every local rank of a worker group counts."""
    if explicit:
        return sorted({ras.parse_addr(x) for x in explicit})
    local = [a for a in actors if a.node_id in local_node_ids and a.state == "ALIVE"
             and (a.gpu_index is not None or a.ras_addr or (gpu_host and a.worker_group))]
    return sorted({ras.parse_addr(a.ras_addr) for a in local})


async def read(addrs: list[tuple[str, int]], timeout_s: float = 5.0) -> tuple[RasReport | None, list[Problem]]:
    """Ask every address at once; communicators known to several are kept once."""
    if not addrs:
        return None, []
    results = await asyncio.gather(*(ras.fetch(h, p, timeout_s) for h, p in addrs))
    reports = [r for r, _, _ in results if r is not None]
    problems = [p for _, p, _ in results if p is not None]
    if not reports:
        return None, problems
    comms: dict[str, object] = {}
    procs: dict[tuple, None] = {}
    for r in reports:
        for c in r.comms:
            comms.setdefault(c.hash, c)
        procs.update(dict.fromkeys(r.missing_processes))
    first = reports[0]
    return RasReport(first.nccl_version, tuple(comms.values()), tuple(procs), first.source), problems  # type: ignore[arg-type]
