"""The monitor's publisher against a real HTTP server (the synthetic dashboard): the first snapshot is shown
as soon as the cluster answers, not one publish interval later."""

from __future__ import annotations

import asyncio
import time

from tests.fakeray import FakeDashboard
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.config import Endpoint


async def test_first_snapshot_is_published_when_the_first_answers_arrive():
    # a publish interval much longer than the dashboard's answers: waiting one out would show plainly
    iv = Intervals(actors_s=6.0, tasks_s=6.0, nodes_s=15.0, node_detail_s=6.0, timeout_s=5.0)
    async with FakeDashboard(nodes=2, gpus_per_node=2) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), iv, use_local=False)
        got: list[float] = []
        t0 = time.monotonic()
        mon.subscribe(lambda snap: got.append(time.monotonic() - t0))
        mon.start()
        try:
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.05)
        finally:
            await mon.stop()
    assert got, "no snapshot within 5 s"
    assert got[0] < 3.0, f"first snapshot after {got[0]:.1f} s: it waited for the publish interval"
    assert mon.snapshots_built >= 1 and mon.latest is not None and mon.latest.actors
