"""Step segmentation on verl's real method names: the legacy RayPPOTrainer (sync and agent-loop rollout,
validation, checkpoint, critic warmup), the v0.9 v1 trainer (generation queued ahead), one-step-off, a hung
update; and on a real Ray 2.60 capture of a verl colocated group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verltop.analysis import roles as R
from verltop.analysis.steps import CallView, build_steps, median_step_s, segment, skew, union_s
from verltop.analysis.timeline import StepTracker
from verltop.sources import parse

FIX = Path(__file__).parent.parent / "fixtures" / "ray-2.60"


def call(method: str, start: float, end: float | None, group: str = "wg", ranks: int = 4,
         first_end: float | None = None, running: int | None = None, late: str | None = None) -> CallView:
    phase = R.phase_of_method(method)
    assert phase is not None, method
    run = (ranks if end is None and first_end is None else 0) if running is None else running
    fe = first_end if first_end is not None else end
    return CallView(group, method, phase, start, end if not run else None, end if end is not None else start, fe,
                    ranks, run, late)


def legacy_step(t: float, rm: bool = True, weights: bool = False, prefix: str = "actor_rollout") -> list[CallView]:
    """One step of RayPPOTrainer.fit with a colocated actor_rollout+critic(+ref) group, 10 s long."""
    out = [call(f"{prefix}_generate_sequences", t, t + 3)]
    if rm:
        out.append(call("rm_compute_rm_score", t + 3.1, t + 3.6, group="rmg", ranks=2))
    out += [call(f"{prefix}_compute_log_prob", t + 3.7, t + 4.5),
            call("ref_compute_ref_log_prob", t + 4.6, t + 5.3, group="refg", ranks=2),
            call("critic_compute_values", t + 5.4, t + 6.0),
            call("critic_update_critic", t + 6.3, t + 7.5),  # 6.0-6.3: advantages in the controller
            call(f"{prefix}_update_actor", t + 7.6, t + 9.4)]
    if weights:
        out.append(call(f"{prefix}_update_weights", t + 9.5, t + 9.9))
    return out


def starts(steps) -> list[float]:
    return [round(s.started_at, 3) for s in steps]


def test_legacy_sync_rollout_steps_begin_at_generation():
    calls = legacy_step(100) + legacy_step(110) + legacy_step(120)[:3]
    steps = build_steps(calls, now=125.0)
    assert starts(steps) == [100, 110, 120]
    assert [s.duration_s for s in steps] == [10, 10, None]
    s = steps[0]
    assert [p for p, _ in s.phases] == ["gen", "reward", "old_log_prob", "ref", "values", "update_critic",
                                         "update_actor", "other"]
    assert s.phase_s("gen") == pytest.approx(3.0) and s.phase_s("update_actor") == pytest.approx(1.8)
    # the gaps between calls (dispatch, advantages in the controller, the end of the step) are "other"
    assert s.phase_s("other") == pytest.approx(10 - 3 - 0.5 - 0.8 - 0.7 - 0.6 - 1.2 - 1.8)
    assert steps[-1].running and steps[-1].phase_s("old_log_prob") == pytest.approx(0.8)


def test_agent_loop_rollout_with_weight_sync_validation_and_checkpoint():
    """verl ≥0.7 default: AgentLoopWorker generates, the WorkerDict keys are actor_rollout_ref; v0.8 syncs the
    weights before the first step; every few steps _validate generates again and save_checkpoint runs."""
    pre = [call("actor_rollout_ref_update_weights", 90, 91)]  # checkpoint_manager.update_weights() before fit
    s1 = legacy_step(100, rm=False, weights=True, prefix="actor_rollout_ref")
    s1[0] = call("generate_sequences", 100, 103, group="AgentLoopWorker", ranks=8)
    val = [call("generate_sequences", 110.0, 111.5, group="AgentLoopWorker", ranks=8),  # _validate
           call("actor_rollout_ref_save_checkpoint", 111.6, 113.0)]
    s2 = legacy_step(114, rm=False, weights=True, prefix="actor_rollout_ref")
    s2[0] = call("generate_sequences", 114, 117, group="AgentLoopWorker", ranks=8)
    steps = build_steps(pre + s1 + val + s2, now=130.0)
    assert starts(steps) == [100, 114]  # the initial sync is no step; validation belongs to step 1
    s = steps[0]
    assert s.duration_s == pytest.approx(14.0)
    assert s.phase_s("gen") == pytest.approx(3.0)  # training generation only
    assert s.phase_s("save") == pytest.approx(1.4) and s.phase_s("weight_sync") == pytest.approx(0.4)
    assert s.phase_s("other") == pytest.approx(14.0 - 3 - 0.8 - 0.7 - 0.6 - 1.2 - 1.8 - 0.4 - 1.4)
    assert [r.phase for r in s.runs][-2:] == ["other", "save"]


def test_v1_trainer_generation_queued_ahead_overlaps_the_update():
    """v0.9 TaskRunnerV1: AgentLoopWorkerTQ generates the next batch while the trainer updates; a step starts
    at old_log_prob, the first call before training after the previous update_weights ended."""
    calls = []
    for k in range(3):
        t = 100.0 + 10 * k
        calls += [call("actor_rollout_ref_compute_log_prob", t, t + 1),
                  call("actor_rollout_ref_compute_ref_log_prob", t + 1.1, t + 2),
                  call("critic_infer_batch", t + 2.1, t + 3),
                  call("critic_train_mini_batch", t + 3.2, t + 5),
                  call("actor_rollout_ref_update_actor", t + 5.1, t + 8),
                  # the next batch's generation, queued while the update runs
                  call("generate_sequences", t + 6, t + 9.5, group="AgentLoopWorkerTQ", ranks=4),
                  call("actor_rollout_ref_update_weights", t + 8.1, t + 9.9)]
    steps = build_steps(calls, now=131.0)
    assert starts(steps) == [100, 110, 120]
    assert steps[0].phase_s("gen") == pytest.approx(3.5)
    assert steps[0].phase_s("values") == pytest.approx(0.9) and steps[0].phase_s("update_critic") == pytest.approx(1.8)


def test_one_step_off_rollout_group_generates_during_training():
    """one_step_off_policy: a separate rollout group (keys actor / rollout) generates step k+1 while the
    trainer works on step k; the step still starts when the trainer's next call does."""
    calls = []
    for k in range(3):
        t = 100.0 + 10 * k
        calls += [call("rollout_generate_sequences", t + 0.05, t + 7, group="rollout_pool", ranks=4),
                  call("actor_compute_log_prob", t, t + 1, group="trainer_pool"),
                  call("actor_update_actor", t + 2, t + 8, group="trainer_pool"),
                  call("rollout_update_weights", t + 8.5, t + 9.5, group="rollout_pool")]
    steps = build_steps(calls, now=131.0)
    assert starts(steps) == [100, 110, 120]
    assert all(s.phase_s("gen") == pytest.approx(6.95) for s in steps)


