"""The engine's timeline against the synthetic Ray 2.60 dashboard (a real HTTP server): steps cut from the
polls of a verl job's running tasks and made exact from its finished tasks, with bounded reads."""

from __future__ import annotations

import pytest

from tests.fakeray import FakeCluster, FakeDashboard
from tests.wait import wait_until_async
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.config import Endpoint
from verltop.text.contract import snapshot_json

IV = Intervals(actors_s=0.5, tasks_s=0.5, nodes_s=5.0, node_detail_s=5.0, waiting_s=1.0, timeout_s=5.0)


def monitor(url: str, **kw) -> Monitor:
    return Monitor(Endpoint(url, "--address", None, None), IV, use_local=False, **kw)


async def wait_steps(mon: Monitor, n_done: int, timeout: float) -> tuple:
    """The snapshot's steps once ``n_done`` of them are finished and exact."""
    seen: list = [()]

    async def steps() -> tuple | None:
        snap = await mon.publish_now()
        seen[0] = snap.steps if snap else ()
        return seen[0] if sum(1 for s in seen[0] if not s.running and s.exact) >= n_done else None

    return await wait_until_async(steps, timeout, f"{n_done} finished exact steps", step=0.5,
                                  detail=lambda: [(s.index, s.running, s.exact) for s in seen[0]])


async def test_steps_match_the_jobs_phases_and_are_exact():
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=2, speed=10.0, history_s=15.0)  # 6.6 s steps
    async with FakeDashboard(c) as fd:
        mon = monitor(fd.url)
        mon.start()
        try:
            steps = await wait_steps(mon, 4, timeout=45)
        finally:
            await mon.stop()
    gen = next(i for i, p in enumerate(c._phases) if p.name == "gen")
    for s in (s for s in steps if not s.running and s.exact):
        k = round((s.started_at - c.train_start) / c.step_len) + 1
        g0, _ = c._bounds(k, gen)
        assert g0 + 0.01 <= s.started_at <= g0 + 0.07  # the agent loops' first generate_sequences
        assert s.duration_s == pytest.approx(c.step_len, abs=0.1)
        for i, p in enumerate(c._phases):
            name = {"update_weights": "weight_sync", "adv": "other"}.get(p.name, p.name)
            got = s.phase_s(name)
            assert got is not None, (s.index, name)
            if p.name == "adv":
                continue
            dur = c._durs[i]
            assert dur - 0.07 - 0.03 * dur <= got <= dur + 0.001, (s.index, name, got, dur)
        assert dict(s.skew_s)["update_actor"] < 0.03 * c._durs[-2] + 0.01
    st = mon.timeline.stats
    assert st.rounds >= 1 and st.failed == 0
    assert st.requests <= 12 * st.rounds  # a few reads per completed step


async def test_no_timeline_reads_no_finished_tasks():
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=2, speed=10.0, history_s=15.0)
    async with FakeDashboard(c) as fd:
        mon = monitor(fd.url, timeline=False)
        mon.start()
        try:
            # a step finishes while the monitor polls: a timeline would read it
            shown: list = []
            mon.subscribe(shown.append)
            k0 = c.position()["step"]
            await wait_until_async(lambda: c.position()["step"] > k0 and len(shown) >= 3, 20,
                                   "a step to finish while the monitor polls", detail=lambda: (c.position(), len(shown)))
            n = len(shown)
            await wait_until_async(lambda: len(shown) >= n + 2, 10, "two snapshots after it")
            snap = await mon.publish_now()
        finally:
            await mon.stop()
        assert snap is not None and snap.steps == ()
        assert mon.timeline.stats.requests == 0


async def test_one_shot_snapshot_fills_steps_from_the_seed():
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=2, speed=10.0, history_s=40.0)
    async with FakeDashboard(c) as fd:
        mon = monitor(fd.url)
        await mon.poll_once()
        snap = mon.snapshot()
        await mon.stop()
    done = [s for s in snap.steps if not s.running]
    # exact from Ray's events; the last one ends where the running step's observed start says
    assert len(done) >= 4 and all(s.exact for s in done[:-1])
    doc = snapshot_json(snap)["steps"][-2]
    assert set(doc) == {"index", "started_at", "duration_s", "phases", "skew_s"}
    assert doc["duration_s"] == pytest.approx(c.step_len, abs=0.1)
    assert doc["phases"]["update_actor"] > 0 and doc["phases"]["reward"] is None  # no reward model here


async def test_a_hung_step_gets_its_finished_phases_read_exactly():
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=2, speed=10.0, history_s=40.0)  # 6.3 s steps
    async with FakeDashboard(c) as fd:
        mon = monitor(fd.url)
        mon.start()
        try:
            await wait_steps(mon, 3, timeout=30)
            await wait_until_async(lambda: c.position()["phase"] in ("update_critic", "update_actor"), 15,
                                   "an update phase", step=0.05)
            c.set_hang(rank=1)  # freezes the phase running now: every rank stays in it
            last: list = [None]

            async def hung_read_exactly():
                snap = await mon.publish_now()
                cur = last[0] = snap.steps[-1]
                done = [r for r in cur.runs if r.end_s is not None]
                return cur.running and snap.taken_at - cur.started_at > 3.5 * c.step_len and done and \
                    all(r.exact for r in done) and cur

            cur = await wait_until_async(hung_read_exactly, 40, "the hung step's finished phases read exactly",
                                         step=1.0, detail=lambda: [(r.phase, r.exact, r.end_s) for r in last[0].runs])
        finally:
            await mon.stop()
    hung = [r for r in cur.runs if r.end_s is None]
    assert hung and all(r.running == r.ranks for r in hung)
