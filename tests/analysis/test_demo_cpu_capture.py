"""The CPU-only capture (tests/fixtures/demo-cpu: ``verltop demo`` hung 45 s, Ray 2.60, gloo, no GPU), replayed
through today's engine: the dashboard's answers into ``Monitor``, its tracebacks into a ``DumpJob``."""

from __future__ import annotations

from tests.captures import Replay, demo_cpu
from verltop.text.dump import dump_text
from verltop.text.stalls import stall_reason
from verltop.text.suspects import suspect_reason

HUNG = "kxZQHdWorkerDict_0:2"


async def test_snapshot_of_a_cluster_without_gpu():
    """No GPU anywhere; the fused actor_rollout+critic group's four ranks stalled in update_actor against
    the median of the three finished steps; the idle ref and rm ranks and the controller not."""
    async with Replay(demo_cpu()) as r:
        snap = r.snap
    assert [n.gpus for n in snap.nodes] == [()] and all(a.gpu_index is None for a in snap.actors)
    stalled = sorted((a.worker_group, a.rank) for a in snap.actors if a.stalled)
    assert stalled == [("kxZQHd", k) for k in range(4)]
    a2 = next(a for a in snap.actors if a.actor_name == HUNG)
    assert (a2.role, a2.roles, a2.world_size, a2.task) == (
        "actor_rollout", ("actor_rollout", "critic"), 4, "actor_rollout_update_actor")
    (st,) = a2.stalls
    assert st.rule == "median" and st.running_s == a2.task_running_s
    assert stall_reason(st).startswith("running 22× longer than usual (46s vs median 2.1s")
    assert {a.role for a in snap.actors if not a.task} == {"ref", "rm"}
    assert snap.phase == "update_actor" and snap.gpu_note is None


async def test_dump_names_the_rank_that_never_joined_the_gloo_all_reduce():
    """Every traceback the dashboard gave (two rounds): ranks 0, 1, 3 in ``all_reduce``, rank 2 in
    ``_stuck_rollout``, the controller in ``ray.get``: rank 2 is the one suspect, and the controller's wait
    points at it."""
    async with Replay(demo_cpu()) as r:
        report = await r.dump()
    by = {x.actor.actor_name or x.actor.role: x for x in report.ranks}
    assert len(report.ranks) == 9 and all(x.error is None for x in report.ranks)
    for k in (0, 1, 3):
        x = by[f"kxZQHdWorkerDict_0:{k}"]
        assert (x.blocked_on.op, x.blocked_on.frame, x.stuck) == (
            "all_reduce", "workers.py:177 ActorRolloutWorker.update_actor", True)
    assert by[HUNG].blocked_on is None and by[HUNG].stuck is True
    assert (by["controller"].blocked_on.op, by["controller"].blocked_on.frame) == ("ray.get", "job.py:116 TaskRunner.run")
    assert [(s.worker_group, s.rank) for s in report.suspects] == [("kxZQHd", 2)]
    assert suspect_reason(report.suspects[0]) == (
        "not in all_reduce with ranks 0-1,3 of kxZQHd: it is in actor_rollout_update_actor at workers.py:259 "
        "_stuck_rollout; its stack did not move (the controller waits on it in ray.get at job.py:116 "
        "TaskRunner.run)")
    assert all(x.stuck is None for x in report.ranks if x.actor.role in ("ref", "rm"))  # idle: no task
    assert "[kxZQHd:0-1,3] (3) all_reduce: distributed_c10d.py:3252 all_reduce" in dump_text(report)