def test_critic_warmup_steps_have_no_actor_update():
    calls = []
    for k in range(4):
        s = legacy_step(100 + 10 * k, rm=False)
        calls += s if k >= 2 else s[:-1]  # critic_warmup=2: no update_actor in the first two steps
    steps = build_steps(calls, now=141.0)
    assert starts(steps) == [100, 110, 120, 130]
    assert steps[0].phase_s("update_actor") is None and steps[2].phase_s("update_actor") == pytest.approx(1.8)


def test_a_call_before_training_that_starts_while_the_update_runs_stays_in_the_step():
    calls = [call("actor_rollout_generate_sequences", 100, 103),
             call("actor_rollout_update_actor", 104, None, ranks=4),
             call("actor_rollout_generate_sequences", 105, 107, group="other_wg")]
    assert len(segment(calls)) == 1


def test_hung_update_skew_grows_with_the_clock_and_names_the_late_rank():
    # ranks 0, 1, 3 finished update_actor at 110; rank 2 still runs
    hung = call("actor_rollout_update_actor", 100, None, ranks=4, first_end=110.0, running=1, late="a2")
    calls = [*legacy_step(80)[:-1], call("actor_rollout_generate_sequences", 90, 95), hung]
    ranks = {"a2": 2}
    for now, want in ((120.0, 10.0), (1300.0, 1190.0)):
        steps = build_steps(calls, now=now, rank_of=ranks.get)
        cur = steps[-1]
        assert cur.running and dict(cur.skew_s)["update_actor"] == pytest.approx(want)
        run = next(r for r in cur.runs if r.phase == "update_actor")
        assert run.late_rank == 2 and run.running == 1 and run.duration_s(now) == pytest.approx(now - 100)
    # a collective hang: nobody finished, so there is no arrival skew, only a long running phase
    stuck = call("actor_rollout_update_actor", 100, None, ranks=4)
    assert skew(stuck, 500.0) is None


