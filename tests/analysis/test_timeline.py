"""The call tracker: what the polls see of a job's steps, how exact reads complete it, what it asks Ray for,
and that it stays bounded."""

from __future__ import annotations

import pytest

from verltop.analysis.timeline import KEEP_STEPS, StepTracker
from verltop.analysis.timeline_reads import NAME_ROWS_BUDGET, Query, ReadPlanner

# (task name, seconds) of one PPO step; 4 ranks of group "wg", the reward model on 2 ranks of "rm"
STEP = [("WorkerDict.actor_rollout_generate_sequences", 3.0), ("WorkerDict.rm_compute_rm_score", 0.4),
        ("WorkerDict.actor_rollout_compute_log_prob", 1.5), ("WorkerDict.critic_compute_values", 1.2),
        ("WorkerDict.critic_update_critic", 2.0), ("WorkerDict.actor_rollout_update_actor", 3.0),
        ("WorkerDict.actor_rollout_update_weights", 0.6)]
GAP = 0.3  # controller time between calls


class Job:
    """A simulated job: every run of every rank, with its true times."""

    def __init__(self, steps: int, t0: float = 1000.0, skew: dict[int, float] | None = None) -> None:
        self.runs: list[tuple[str, str, str, str, float, float]] = []  # tid, actor, group, name, start, end
        self.step_starts: list[float] = []
        t = t0
        for k in range(steps):
            self.step_starts.append(t)
            for name, secs in STEP:
                group, ranks = ("rm", 2) if "rm_" in name else ("wg", 4)
                end = t + secs
                for r in range(ranks):
                    late = (skew or {}).get(r, 0.0) if "update_actor" in name else 0.0
                    self.runs.append((f"{k}-{name}-{r}", f"{group}{r}", group, name, t + 0.01 * r,
                                      end - 0.05 * (ranks - 1 - r) + late))
                t = end + (skew or {}).get(max(range(4)), 0.0) * ("update_actor" in name) + GAP
        self.end = t

    def running(self, now: float):
        return [(tid, aid, g, name.split(".", 1)[1], name, None) for tid, aid, g, name, s, e in self.runs
                if s <= now < e]

    def finished(self, names: set[str] | None = None):
        return [(tid, aid, g, name.split(".", 1)[1], name, s, e) for tid, aid, g, name, s, e in self.runs
                if names is None or name in names]


def poll(t: StepTracker, job: Job, start: float, end: float, every: float = 2.0) -> float:
    now = start
    while now < end:
        t.observe(job.running(now), now)
        now += every
    return now


def test_observed_phases_are_within_half_a_poll_and_short_calls_are_missed():
    job = Job(3)
    t = StepTracker()
    poll(t, job, 1000.0, job.end + 1)
    steps = t.steps(job.end + 1)
    assert all(abs(s.started_at - w) <= 1.0 for s, w in zip(steps, job.step_starts, strict=True))  # half a poll
    s = steps[0]
    assert not s.exact and s.duration_s == pytest.approx(job.step_starts[1] - job.step_starts[0], abs=2.0)
    for phase, want in (("gen", 3.0), ("update_actor", 3.0), ("update_critic", 2.0)):
        assert s.phase_s(phase) == pytest.approx(want, abs=2.0)
    # 0.4 s and 0.6 s calls fall between 2 s polls
    assert any(st.phase_s("reward") is None or st.phase_s("weight_sync") is None for st in steps)


def test_exact_rows_complete_the_steps():
    job = Job(3)
    t = StepTracker()
    poll(t, job, 1000.0, job.end + 1)
    added = t.add_exact(job.finished())
    assert added > 0  # the calls no poll saw
    steps = t.steps(job.end + 1)
    assert [s.started_at for s in steps] == pytest.approx(job.step_starts)
    assert all(s.exact for s in steps[:-1])
    for s in steps:
        assert s.phase_s("reward") == pytest.approx(0.4) and s.phase_s("weight_sync") == pytest.approx(0.6)
        assert dict(s.skew_s)["update_actor"] == pytest.approx(0.15)  # ranks finish 50 ms apart


def test_unchanged_polls_keep_the_end_estimate_tight():
    job = Job(2)
    t = StepTracker()
    now = 1000.0
    while now < job.end:
        rows = job.running(now)
        t.observe(rows, now) if now < 1001 or int(now) % 10 == 0 else t.polled(now)  # answers rarely change
        now += 2.0
    gen = next(r for r in t.steps(now)[0].runs if r.phase == "gen")
    assert gen.end_s is not None and gen.end_s - gen.start_s < 12


