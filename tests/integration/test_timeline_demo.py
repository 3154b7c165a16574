"""The step timeline on the demo's real verl job: `t` shows each step's phases with the durations the job's
own controller measured; a rank that finishes update_actor late shows as a growing arrival skew; a
collective hang keeps its step open; `snapshot --json` carries steps, memory peaks and the object store.

Healthy-job tests first; the late-rank test releases its own hang; the ``hung_demo`` test comes last.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.wait import pilot_wait, wait_until, wait_until_async
from verltop.engine.monitor import Intervals, Monitor
from verltop.model import PHASES
from verltop.sources.config import Endpoint
from verltop.ui.app import VerltopApp
from verltop.ui.screens.timeline import TimelineScreen
from verltop.ui.widgets.step_chart import step_detail

pytestmark = pytest.mark.ray

POLL_S = 1.0
IV = Intervals(actors_s=POLL_S, tasks_s=POLL_S, nodes_s=5.0, node_detail_s=5.0, timeout_s=10.0)
# the controller's phase names (progress/phases.jsonl) -> the timeline's
DEMO_PHASE = {"gen": "gen", "reward": "reward", "old_log_prob": "old_log_prob", "ref": "ref", "values": "values",
              "update_critic": "update_critic", "update_actor": "update_actor", "update_weights": "weight_sync"}


def endpoint(demo) -> Endpoint:
    return Endpoint(demo.address, "--address", demo.token, "demo")


def wait_step(demo, n: int, timeout: float = 120) -> None:
    wait_until(lambda: demo.progress().get("step", 0) >= n, timeout, f"the demo at step {n}", step=0.5,
               detail=demo.progress)


async def snapshot_after(mon: Monitor, t: float, timeout: float = 20):
    """The monitor's first snapshot taken after ``t`` (wall clock)."""
    return await wait_until_async(lambda: (s := mon.latest) is not None and s.taken_at > t and s, timeout,
                                  "a snapshot taken after that moment", step=0.2)


def demo_steps(demo) -> dict[int, dict[str, float]]:
    """step -> {phase: seconds} by the controller's clock (a phase lasts until the next one begins), plus
    ``_start`` and ``_len`` (to the next step's start)."""
    log = demo.phase_log()
    out: dict[int, dict[str, float]] = {}
    for a, b in itertools.pairwise(log):
        st = out.setdefault(a["step"], {})
        if a["phase"] == "gen":
            st["_start"] = a["time"]
        if a["phase"] in DEMO_PHASE:
            st[DEMO_PHASE[a["phase"]]] = b["time"] - a["time"]
    for k, st in out.items():
        if k + 1 in out and "_start" in st and "_start" in out[k + 1]:
            st["_len"] = out[k + 1]["_start"] - st["_start"]
    return out


async def test_t_shows_each_steps_phases_as_the_job_timed_them(demo):
    wait_step(demo, 3)
    app = VerltopApp.live(endpoint(demo), IV, use_local=True)
    async with app.run_test(size=(200, 50)) as pilot:
        start = time.time()
        await pilot.pause(1)
        await pilot.press("t")
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        # two steps that ran while we watched (a step is ~10 s), made exact from Ray's task events
        watched = await pilot_wait(
            pilot, lambda: (w := [s for s in screen.steps if s.started_at > start and not s.running and s.exact])
            and len(w) >= 2 and w, 90, "two exact steps watched", step=0.5,
            detail=lambda: [(s.index, s.running, s.exact) for s in screen.steps])
        shown = str(screen.query_one("#timeline-steps").render())
        assert f"#{watched[-1].index}" in shown and "gen" in shown
        stats = app.engine.timeline.stats
    truth = demo_steps(demo)
    worst = 0.0
    for s in watched:
        k = min(truth, key=lambda k: abs(truth[k].get("_start", 0.0) - s.started_at))
        want = truth[k]
        assert abs(want["_start"] - s.started_at) < 0.5, (s.index, k)
        assert s.duration_s == pytest.approx(want["_len"], abs=POLL_S)
        for phase in DEMO_PHASE.values():
            got = s.phase_s(phase)
            assert got is not None, (s.index, phase, s.phases)
            assert got == pytest.approx(want[phase], abs=POLL_S), (s.index, phase, got, want[phase])
            worst = max(worst, abs(got - want[phase]))
        assert s.phase_s("other") > 0  # the controller's advantage computation
    print(f"\ntimeline vs the job's clock: worst phase difference {worst * 1000:.0f} ms over {len(watched)} steps; "
          f"refinement {stats.rounds} rounds, {stats.requests} requests, {stats.rows} rows")