def test_skew_is_first_to_last_rank_finishing():
    c = call("critic_update_critic", 0, 12.0, first_end=2.0, late="a7")
    assert skew(c, 99.0) == pytest.approx(10.0)
    assert skew(call("critic_update_critic", 0, 5.0, ranks=1), 9.0) is None


def test_union_counts_overlaps_once():
    assert union_s([(0, 2), (1, 3), (5, 6), (6, 6)]) == pytest.approx(4.0)


def test_median_of_the_last_ten_finished_steps():
    calls = [c for k in range(14) for c in legacy_step(100 + 10 * k + (5 if k == 3 else 0), rm=False)]
    steps = build_steps(calls, now=300.0)
    assert median_step_s(steps) == pytest.approx(10.0)
    assert median_step_s(steps[-1:]) is None  # the running step has no duration yet


def test_real_ray_capture_of_a_verl_group_matches_the_drivers_step_times():
    """Ray 2.60's finished tasks of a real colocated actor_rollout+critic group (5 steps: generate 1.0 s,
    compute_values 0.5 s, update_critic 0.4 s, update_actor 0.8 s, 2 ranks), against the driver's own clock."""
    rows, _ = parse.tasks(json.loads((FIX / "D_step_timeline" / "tasks_finished_detail1.json").read_text()))
    info = json.loads((FIX / "D_step_timeline" / "_run_info.json").read_text())
    t = StepTracker()
    t.add_exact([(x.task_id, x.actor_id, "bXi1o1", R.method_of(x.func_name) or x.name, x.name,
                  x.start_time_ms / 1000, x.end_time_ms / 1000)
                 for x in rows if x.actor_id and x.start_time_ms and x.end_time_ms])
    steps = t.steps(info["steps"][-1]["end"] + 0.5)
    assert [s.index for s in steps] == [1, 2, 3, 4, 5]
    assert all(s.exact for s in steps)
    for s, d in zip(steps[1:-1], info["steps"][1:-1], strict=True):  # step 1 also created the workers
        assert s.started_at == pytest.approx(d["start"], abs=0.005)
        assert s.duration_s == pytest.approx(d["end"] - d["start"], abs=0.005)
    for s in steps[1:]:
        assert s.phase_s("gen") == pytest.approx(1.0, abs=0.01)
        assert s.phase_s("values") == pytest.approx(0.5, abs=0.01)
        assert s.phase_s("update_critic") == pytest.approx(0.4, abs=0.01)
        assert s.phase_s("update_actor") == pytest.approx(0.8, abs=0.01)
        assert max(v for _, v in s.skew_s) < 0.01
    # in step 1 rank 1 started (and finished) generation 147 ms after rank 0: its own __init__ ran later
    assert dict(steps[0].skew_s)["gen"] == pytest.approx(0.147, abs=0.002)
