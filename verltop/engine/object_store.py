"""The object store on demand (``verltop memory``, the TUI's ``o``): Ray's object references and each node's
store stats, read once, grouped by holder and call site. Never part of a poll: the objects list fans out
to every raylet, and each raylet asks every worker on its node."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from verltop.analysis.object_store import object_store_report
from verltop.model import ActorRow, ObjectStoreReport
from verltop.sources import object_store as O
from verltop.sources.http import DashboardClient


async def read_object_store(client: DashboardClient, actors: Callable[[], Iterable[ActorRow]],
                            limit: int = O.DEFAULT_LIMIT, timeout_s: float = 30.0,
                            clock: Callable[[], float] = time.time) -> ObjectStoreReport:
    """Both reads at once, within ``timeout_s`` (Ray's own timeout for the fan-out is the same); ``actors``
    is called after they answered, so that a caller polling the actors meanwhile gives the freshest rows."""
    t0 = time.monotonic()
    objs, nodes = await asyncio.gather(O.fetch_objects(client, limit, timeout_s),
                                       O.fetch_store_nodes(client, min(timeout_s, 10.0)))
    problem = None
    refs = held = recorded = None
    warnings: tuple[str, ...] = ()
    if objs.ok and objs.value is not None:
        refs, held, _, recorded, warnings = objs.value
    else:
        problem = f"object references: {objs.error.text if objs.error else 'no answer'}"
    if not nodes.ok:
        why = f"store stats: {nodes.error.text if nodes.error else 'no answer'}"
        problem = f"{problem}; {why}" if problem else why
    return object_store_report(clock(), refs, held, recorded, actors(), nodes.value or [], limit,
                               warnings=warnings, problem=problem, elapsed_s=time.monotonic() - t0)
