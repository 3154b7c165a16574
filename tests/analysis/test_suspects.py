"""Suspects: exactly the ranks that hold the others up, with a reason; never a rank waiting with its peers."""

from __future__ import annotations

from tests.analysis.helpers import controller_in_get, in_collective, row, sleeping
from tests.conftest import FIX, load
from verltop.analysis.dump import analyse
from verltop.model import ProcessDump
from verltop.sources.pyspy import parse_json
from verltop.sources.watchdog import parse_watchdog
from verltop.text.suspects import suspect_reason


def ids(report):
    return [s.actor_id for s in report.suspects]


def test_straggler_outside_the_collective():
    actors = [row(f"a{i}", rank=i) for i in range(4)] + [row("ctl", None, None, "controller", task="run")]
    samples = {f"a{i}": [in_collective("all_reduce")] * 2 for i in (0, 1, 3)}
    samples["a2"] = [sleeping()] * 2
    samples["ctl"] = [controller_in_get()] * 2
    r = analyse(actors, samples, 0.0)
    assert ids(r) == ["a2"]
    s = r.suspects[0]
    assert "not in all_reduce" in suspect_reason(s) and "ranks 0-1,3" in suspect_reason(s) and "generate_sequences" in suspect_reason(s)
    assert "did not move" in suspect_reason(s)
    by = {x.actor.actor_id: x for x in r.ranks}
    assert by["a0"].blocked_on.op == "all_reduce" and by["a0"].stuck is True
    assert by["ctl"].blocked_on.op == "ray.get"


def test_everyone_waiting_together_is_no_suspect():
    actors = [row(f"a{i}", rank=i) for i in range(4)]
    r = analyse(actors, {f"a{i}": [in_collective("barrier")] for i in range(4)}, 0.0)
    assert r.suspects == ()


def test_mismatch_names_both_ops():
    actors = [row(f"a{i}", rank=i) for i in range(4)]
    samples = {"a0": [in_collective("all_reduce")], "a1": [in_collective("all_reduce")],
               "a2": [in_collective("all_reduce")], "a3": [in_collective("all_gather")]}
    r = analyse(actors, samples, 0.0)
    assert ids(r) == ["a3"]
    assert "all_gather" in suspect_reason(r.suspects[0]) and "all_reduce" in suspect_reason(r.suspects[0])


def test_two_rank_mismatch_accuses_both():
    actors = [row("a0", rank=0), row("a1", rank=1)]
    r = analyse(actors, {"a0": [in_collective("all_reduce")], "a1": [in_collective("all_gather")]}, 0.0)
    assert sorted(ids(r)) == ["a0", "a1"]


def test_dead_rank_whose_peers_wait():
    actors = [row("a0", rank=0), row("a1", rank=1), row("a2", rank=2, state="DEAD", death="OOM killed")]
    r = analyse(actors, {"a0": [in_collective("all_reduce")], "a1": [in_collective("all_reduce")]}, 0.0)
    assert ids(r) == ["a2"]
    assert "DEAD" in suspect_reason(r.suspects[0]) and "OOM" in suspect_reason(r.suspects[0])
    assert next(x for x in r.ranks if x.actor.actor_id == "a2").error.text.startswith("actor is DEAD")


def test_dead_rank_not_the_peers_it_knocked_out():
    # gloo, as captured on a real group (tests/integration): rank 3 killed while 0-2 waited in all_reduce;
    # 0 and 2 (its ring neighbours) failed with "Connection closed by peer" and went idle, 1 still waits.
    # The dead rank is the suspect; the idle ranks are not, but a rank still running elsewhere is.
    actors = [row("a0", rank=0, task=None), row("a1", rank=1), row("a2", rank=2, task=None),
              row("a3", rank=3, state="DEAD", death="killed")]
    idle = ProcessDump(1, threads=())
    r = analyse(actors, {"a0": [idle], "a1": [in_collective("all_reduce")], "a2": [idle]}, 0.0)
    assert ids(r) == ["a3"] and "DEAD" in suspect_reason(r.suspects[0])
    r = analyse([*actors[:2], row("a2", rank=2), *actors[3:]],
                {"a0": [idle], "a1": [in_collective("all_reduce")], "a2": [sleeping()]}, 0.0)
    assert ids(r) == ["a3", "a2"]


