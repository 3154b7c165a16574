"""The monitor's publisher against a real HTTP server (the synthetic dashboard): the first snapshot is shown
as soon as the cluster answers, not one publish interval later; one build at a time."""

from __future__ import annotations

import asyncio
import threading
import time

from tests.fakeray import FakeDashboard
from tests.wait import wait_until_async
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
            await wait_until_async(lambda: got, 5, "a first snapshot", step=0.05)
        finally:
            await mon.stop()
    assert got[0] < 3.0, f"first snapshot after {got[0]:.1f} s: it waited for the publish interval"
    assert mon.snapshots_built >= 1 and mon.latest is not None and mon.latest.actors


async def test_builds_never_overlap():
    """The publisher's build and ``publish_now``'s share the history, the trends and the memos: a second waits
    for the first (each build held 50 ms in its thread here, so two at once would show)."""
    iv = Intervals(actors_s=0.1, tasks_s=0.1, nodes_s=1.0, node_detail_s=0.1, timeout_s=5.0)
    async with FakeDashboard(nodes=2, gpus_per_node=2) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), iv, use_local=False)
        inside, most, lock = [0], [0], threading.Lock()
        build = mon._build

        def held(*args):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            try:
                time.sleep(0.05)
                return build(*args)
            finally:
                with lock:
                    inside[0] -= 1

        mon._build = held
        mon.start()
        try:
            await wait_until_async(lambda: mon.has_data, 10, "the actors' first answer")
            for _ in range(5):
                await asyncio.gather(mon.publish_now(), mon.publish_now())
            await wait_until_async(lambda: mon.snapshots_built >= 2, 10, "two builds of the publisher's own")
        finally:
            await mon.stop()
    assert most[0] == 1