def test_snapshot_json_has_steps_peaks_and_object_store(demo):
    wait_step(demo, 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if demo.token:
        env["RAY_AUTH_TOKEN"] = demo.token
    exe = Path(sys.executable).parent / "verltop"
    p = subprocess.run([str(exe), "--address", demo.address, "snapshot", "--json"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    steps = doc["steps"]
    assert steps and all(set(s) == {"index", "started_at", "duration_s", "phases", "skew_s"} for s in steps)
    assert all(set(s["phases"]) == set(PHASES) for s in steps)
    done = [s for s in steps if s["duration_s"] is not None]
    assert done and [s["index"] for s in steps] == sorted(s["index"] for s in steps)
    last = done[-1]
    assert 5 < last["duration_s"] < 60 and last["phases"]["gen"] > 0 and last["phases"]["update_actor"] > 0
    assert last["skew_s"]["update_actor"] is not None and last["skew_s"]["update_actor"] >= 0
    wd = [a for a in doc["actors"] if a["worker_group"]]
    assert len(wd) == 8
    assert all("gpu_mem_peak_bytes" in a and a["gpu_mem_peak_bytes"] is None for a in wd)  # CPU-only demo
    assert all(a["rss_peak_bytes"] and a["rss_peak_bytes"] >= a["rss_bytes"] for a in wd)
    (node,) = doc["nodes"]
    assert node["object_store_total_bytes"] and node["object_store_used_bytes"] is not None


async def test_a_late_rank_shows_as_a_growing_skew(demo):
    wait_step(demo, 2)
    mon = Monitor(endpoint(demo), IV, use_local=False)
    mon.start()
    try:
        demo.request_hang("late")
        await wait_until_async(demo.hung, 60, "the late hang", step=0.5, detail=demo.progress)
        since = demo.hang_info()["since"]
        seen = []
        t = time.time()
        for _ in range(3):  # three snapshots of the monitor's own polls, a few of them apart
            snap = await snapshot_after(mon, t + 3 * POLL_S)
            t = snap.taken_at
            cur = snap.steps[-1]
            run = next(r for r in cur.runs if r.phase == "update_actor")
            seen.append((snap.taken_at, run))
        for t, run in seen:
            # its three peers finished; rank 2 still runs (stuck after its last collective)
            assert run.running == 1 and run.ranks == 4 and run.late_rank == 2, run
            assert run.skew_s == pytest.approx(t - since, abs=2 * POLL_S + 1.0), (t - since, run)
        (t0, r0), (t1, r1) = seen[0], seen[-1]
        assert r1.skew_s - r0.skew_s == pytest.approx(t1 - t0, abs=POLL_S)
        text = step_detail(snap.steps[-1], snap.taken_at).plain
        assert "rank 2 still runs actor_rollout_update_actor" in text, text
        print(f"\nlate rank: skew {r0.skew_s:.1f} s → {r1.skew_s:.1f} s over {t1 - t0:.1f} s")
    finally:
        demo.release_hang()
        hung_step = demo.progress().get("step", 0)
        wait_until(lambda: not demo.hung() and demo.progress().get("step", 0) > hung_step, 45,
                   "the job to resume", step=0.5, detail=demo.progress)
        await mon.stop()


async def test_a_collective_hang_keeps_its_step_open(hung_demo):
    mon = Monitor(endpoint(hung_demo), IV, use_local=False)
    mon.start()
    try:
        # two snapshots of the hung step, once the monitor has read the job's finished runs (before, a
        # snapshot knows only the running tasks and numbers the steps from 1), the second a few polls later
        await wait_until_async(lambda: mon.seeded, 30, "the monitor's read of the finished runs")
        seeded = time.time()
        a = await wait_until_async(lambda: (s := mon.latest) and s.taken_at > seeded and any(
            r.phase == "update_actor" for r in s.steps[-1].runs) and s, 30, "the hung update_actor in a snapshot",
            detail=lambda: mon.latest and [(x.index, x.running) for x in mon.latest.steps])
        b = await snapshot_after(mon, a.taken_at + 3 * POLL_S)
    finally:
        await mon.stop()
    ra = next(r for r in a.steps[-1].runs if r.phase == "update_actor")
    rb = next(r for r in b.steps[-1].runs if r.phase == "update_actor")
    assert a.steps[-1].running and b.steps[-1].index == a.steps[-1].index
    assert rb.running == rb.ranks == 4 and rb.skew_s is None  # nobody finished: no arrival to compare
    assert rb.duration_s(b.taken_at) - ra.duration_s(a.taken_at) == pytest.approx(b.taken_at - a.taken_at, abs=0.1)
