"""Ranks on several nodes: the scenario cluster is a head and two worker nodes (three raylets on this
machine, ``ray.cluster_utils.Cluster``); group A's two placement groups sit on the two worker nodes, group
B and the controller on the head. Every way verltop reaches a rank is tried on purpose: local py-spy
(``auto``: all raylets share this host), the dashboard's ``/worker/traceback`` (``--via dashboard``; the head
runs with ``RAY_DASHBOARD_ENABLE_PROFILING=1``) and a probe actor per node (``--via probe``).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from test_dump_scenarios import check_group, controller, ranks_of, suspects

pytestmark = pytest.mark.ray

PROBE_CLASS = "VerltopProbe"
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_times():
    yield
    print("\nverltop dump --json wall time per path (ranks on 3 nodes): "
          + ", ".join(f"{k} {v:.2f} s" for k, v in TIMES.items()))


def test_group_spread_over_nodes(scenario_cluster):
    c = scenario_cluster
    nodes = {n["node_id"]: n for n in c.info["nodes"]}
    assert len(nodes) == 3 and all(n["alive"] for n in nodes.values())
    head = next(nid for nid, n in nodes.items() if n["is_head"])
    a = c.ranks("A")
    assert a[0]["node_id"] == a[1]["node_id"] != a[2]["node_id"] == a[3]["node_id"]
    assert head not in {r["node_id"] for r in a}
    assert {r["node_id"] for r in c.ranks("B")} == {head}
    assert {n["node_id"] for n in c.dashboard.rows("nodes") if n["state"] == "ALIVE"} == set(nodes)


def test_snapshot_json_lists_every_actor(scenario_cluster):
    c = scenario_cluster
    p, wall = c.verltop("snapshot", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    TIMES["snapshot"] = wall
    snap = json.loads(p.stdout)
    assert {n["node_id"] for n in snap["nodes"]} == {n["node_id"] for n in c.info["nodes"]}
    actors = {a["actor_id"]: a for a in snap["actors"]}
    roles = {"A": ("actor_rollout", ["actor_rollout", "critic"]), "B": ("ref", ["ref"])}
    for g in ("A", "B"):
        for r in c.ranks(g):
            a = actors[r["actor_id"]]
            assert (a["worker_group"], a["rank"], a["world_size"], a["pid"]) == (c.prefix[g], r["rank"], 4, r["pid"]), a
            assert (a["role"], a["roles"]) == roles[g], a
            assert a["class_name"].endswith("WorkerDict")
    ctl = [a for a in snap["actors"] if a["role"] == "controller"]
    assert len(ctl) == 1 and ctl[0]["class_name"] == "TaskRunner" and ctl[0]["pid"] == c.info["runner_pid"]
    assert ctl[0]["worker_group"] is None and ctl[0]["rank"] is None
    assert len(snap["actors"]) == 9  # verltop's own probes (namespace verltop-probe) are not the job's


def _probes(c) -> dict[str, dict[str, Any]]:
    return {a["actor_id"]: a for a in c.dashboard.rows("actors", detail="true")
            if a["class_name"].endswith(PROBE_CLASS)}


@pytest.fixture(scope="class")
def straggler_across_nodes(scenario_cluster):
    """Ranks 0,1 (node n1) and 3 (node n2) in all_reduce, rank 2 (n2) elsewhere; the controller (head)
    waits in ray.get."""
    c = scenario_cluster
    tag = "multinode"
    c.run("A", {"*": "all_reduce", "2": "straggle>all_reduce"}, tag)
    try:
        c.wait_positions("A", {0: "all_reduce", 1: "all_reduce", 2: "straggle", 3: "all_reduce"}, tag)
        c.wait_tasks({r["actor_id"] for r in c.ranks("A")})
        yield c
    finally:
        c.finish(tag)


def _check(c, d: dict[str, Any]) -> None:
    check_group(c, d, "A", {0: "all_reduce", 1: "all_reduce", 2: None, 3: "all_reduce"})
    ctl = controller(d)
    assert ctl["error"] is None and ctl["blocked_on"]["op"] == "ray.get", ctl
    assert suspects(d) == [(c.prefix["A"], 2)], d["suspects"]
    assert "not in all_reduce with ranks 0-1,3" in d["suspects"][0]["reason"]


class TestStragglerAcrossNodes:
    """One hang, reached every way; released before the cluster is stopped (class-scoped fixture)."""

    @pytest.mark.parametrize("via", ["auto", "dashboard", "probe"])
    def test_dump_reaches_ranks_on_every_node(self, straggler_across_nodes, via):
        c = straggler_across_nodes
        env = None
        if via == "probe":
            # The probe connects with ray.init(address="auto"). Other Ray clusters may run on this machine
            # (the demo's, other users'), so name this one, as a user with several clusters would; with an
            # explicit address Ray wants RAY_AUTH_MODE=token said, as `ray status` does.
            env = {"RAY_ADDRESS": c.gcs, "RAY_AUTH_MODE": "token"}
            before = set(_probes(c))
        if via == "dashboard":
            assert c.dashboard("/api/profiling_enabled")["data"]["profilingEnabled"] is True
        d, wall = c.dump("A", "--via", via, env=env)
        TIMES[via] = wall
        _check(c, d)
        if via == "probe":
            probes = {k: v for k, v in _probes(c).items() if k not in before}
            target_nodes = {r["node_id"] for r in c.ranks("A")} | {n["node_id"] for n in c.info["nodes"] if n["is_head"]}
            assert sorted(p["node_id"] for p in probes.values()) == sorted(target_nodes), probes  # one per node
            for p in probes.values():
                assert p["ray_namespace"] == "verltop-probe" and p["is_detached"] is False, p
                assert p["state"] == "DEAD", p  # removed when the dump ended

    def test_probe_without_a_cluster_to_reach_says_why(self, straggler_across_nodes):
        """A probe that cannot reach the cluster: every rank listed with the reason, exit non-zero."""
        c = straggler_across_nodes
        p, _ = c.verltop("dump", "--json", "--via", "probe", "--group", c.prefix["A"], "--dump-timeout", "3",
                         env={"RAY_ADDRESS": "127.0.0.1:1", "RAY_AUTH_MODE": "token"})
        assert p.returncode == 1, (p.returncode, p.stderr[-1500:])
        assert "no rank could be dumped" in p.stderr
        d = json.loads(p.stdout)
        assert len(ranks_of(d, c.prefix["A"])) == 4
        assert all(r["error"] and "probe" in r["error"] for r in d["ranks"]), [r["error"] for r in d["ranks"]]


def test_cluster_stops_without_strays(scenario_cluster):
    """Last on the scenario cluster: hung and dead groups included, nothing of it outlives the stop."""
    c = scenario_cluster
    pids = set(c.descendants()) | {r["pid"] for r in c.info["ranks"]} | {c.info["runner_pid"]}
    assert len(pids) > 12
    stray = c.stop()
    assert stray == [], stray
    ps = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    # zombies are dead (only not yet reaped: in a container, pid 1 may never reap orphans)
    left = [line for line in ps.splitlines()
            if int(line.split(None, 1)[0]) in pids and not line.split()[1].startswith("Z")]
    assert left == [], left
