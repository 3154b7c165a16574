"""The actors' poll against the synthetic Ray 2.60 dashboard (a real HTTP server): a detail read keeps the
objects of the actors that did not change, so that the rows and caches keyed on them stand."""

from __future__ import annotations

from tests.fakeray import FakeClock, FakeCluster, FakeDashboard
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


async def test_a_node_report_read_again_is_neither_parsed_nor_booked_again():
    # the agent reports every 5 s and the dashboard caches 2 s: a node on screen is read every poll, and about
    # half the reads are the report read before; its node object stands, so that the rows on it stand too
    clk = FakeClock()
    c = FakeCluster(nodes=2, gpus_per_node=2, seed=4, clock=clk)
    async with FakeDashboard(c) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), Intervals(timeout_s=5.0), use_local=False)
        fed: list[str] = []
        feed = mon.memory.feed_node
        mon.memory.feed_node = lambda node, *a, **kw: (fed.append(node.node_id), feed(node, *a, **kw))[1]
        try:
            await mon.poll_once(seed=True)
            first, booked = dict(mon.node_details), list(fed)
            await mon._poll_node_details(all_nodes=True)
            again, booked_again = dict(mon.node_details), list(fed)
            clk.advance(6.0)  # the next report
            await mon._poll_node_details(all_nodes=True)
            later = dict(mon.node_details)
        finally:
            await mon.stop()
    assert len(first) == 2 and sorted(booked) == sorted(first)
    assert all(again[n] is first[n] for n in first) and booked_again == booked
    assert all(later[n] is not first[n] for n in first) and len(fed) == len(booked) + 2


def test_the_detail_rows_safety_net_is_read_less_often_on_large_jobs():
    from verltop.engine.poll_actors import refresh_s
    from verltop.engine.polling import DETAIL_REFRESH_S

    assert refresh_s(0) == refresh_s(1000) == DETAIL_REFRESH_S
    assert refresh_s(10_000) == 10 * DETAIL_REFRESH_S  # a 7 MB read every 5 minutes, not every 30 s


class _Counting(dict):
    looked = 0

    def __contains__(self, k: object) -> bool:
        type(self).looked += 1
        return super().__contains__(k)


async def test_unchanged_states_are_not_looked_at_again_unless_a_detail_read_failed(monkeypatch):
    # the base columns every poll: bytes equal to the last ones, already checked against the detail rows, are
    # not checked again (1,024 rows every 2 s); a change whose detail read failed is looked at until one works
    from verltop.engine import poll_actors
    from verltop.model import Problem
    from verltop.sources import dashboard as D

    c = FakeCluster(nodes=1, gpus_per_node=4, seed=5)
    async with FakeDashboard(c) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), Intervals(timeout_s=5.0), use_local=False)
        details: list[bool] = []
        fetch = D.fetch_actors

        async def counted(*a, fail: list = [], **kw):  # noqa: B006 - shared on purpose: the failures to come
            details.append(bool(fail))
            if fail:
                fail.pop()
                return D.Result(None, Problem("http", "boom"), 0.0)
            return await fetch(*a, **kw)

        monkeypatch.setattr(poll_actors.D, "fetch_actors", counted)
        try:
            await mon.poll_once(seed=True)
            mon._actor_cache = _Counting(mon._actor_cache)
            await mon.poll_actors()  # checked once against the detail rows
            n = len(mon._actor_cache)
            assert _Counting.looked == n and mon._states_synced
            for _ in range(3):
                await mon.poll_actors()
            assert _Counting.looked == n  # the same bytes: no row looked at
            details.clear()
            counted.__kwdefaults__["fail"].append(True)  # the next detail read fails
            dead = c.kill_rank(2)
            await mon.poll_actors()
            await mon.poll_actors()  # the same base columns as the poll before, but not yet read in detail
            state = {a.actor_id: a.state for a in mon.src.actors.value}
            for _ in range(3):  # read: the same base columns again need no detail read
                await mon.poll_actors()
        finally:
            await mon.stop()
    assert details == [True, False] and state[dead.actor_id] == "DEAD"


async def test_running_tasks_detail_rows_are_read_where_a_start_cannot_be_estimated():
    # a task that appeared since the last poll started within its interval: its start is estimated; the 1.6 MB
    # detail rows (at 1,024 ranks) are read on the first poll, after a gap between polls, and now and then
    import time

    from verltop.engine.poll_tasks import TASK_DETAIL_REFRESH_S

    clk = FakeClock()
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=5, clock=clk, rollout_mode="sync")
    async with FakeDashboard(c) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), Intervals(timeout_s=5.0), use_local=False)

        def detail_reads() -> int:
            return sum(r.path == "/api/v0/tasks" and "detail=1" in r.query and "RUNNING" in r.query
                       for r in list(fd.stats.log))

        async def new_tasks() -> tuple[set[str], float, float]:
            """Move the job on until the running calls are others; poll; (their ids, the poll's time span)."""
            before = set(mon._task_starts)
            for _ in range(200):
                clk.advance(2.0)
                if {t["task_id"] for t in c.task_snapshot().running} - before:
                    break
            t0 = time.time()
            await mon._poll_tasks()
            return {t.task_id for t in mon.src.tasks.value or []} - before, t0, time.time()

        try:
            await mon.poll_once(seed=True)
            assert detail_reads() == 1 and mon._task_starts  # the first poll: every running call's start read
            prev = mon._last_task_poll
            fresh, _, t1 = await new_tasks()
            assert fresh and detail_reads() == 1  # polls an interval apart: estimated, no detail read
            starts = {mon._task_starts[t] / 1000 for t in fresh}
            assert all(prev <= s <= t1 for s in starts), (prev, starts, t1)  # the middle of the interval
            mon._last_task_poll = time.time() - 10 * mon.iv.tasks_s  # a gap: the polls in between failed
            fresh, _, _ = await new_tasks()
            assert fresh and detail_reads() == 2
            byid = {t["task_id"]: t for t in c.task_snapshot().running}
            assert all(mon._task_starts[t] == byid[t]["start_time_ms"] for t in fresh)  # read, not estimated
            fresh, _, _ = await new_tasks()
            assert fresh and detail_reads() == 2
            mon._task_detail_at = time.time() - TASK_DETAIL_REFRESH_S - 1  # the estimates put right now and then
            fresh, _, _ = await new_tasks()
            assert fresh and detail_reads() == 3
        finally:
            await mon.stop()
