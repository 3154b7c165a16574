"""One-shot commands (``verltop snapshot``, ``verltop memory``): the engine's side of them, so that the CLI
only parses arguments and prints; ``verltop dump``'s is ``engine/oneshot_dump.py`` (a snapshot does not import
the dump's analysis). What they read first is declared in ``engine/prefetch.py`` (light).
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import TYPE_CHECKING

from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals, Monitor
from verltop.model import Snapshot
from verltop.sources.config import Endpoint
from verltop.sources.wire import Prefetch

if TYPE_CHECKING:
    from verltop.model import ObjectStoreReport


class OneShotError(Exception):
    """Why a one-shot command has nothing to show; its text is the line the user reads."""


def monitor(endpoint: Endpoint, intervals: Intervals, stall: StallSettings, use_local: bool = True,
            ras_addrs: tuple[str, ...] = (), nvml: bool | None = True, prefetch: Prefetch | None = None) -> Monitor:
    """A monitor for a one-shot command; ``nvml=None``: only where an NVIDIA device exists (a dump reads
    GPU use to tell a rank waiting on its GPU; a snapshot on a CPU-only head node skips pynvml's import). ``prefetch``: the reads
    ``engine.prefetch`` sent before the engine was imported, for the client to take."""
    mon = Monitor(endpoint, intervals, stall, use_local=use_local, ras_addrs=ras_addrs, use_nvml=nvml)
    mon.client.prefetch = prefetch
    return mon


async def snapshot(mon: Monitor, cpu_window_s: float = 0.0, remote_processes: bool = False) -> Snapshot:
    """Every source once (``verltop snapshot``), the monitor stopped after. ``remote_processes`` needs ray
    on this machine (the probe); raises ``OneShotError`` when it is missing or the dashboard gave nothing."""
    if remote_processes and importlib.util.find_spec("ray") is None:
        raise OneShotError("--remote-processes needs ray on this machine (pip install 'ray[default]')")
    try:
        await mon.poll_once(seed=True, cpu_window_s=cpu_window_s, ras=True, remote_processes=remote_processes)
        if not mon.has_data:
            err = mon.connection_problem()
            raise OneShotError(err.text if err else "no answer from the dashboard")
        # one poll has no history: memory by phase needs a watch's (``--watch-dir``), the JSON says so
        return replace(mon.snapshot(), memory=None)
    finally:
        await mon.stop()


async def object_store(mon: Monitor, limit: int, timeout_s: float) -> ObjectStoreReport:
    """``verltop memory``: the actors (who holds what), then the object store; the monitor stopped after.
    Raises ``OneShotError`` when the dashboard gave nothing at all."""
    try:
        await mon.poll_once(seed=False, node_details=False)
        report = await mon.object_store(limit, timeout_s)
        if not mon.has_data and not report.nodes:
            err = mon.connection_problem()
            raise OneShotError(err.text if err else report.problem or "no answer from the dashboard")
        return report
    finally:
        await mon.stop()
