"""The step timeline screen (`t`) against the synthetic dashboard, and its text rendering."""

from __future__ import annotations

from tests.wait import pilot_wait
from verltop.engine.monitor import Intervals
from verltop.model import PhaseRun, Step
from verltop.sources.config import Endpoint
from verltop.ui.app import VerltopApp
from verltop.ui.screens.timeline import TimelineScreen
from verltop.ui.widgets.step_chart import (
    header_text,
    scale_s,
    skew_sentence,
    step_detail,
    step_line,
    worst_skew,
)


def run(phase, method, start, end, ranks=4, running=0, skew=None, late=None, group="wg") -> PhaseRun:
    return PhaseRun(phase, group, method, start, end, ranks, running, skew, late, None, exact=True)


STEP = Step(7, 100.0, 10.0, (run("gen", "actor_rollout_generate_sequences", 100, 103),
                             run("old_log_prob", "actor_rollout_compute_log_prob", 103.2, 104.5),
                             run("update_actor", "actor_rollout_update_actor", 105, 109.5, skew=0.02, late=3)),
            (("gen", 3.0), ("old_log_prob", 1.3), ("update_actor", 4.5), ("other", 1.2)),
            (("update_actor", 0.02),), exact=True)
HUNG = Step(8, 110.0, None, (run("gen", "actor_rollout_generate_sequences", 110, 113),
                             run("update_actor", "actor_rollout_update_actor", 114, None, running=1, skew=1200.0,
                                 late=7)),
            (("gen", 3.0), ("update_actor", 5.0)), (("update_actor", 1200.0),))


def test_step_line_places_phases_and_labels_them():
    line = step_line(STEP, 80, scale_s([STEP], 200.0), now=200.0).plain
    assert line.startswith("  #7") and "10s" in line[:17]
    bar = line[17:]
    assert bar.index("gen 3s") < bar.index("1.3s") < bar.index("actor 4.5s")
    assert len(line) <= 17 + 80


def test_a_hung_step_runs_off_the_bar_and_is_called_out():
    steps = [STEP] * 5 + [HUNG]
    scale = scale_s(steps, now=1400.0)
    assert scale == 30.0  # 3x the median: the hung step does not squash the others
    line = step_line(HUNG, 60, scale, now=1400.0, selected=True).plain
    assert line.startswith("▸ #8") and line.rstrip().endswith("»◀")
    w = worst_skew(HUNG)
    assert w is not None and w.late_rank == 7
    assert skew_sentence(w, 1400.0) == ("rank 7 still runs actor_rollout_update_actor, 20m00s after the first of "
                                        "its 3 finished peers")
    assert "rank 7 still runs" in step_detail(HUNG, 1400.0).plain
    head = header_text(steps, 1400.0).plain
    assert head.startswith("step 8") and "10s/step" in head and "1 of 4 ranks still running" in head


def test_no_steps_says_why():
    assert header_text([], 0.0).plain.startswith("no training steps seen yet")


async def test_t_opens_the_timeline_on_a_live_job():
    from tests.fakeray import FakeCluster, FakeDashboard

    c = FakeCluster(nodes=1, gpus_per_node=4, seed=3, speed=10.0, history_s=30.0)
    async with FakeDashboard(c) as fd:
        iv = Intervals(actors_s=0.5, tasks_s=0.5, nodes_s=5, node_detail_s=5, timeout_s=5)
        app = VerltopApp.live(Endpoint(fd.url, "--address", None, None), iv, use_local=False)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.press("t")
            screen = app.screen
            assert isinstance(screen, TimelineScreen)
            await pilot_wait(pilot, lambda: sum(1 for s in screen.steps if not s.running) >= 3, 20,
                             "three finished steps on the timeline", step=0.2, detail=lambda: len(screen.steps))
            text = str(screen.query_one("#timeline-steps").render())
            last = screen.steps[-1]
            assert f"#{last.index}" in text and "gen" in text and last.running
            assert str(screen.query_one("#timeline-header").render()).startswith(f"step {last.index}")
            await pilot.press("k")  # the step before
            assert screen.selected == screen.steps[-2].index
            assert f"step {screen.steps[-2].index}" in str(screen.query_one("#timeline-detail").render())
            await pilot.press("end")
            assert screen.selected is None
            await pilot.press("escape")
            assert not isinstance(app.screen, TimelineScreen)
