"""Where to ask NCCL RAS, and one merged answer from every address asked (RAS threads of one job know the
whole job; several jobs or meshes on a node listen on their own ``NCCL_RAS_ADDR``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from verltop.model import ActorRow, Node, Problem
from verltop.sources import ras, ras_remote

if TYPE_CHECKING:
    from verltop.model import RasReport


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
    from verltop.model import RasReport

    return RasReport(first.nccl_version, tuple(comms.values()), tuple(procs), first.source), problems  # type: ignore[arg-type]


def remote_nodes(actors: Sequence[ActorRow], local_node_ids: frozenset[str], nodes: Sequence[Node] = (),
                 explicit: tuple[str, ...] = ()) -> list[tuple[str, list[tuple[str, int]]]]:
    """Other nodes whose RAS could answer for the job, most NCCL-capable ranks first: ``(node id, the RAS
    addresses its ranks use)``. A rank counts when it holds a GPU, names ``NCCL_RAS_ADDR``, or belongs to a
    worker group on a node with GPUs (RAS is job-wide: any one of its processes answers for all)."""
    gpu_nodes = {n.node_id for n in nodes if n.gpus}
    by_node: dict[str, list[ActorRow]] = {}
    for a in actors:
        if (a.node_id and a.node_id not in local_node_ids and a.state == "ALIVE" and a.worker_group
                and (a.gpu_index is not None or a.ras_addr or a.node_id in gpu_nodes)):
            by_node.setdefault(a.node_id, []).append(a)
    out = []
    for node_id, rs in sorted(by_node.items(), key=lambda kv: -len(kv[1])):
        addrs = sorted({ras.parse_addr(x) for x in explicit} or {ras.parse_addr(a.ras_addr) for a in rs})
        out.append((node_id, addrs))
    return out



async def read_remote(call: Callable[..., Awaitable[tuple[Any, Problem | None]]],
                      candidates: list[tuple[str, list[tuple[str, int]]]], timeout_s: float = 5.0,
                      max_nodes: int = 2) -> tuple[RasReport | None, list[Problem]]:
    """RAS asked on other nodes through ``call(node_id, timeout_s, fn, *args)`` (a probe), one node at a time
    until one answers (its answer covers the job); at most ``max_nodes`` tried."""
    problems: list[Problem] = []
    no_probe: dict[str, tuple[Problem, list[str]]] = {}  # the probe's failure → the nodes it failed on
    for node_id, addrs in candidates[:max_nodes]:
        for host, port in addrs:
            got, problem = await call(node_id, timeout_s + 2, ras_remote.status, host, port, timeout_s)
            if problem is not None:
                no_probe.setdefault(problem.message, (problem, []))[1].append(node_id[:8])
                break  # the probe itself failed there: the next node
            body, err = got
            if body is None:
                problems.append(Problem("ras_unreachable", f"{err} ({node_id[:8]})", ras.ARM))
                continue
            report, perr = ras.parse(body)
            if report is not None:
                return report, []
            problems.append(Problem("ras_protocol", f"NCCL RAS on node {node_id[:8]}: {perr}"))
    # one line per cause: a probe that cannot start anywhere fails the same way on every node
    problems += [p.with_message(f"NCCL RAS on node{'s' if len(ns) > 1 else ''} {', '.join(ns)}: {p.message}")
                 for p, ns in no_probe.values()]
    return None, problems