def test_moving_rank_is_slow_not_hung():
    actors = [row("a0", rank=0), row("a1", rank=1), row("a2", rank=2)]
    samples = {"a0": [in_collective("all_reduce")] * 2, "a1": [in_collective("all_reduce")] * 2,
               "a2": [sleeping(line=55), sleeping(line=57)]}
    r = analyse(actors, samples, 0.0)
    assert ids(r) == ["a2"] and "moves" in suspect_reason(r.suspects[0])
    assert next(x for x in r.ranks if x.actor.actor_id == "a2").stuck is False


def test_controller_in_ray_get_points_at_the_running_rank():
    # ranks 0,1,3 finished the method (idle, no task), rank 2 still runs; the controller waits in ray.get
    actors = [row(f"a{i}", rank=i, task=None if i != 2 else "actor_rollout_generate_sequences") for i in range(4)]
    actors.append(row("ctl", None, None, "controller", task="run"))
    idle = ProcessDump(1, threads=())
    samples = {f"a{i}": [idle] for i in (0, 1, 3)}
    samples["a2"] = [sleeping()]
    samples["ctl"] = [controller_in_get()]
    r = analyse(actors, samples, 0.0)
    assert ids(r) == ["a2"] and "controller waits in ray.get" in suspect_reason(r.suspects[0])


def test_real_ray_gpu_capture_names_the_straggler():
    """The real 2x H200 Ray hang: rank 0 waits on the GPU (NCCL all_reduce), rank 1 sleeps."""
    threads = {k: parse_json(load(f"ray-gpu-cluster/hung/pyspy_{k}.json"))[0] for k in ("0", "1", "TaskRunner")}
    actors = [row("r0", "abcd", 0, gpu=100.0, pid=2120), row("r1", "abcd", 1, gpu=0.0, pid=2125),
              row("ctl", None, None, "controller", task="run", pid=2121)]
    samples = {"r0": [ProcessDump(2120, threads["0"])], "r1": [ProcessDump(2125, threads["1"])],
               "ctl": [ProcessDump(2121, threads["TaskRunner"])]}
    logs = {p.name: p.read_text() for p in (FIX / "ray-gpu-cluster" / "logs").glob("worker-*-212[05].err")}
    wd = {"r0": parse_watchdog(next(v for k, v in logs.items() if k.endswith("2120.err")))}
    r = analyse(actors, samples, 0.0, wd)
    assert ids(r) == ["r1"]
    r0 = next(x for x in r.ranks if x.actor.actor_id == "r0")
    assert r0.blocked_on.op == "cuda_sync" and r0.collective.op == "all_reduce" and r0.collective.seq == 5
    assert "all_reduce" in suspect_reason(r.suspects[0])


def test_real_nccl_mismatch_through_watchdog_lines():
    """Both ranks sit at `.item()` (cuda_sync); only the watchdog lines tell all_reduce from all_gather."""
    actors = [row("r0", "g", 0, gpu=100.0), row("r1", "g", 1, gpu=100.0)]
    samples = {f"r{k}": [ProcessDump(1, parse_json(load(f"nccl-mismatch/hung/rank{k}.pyspy.json"))[0])]
               for k in (0, 1)}
    wd = {f"r{k}": parse_watchdog(load(f"nccl-mismatch/rank{k}.log")) for k in (0, 1)}
    assert wd["r0"].op == "all_reduce" and wd["r1"].op == "all_gather"
    r = analyse(actors, samples, 0.0, wd)
    assert sorted(ids(r)) == ["r0", "r1"]
    assert all("mismatch" in suspect_reason(s) for s in r.suspects)


def test_real_nccl_straggler_never_reached_the_collective():
    actors = [row("r0", "g", 0, gpu=100.0), row("r1", "g", 1, gpu=0.0)]
    samples = {f"r{k}": [ProcessDump(1, parse_json(load(f"nccl-straggler/hung/rank{k}.pyspy.json"))[0])]
               for k in (0, 1)}
    wd = {f"r{k}": parse_watchdog(load(f"nccl-straggler/rank{k}.log")) for k in (0, 1)}
    assert wd["r1"].last_enqueued == 4 and wd["r0"].last_enqueued == 5
    r = analyse(actors, samples, 0.0, wd)
    assert ids(r) == ["r1"] and "never reached collective #5" in suspect_reason(r.suspects[0])
