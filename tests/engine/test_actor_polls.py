"""The actors' poll against the synthetic Ray 2.60 dashboard (a real HTTP server): a detail read keeps the
objects of the actors that did not change, so that the rows and caches keyed on them stand."""

from __future__ import annotations

from tests.fakeray import FakeCluster, FakeDashboard
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.config import Endpoint


async def test_a_detail_read_keeps_the_unchanged_actors_objects_and_renews_the_changed():
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=3)
    async with FakeDashboard(c) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), Intervals(timeout_s=5.0), use_local=False)
        try:
            await mon.poll_once(seed=True)
            before = {a.actor_id: a for a in mon.src.actors.value}
            dead = c.kill_rank(1)  # a state changed: the next poll reads the detail rows again
            await mon.poll_once()
            after = {a.actor_id: a for a in mon.src.actors.value}
        finally:
            await mon.stop()
    assert mon.src.actors.tries >= 2 and after.keys() == before.keys()
    assert after[dead.actor_id].state == "DEAD" and after[dead.actor_id] is not before[dead.actor_id]
    assert after[dead.actor_id].death_cause  # read from the detail rows, not the cheap state rows
    kept = [aid for aid in after if aid != dead.actor_id and after[aid] is before[aid]]
    assert len(kept) == len(after) - 1, [aid for aid in after if after[aid] is not before[aid]]