def test_truncated_poll_finishes_nothing():
    t = StepTracker()
    t.observe([("a", "x", "wg", "actor_rollout_update_actor", "WorkerDict.actor_rollout_update_actor", 5.0)], 10.0)
    t.observe([], 12.0, complete=False)
    assert t.steps(13.0)[-1].runs[0].end_s is None
    t.observe([], 14.0)
    assert t.steps(15.0)[-1].runs[0].end_s == pytest.approx(13.0)


def observed(steps: int = 3, seed_rm: bool = False) -> tuple[Job, StepTracker]:
    job = Job(steps)
    t = StepTracker()
    if seed_rm:
        t.add_exact(job.finished({"WorkerDict.rm_compute_rm_score"})[:2])  # as the seed names it
    poll(t, job, 1000.0, job.end + 1)
    return job, t


def test_plan_reads_a_ranks_history_and_by_name_while_cheap():
    job, t = observed()
    p = ReadPlanner(t)
    queries, calls, through = p.plan()
    assert calls and through == pytest.approx(t.steps(job.end + 1)[-1].started_at)
    # one rank's whole history names every method of its group (those no poll saw too), once per group
    scans = [q for q in queries if q.name is None and q.task_id is None]
    assert [q.actor_id[:2] for q in scans] == ["wg"]
    assert all(q.name and q.actor_id is None for q in queries if q not in scans)
    assert "WorkerDict.actor_rollout_update_actor" in {q.name for q in queries}
    # a method no poll saw nor the seed named is not asked for by name ...
    assert "WorkerDict.rm_compute_rm_score" not in {q.name for q in queries}
    p.refined(calls, through)
    assert p.plan() == ([], [], through)  # nothing new until another step completes
    # ... until it is known: then the steps already checked are searched for it
    _, t = observed(seed_rm=True)
    p = ReadPlanner(t)
    assert "WorkerDict.rm_compute_rm_score" in {q.name for q in p.plan()[0]}


def test_plan_over_budget_reads_one_rank_then_single_tasks():
    _, t = observed(seed_rm=True)
    p = ReadPlanner(t)
    t.new_names.clear()  # as after a seed that held the whole history
    for name, _ in STEP:  # Ray holds more runs of these names, and of these ranks, than a read may cost
        t.record_rows(name, None, NAME_ROWS_BUDGET + 1)
    for a in ("wg0", "wg1", "wg2", "wg3", "rm0", "rm1"):
        t.record_rows(None, a, NAME_ROWS_BUDGET + 1)
    queries, calls, _ = p.plan()
    by_name = [q for q in queries if q.name]
    assert by_name and all(q.actor_id for q in by_name)  # one rank's runs of a method, for calls no poll saw
    assert {q.name for q in by_name} <= {"WorkerDict.rm_compute_rm_score", "WorkerDict.actor_rollout_update_weights"}
    tasks = [q for q in queries if q.task_id]
    assert tasks and len({q.task_id for q in tasks}) == len(tasks) and len(tasks) <= 3 * len(calls)
    _, t = observed(seed_rm=True)
    p = ReadPlanner(t)
    t.new_names.clear()
    for name, _ in STEP:
        t.record_rows(name, None, NAME_ROWS_BUDGET + 1)
        for a in ("wg0", "wg1", "wg2", "wg3", "rm0", "rm1", None):
            t.record_rows(None if a is None else name, a, NAME_ROWS_BUDGET + 1)
    for a in ("wg0", "wg1", "wg2", "wg3", "rm0", "rm1"):
        t.record_rows(None, a, NAME_ROWS_BUDGET + 1)
    queries, _, _ = p.plan()
    assert queries and all(q.task_id for q in queries)


def test_refinement_by_task_id_makes_the_extremes_exact():
    job = Job(2)
    t = StepTracker()
    p = ReadPlanner(t)
    poll(t, job, 1000.0, job.end + 1)
    for name, _ in STEP:
        t.record_rows(name, None, 10_000)
        for a in ("wg0", "wg1", "wg2", "wg3", "rm0", "rm1"):
            t.record_rows(name, a, 10_000)
    queries, calls, through = p.plan(max_queries=1000)
    want = {q.task_id for q in queries}
    t.add_exact([f for f in job.finished() if f[0] in want])
    p.refined(calls, through)
    s = t.steps(job.end + 1)[0]
    ua = next(r for r in s.runs if r.phase == "update_actor")
    true = [r for r in job.runs if r[0].startswith("0-WorkerDict.actor_rollout_update_actor")]
    assert ua.start_s == pytest.approx(min(r[4] for r in true)) and ua.end_s == pytest.approx(max(r[5] for r in true))
    assert ua.skew_s == pytest.approx(0.15)


