"""Peers whose collective raised are evidence: the rank that never entered the collective stays the suspect
after its peers' calls failed with a timeout (gloo; NCCL with blocking wait), and the controller that caught
the error and waits on it points at it."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import RAY_TAIL, controller_in_get, in_collective, row, stack
from verltop.analysis.dump import analyse
from verltop.analysis.peer_failures import collective_error, peer_failures
from verltop.model import RawTask
from verltop.text.suspects import suspect_reason

GLOO = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms "
        "for recv operation to complete")


def failed(actor: str, end_s: float, error: str = GLOO, name: str = "WorkerDict.actor_rollout_act") -> RawTask:
    return RawTask(task_id="f" + actor, name=name, func_name=name, state="FAILED", actor_id=actor, node_id="n1",
                   worker_pid=100, start_time_ms=(end_s - 3) * 1000, end_time_ms=end_s * 1000, error=error)


def reward_fn() -> object:
    return stack(("_slow_reward_fn", "/app/reward.py", 88), ("_verify", "/app/reward.py", 95),
                 ("WorkerDict.actor_rollout_act", "/app/workers.py", 40), *RAY_TAIL)


def job(rank0_task: str | None = None):
    ranks = [replace(row("a0", rank=0, task=rank0_task), task_start_s=None),
             replace(row("a1", rank=1, task="WorkerDict.actor_rollout_act"), task_start_s=10.0)]
    return [*ranks, row("ctl", None, None, "controller", task="TaskRunner.run")]


def test_collective_errors():
    assert collective_error(GLOO)
    assert collective_error("DistBackendError: NCCL communicator was aborted on rank 0")
    assert collective_error("RuntimeError: Connection closed by peer [127.0.0.1]:1234")
    assert not collective_error("ValueError: bad reward")
    assert not collective_error(None)
    assert set(peer_failures([failed("a0", 70), failed("a1", 50, "ValueError: x")])) == {"a0"}


def test_the_straggler_stays_named_after_its_peers_failed_and_the_controller_waits_on_it():
    samples = {"a0": [stack(("Worker.main_loop", "/x/ray/_private/worker.py", 1069))] * 2,
               "a1": [reward_fn()] * 2, "ctl": [controller_in_get()] * 2}
    rep = analyse(job(), samples, 100.0, failed=[failed("a0", 70.0)])
    (s,) = rep.suspects
    assert (s.actor_id, s.why[0].kind) == ("a1", "peers_failed")
    text = suspect_reason(s)
    assert text.startswith("rank 0 of wg failed in actor_rollout_act 30s ago waiting for it (RuntimeError: "), text
    assert "Timed out waiting 3000ms" in text
    assert "never in the collective, it is in WorkerDict.actor_rollout_act at reward.py:88 _slow_reward_fn" in text
    assert "its stack did not move" in text and "(the controller waits on it in ray.get at job.py:92 TaskRunner.run)" in text
    # without the failure: the controller rule alone (its peers finished), a weaker reason
    plain = analyse(job(), samples, 100.0)
    assert [x.why[0].kind for x in plain.suspects] == ["controller"]
    # a failure from before the straggler's call began is not about it
    assert analyse(job(), samples, 100.0, failed=[failed("a0", 5.0)]).suspects[0].why[0].kind == "controller"


def test_the_controller_gave_the_batch_up_and_the_peer_waits_again():
    """The next batch: rank 0 is in the collective again; its earlier failure still names rank 1."""
    samples = {"a0": [in_collective("all_reduce")] * 2, "a1": [reward_fn()] * 2, "ctl": [controller_in_get()] * 2}
    rep = analyse(job("WorkerDict.actor_rollout_act"), samples, 100.0, failed=[failed("a0", 70.0)])
    assert [(s.actor_id, s.why[0].kind) for s in rep.suspects] == [("a1", "peers_failed")]


def test_a_rank_named_with_strong_evidence_stays_named_while_it_does_not_change():
    """After its peers' calls failed, the earlier not-in-the-collective evidence sticks: ``still``."""
    from verltop.analysis.sticky import carry

    samples = {"a0": [in_collective("all_reduce")] * 2, "a1": [reward_fn()] * 2, "ctl": [controller_in_get()] * 2}
    first = analyse(job("WorkerDict.actor_rollout_act"), samples, 50.0)
    assert [(s.actor_id, s.why[0].kind) for s in first.suspects] == [("a1", "not_in")]
    # later: rank 0 died (its process was torn down); the rules now name rank 0's death...
    dead0 = replace(row("a0", rank=0, task=None, state="DEAD", death="killed by the watchdog"), task_start_s=None)
    later_rows = [dead0, *job()[1:]]
    later = analyse(later_rows, {**samples, "a0": []}, 200.0)
    named = carry(first, later)
    (s1,) = [s for s in named.suspects if s.actor_id == "a1"]
    assert suspect_reason(s1).startswith("still: not in all_reduce with rank 0 of wg"), suspect_reason(s1)
    # ... and a rank whose stack moved is not carried
    moved = {**samples, "a0": [], "a1": [stack(("other", "/app/reward.py", 5), *RAY_TAIL)] * 2}
    assert not [s for s in carry(first, analyse(later_rows, moved, 200.0)).suspects if s.actor_id == "a1"]
