"""``verltop dump --json``, run as a user runs it, on real verl worker groups in hangs whose answer is known.

The groups and the controller live on the scenario cluster (``scenarios.py``, fixture ``scenario_cluster``
in conftest.py): group A (4 ranks, colocated actor_rollout + critic) for the scenarios that can be
released, group B (4 ranks, ref) for the mismatch and then the death, which cannot. Each test checks the
op of every rank and that the suspects are exactly the ranks that hold the others up.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.wait import wait_until

pytestmark = pytest.mark.ray

TIMES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_times():
    yield
    print("\nverltop dump --json wall time per scenario: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in TIMES.items()))


def dump(c, name: str, group: str | None, *extra: str) -> dict[str, Any]:
    d, wall = c.dump(group, *extra)
    TIMES[name] = wall
    return d


def ranks_of(d: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    return {r["rank"]: r for r in d["ranks"] if r["worker_group"] == prefix}


def ops_of(d: dict[str, Any], prefix: str) -> dict[int, str | None]:
    return {k: (r["blocked_on"] or {}).get("op") for k, r in ranks_of(d, prefix).items()}


def controller(d: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in d["ranks"] if r["role"] == "controller"]
    assert len(rows) == 1, rows
    return rows[0]


def suspects(d: dict[str, Any]) -> list[tuple[str, int]]:
    return [(s["worker_group"], s["rank"]) for s in d["suspects"]]


def check_group(c, d: dict[str, Any], group: str, ops: dict[int, str | None], dead: set[int] = frozenset()) -> None:
    """Every rank of the group is in the dump, with its op; only the dead ones failed."""
    prefix = c.prefix[group]
    rows = ranks_of(d, prefix)
    assert sorted(rows) == [0, 1, 2, 3], rows.keys()
    truth = {r["rank"]: r for r in c.ranks(group)}
    for k, r in rows.items():
        assert r["actor_id"] == truth[k]["actor_id"] and r["pid"] == truth[k]["pid"]
        assert r["world_size"] == 4
        if k in dead:
            assert r["state"] == "DEAD" and r["error"], r
        else:
            assert r["state"] == "ALIVE" and r["error"] is None and r["stack"], (k, r["error"])
    assert ops_of(d, prefix) == ops


def test_idle_job_has_no_suspect(scenario_cluster):
    c = scenario_cluster
    d = dump(c, "idle", None)
    for g in ("A", "B"):
        check_group(c, d, g, dict.fromkeys(range(4)))
        for r in ranks_of(d, c.prefix[g]).values():
            assert r["task"] is None and r["stuck"] is None
    a = ranks_of(d, c.prefix["A"])[0]
    assert a["role"] == "actor_rollout" and a["roles"] == ["actor_rollout", "critic"], a
    assert ranks_of(d, c.prefix["B"])[0]["roles"] == ["ref"]
    ctl = controller(d)
    assert ctl["class_name"] == "TaskRunner" and ctl["pid"] == c.info["runner_pid"] and ctl["error"] is None
    assert len(d["ranks"]) == 10 and d["suspects"] == []  # the controller, 8 ranks and the driver (this host)
    (drv,) = [r for r in d["ranks"] if r["role"] == "driver"]
    assert drv["actor_id"] is None and drv["error"] is None and drv["process"] is None


def test_straggler_outside_any_collective(scenario_cluster):
    """Ranks 0-2 in all_reduce, rank 3 elsewhere; the controller waits in ray.get → rank 3 only."""
    c = scenario_cluster
    tag = "straggler"
    c.run("A", {"*": "all_reduce", "3": "straggle>all_reduce"}, tag)
    try:
        c.wait_positions("A", {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: "straggle"}, tag)
        c.wait_tasks({r["actor_id"] for r in c.ranks("A")})
        d = dump(c, "straggler", "A")
        check_group(c, d, "A", {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: None})
        rows = ranks_of(d, c.prefix["A"])
        assert all(rows[k]["blocked_on"]["frame"].startswith("scenarios.py:") for k in (0, 1, 2)), rows[0]
        assert all(r["stuck"] is True for r in rows.values())
        assert rows[3]["task"] == "actor_rollout_act"
        assert controller(d)["blocked_on"]["op"] == "ray.get"
        assert suspects(d) == [(c.prefix["A"], 3)]
        why = d["suspects"][0]["reason"]
        assert "not in all_reduce with ranks 0-2" in why and "_straggle" in why and "did not move" in why, why
    finally:
        c.finish(tag)


def test_ranks_in_barrier_one_elsewhere(scenario_cluster):
    """Ranks 0,2,3 in dist.barrier, rank 1 elsewhere; the controller is idle → rank 1 only."""
    c = scenario_cluster
    tag = "barrier"
    c.start("A", {"*": "barrier", "1": "straggle>barrier"}, tag)
    try:
        c.wait_positions("A", {0: "barrier", 1: "straggle", 2: "barrier", 3: "barrier"}, tag)
        c.wait_tasks({r["actor_id"] for r in c.ranks("A")})
        d = dump(c, "barrier", "A")
        check_group(c, d, "A", {0: "barrier", 1: None, 2: "barrier", 3: "barrier"})
        assert controller(d)["blocked_on"] is None
        assert suspects(d) == [(c.prefix["A"], 1)]
        assert "not in barrier with ranks 0,2-3" in d["suspects"][0]["reason"]
    finally:
        c.finish(tag)


def _only_rank_2_runs(d: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    return d if [k for k, r in ranks_of(d, prefix).items() if r["task"]] == [2] else None


def test_controller_waits_on_the_rank_still_running(scenario_cluster):
    """No collective: ranks 0,1,3 finished, rank 2 still runs, the controller waits in ray.get → rank 2."""
    c = scenario_cluster
    tag = "controller"
    c.run("A", {"*": "return", "2": "straggle"}, tag)
    try:
        c.wait_positions("A", {0: "done", 1: "done", 2: "straggle", 3: "done"}, tag)
        ranks = {r["rank"]: r["actor_id"] for r in c.ranks("A")}
        c.wait_tasks({ranks[2]}, {ranks[0], ranks[1], ranks[3]})
        for name, group in (("controller", "A"), ("controller, whole job", None)):
            # a rank's task events reach the dashboard in batches: RUNNING can come after the wait above saw
            # none and before FINISHED does (a loaded machine); such a dump rightly lists that rank's task
            d = wait_until(lambda n=name, g=group: _only_rank_2_runs(dump(c, n, g), c.prefix["A"]), 60,
                           "a dump in which only rank 2 runs a task", step=0.5)
            check_group(c, d, "A", dict.fromkeys(range(4)))
            ctl = controller(d)
            assert ctl["blocked_on"]["op"] == "ray.get" and "TaskRunner.run" in ctl["blocked_on"]["frame"], ctl
            assert suspects(d) == [(c.prefix["A"], 2)], d["suspects"]
            why = d["suspects"][0]["reason"]
            assert "controller waits in ray.get" in why and "ranks 0-1,3" in why and "finished" in why, why
        check_group(c, d, "B", dict.fromkeys(range(4)))  # the whole job: B is idle, and no suspect there
        assert len(d["ranks"]) == 10  # and the driver
    finally:
        c.finish(tag)


@pytest.fixture(scope="module")
def mismatch(scenario_cluster) -> str:
    """Group B: ranks 0-2 in all_reduce, rank 3 in all_gather (on a second gloo group over the same
    ranks, see scenarios.py). It never ends: the death test below kills rank 3."""
    c = scenario_cluster
    tag = "mismatch"
    c.start("B", {"*": "all_reduce", "3": "all_gather"}, tag)
    c.wait_positions("B", {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: "all_gather"}, tag)
    c.wait_tasks({r["actor_id"] for r in c.ranks("B")})
    return tag


def test_two_collectives_in_one_group(scenario_cluster, mismatch):
    c = scenario_cluster
    d = dump(c, "mismatch", "B")
    check_group(c, d, "B", {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: "all_gather"})
    assert suspects(d) == [(c.prefix["B"], 3)]
    why = d["suspects"][0]["reason"]
    assert "mismatch" in why and "all_gather" in why and "all_reduce" in why and "ranks 0-2" in why, why


def test_dead_rank_is_the_suspect(scenario_cluster, mismatch):
    """SIGKILL rank 3 while 0-2 wait in all_reduce. gloo then fails the collective on the ranks that were
    talking to it ("Connection closed by peer": here its ring neighbours) and they go idle; the others
    keep waiting. The dead rank is the one suspect; the others are all reported."""
    c = scenario_cluster
    ranks = {r["rank"]: r for r in c.ranks("B")}
    os.kill(ranks[3]["pid"], signal.SIGKILL)
    last: list = [None]

    def settled() -> bool:  # Ray says DEAD and the running tasks stopped changing
        actors = {a["actor_id"]: a for a in c.dashboard.rows("actors")}
        running = {t["actor_id"] for t in c.dashboard.running_tasks()}
        done = actors[ranks[3]["actor_id"]]["state"] == "DEAD" and running == last[0]
        last[0] = running
        return done

    wait_until(settled, 30, "rank 3 DEAD and the running tasks settled", step=1.5)
    d = dump(c, "dead rank", "B")
    rows = ranks_of(d, c.prefix["B"])
    ops = ops_of(d, c.prefix["B"])
    check_group(c, d, "B", ops, dead={3})
    assert "DEAD" in rows[3]["error"] and ops[3] is None
    waiting = [k for k in (0, 1, 2) if ops[k] == "all_reduce"]
    assert waiting, f"no peer still waits: {ops}"
    for k in set((0, 1, 2)) - set(waiting):
        assert ops[k] is None and rows[k]["task"] is None, rows[k]  # knocked out by the death, now idle
    assert suspects(d) == [(c.prefix["B"], 3)], d["suspects"]
    why = d["suspects"][0]["reason"]
    assert why.startswith("DEAD") and "all_reduce" in why, why
    print(f"\ndead rank: still in all_reduce {waiting}, failed and idle {sorted(set((0, 1, 2)) - set(waiting))}")