def test_late_rank_skew_is_seen_live_by_the_polls():
    job = Job(1, skew={2: 60.0})  # rank 2 finishes update_actor a minute after its peers
    t = StepTracker()
    ua = next(r for r in job.runs if "update_actor" in r[3] and r[1] == "wg0")
    poll(t, job, 1000.0, ua[5] + 30)
    cur = t.steps(ua[5] + 30, rank_of={"wg2": 2}.get)[-1]
    run = next(r for r in cur.runs if r.phase == "update_actor")
    assert run.running == 1 and run.late_rank == 2
    assert run.skew_s == pytest.approx(30, abs=2.5)


def test_bounded_over_a_long_job():
    job = Job(120)
    t = StepTracker()
    poll(t, job, 1000.0, job.end + 1, every=1.0)
    steps = t.steps(job.end + 1)
    assert len(steps) == KEEP_STEPS
    assert steps[-1].index == 120 and steps[0].index == 120 - KEEP_STEPS + 1
    assert len(t.calls) <= (KEEP_STEPS + 16) * len(STEP)
    assert len(t.live) <= 8 * len(STEP) * 4  # per-rank runs only for the last few steps
    # an exact row of a step that was dropped is not brought back
    assert t.add_exact(job.finished({"WorkerDict.critic_update_critic"})[:4]) == 0


def test_runs_of_one_dispatch_form_one_call_and_the_next_dispatch_another():
    t = StepTracker()
    name = "WorkerDict.critic_update_critic"
    t.add_exact([("a", "r0", "wg", "critic_update_critic", name, 10.0, 12.0),
                 ("b", "r1", "wg", "critic_update_critic", name, 10.1, 12.5),
                 ("c", "r0", "wg", "critic_update_critic", name, 20.0, 22.0)])
    assert [(c.n, c.start_s, c.end_s) for c in t.calls] == [(2, 10.0, 12.5), (1, 20.0, 22.0)]


def test_query_shapes():
    assert Query(name="x") != Query(name="x", actor_id="a")


def test_a_stuck_step_plans_its_finished_calls_once():
    job = Job(3)
    # step 3's update_actor: rank 2 finishes ten minutes after its peers; nothing after it has begun
    last = "2-WorkerDict.actor_rollout_update_actor-2"
    job.runs = [(r[0], r[1], r[2], r[3], r[4], r[5] + 600) if r[0] == last else r for r in job.runs
                if not (r[0].startswith("2-") and "update_weights" in r[0])]
    ua = next(r for r in job.runs if r[0] == last)
    t = StepTracker()
    p = ReadPlanner(t)
    t.add_exact(job.finished({"WorkerDict.rm_compute_rm_score"})[:4])  # as the seed names it
    poll(t, job, 1000.0, ua[5] - 300)
    queries, calls, through = p.plan_current()
    assert calls and all(c.end_s is not None for c in calls)
    assert {c.phase for c in calls} >= {"gen", "update_critic"} and "update_actor" not in {c.phase for c in calls}
    names = {q.name for q in queries if q.name}
    assert "WorkerDict.rm_compute_rm_score" in names  # ran before this point last step; no poll saw it now
    assert "WorkerDict.actor_rollout_update_weights" not in names  # comes after: not missing yet
    assert "WorkerDict.actor_rollout_update_actor" not in names  # still running
    assert through == p.checked_until_s  # the running step stays unchecked
    p.refined(calls, through)
    assert p.plan_current()[1] == []


def test_a_method_first_seen_late_is_looked_for_in_the_steps_already_checked():
    job = Job(4)
    t = StepTracker()
    p = ReadPlanner(t)
    poll(t, job, 1000.0, job.end + 1)
    t.new_names.clear()
    queries, calls, through = p.plan()
    p.refined(calls, through)
    assert p.plan()[0] == []
    # the reward model's 0.4 s calls: no poll saw one until now (a seed from before it first ran, say)
    rm = [f for f in job.finished({"WorkerDict.rm_compute_rm_score"})][-2:]
    t.add_exact(rm)
    queries, calls, _ = p.plan()
    assert [q.name for q in queries] == ["WorkerDict.rm_compute_rm_score"] and calls == []
    t.add_exact(job.finished({"WorkerDict.rm_compute_rm_score"}))
    assert all(s.phase_s("reward") == pytest.approx(0.4) for s in t.steps(job.end + 1))
