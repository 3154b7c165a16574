"""`verltop snapshot` on replayed real Ray 2.60 answers: the "pending" contract and actors that cannot start."""

from __future__ import annotations

import json
from pathlib import Path

from tests.replay_server import ReplayDashboard
from tests.test_cli import ACTOR_KEYS, run

FIX = Path(__file__).parent / "fixtures" / "pending"
PENDING_KEYS = {"kind", "id", "name", "worker_group", "state", "scheduling_state", "demand", "strategy", "waiting_s",
                "reason"}


def test_snapshot_json_pending_contract():
    with ReplayDashboard(case=FIX / "infeasible", phase="hung") as d:
        p = run("--address", d.url, "snapshot", "--json", "--no-local")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["source"]["errors"] == []
    pend = doc["pending"]
    assert all(set(x) == PENDING_KEYS for x in pend)
    assert [x["kind"] for x in pend] == ["placement_group", "actor", "actor", "task"]
    pg = pend[0]
    assert pg["name"] == "Wb5vE3verl_group_2:0" and pg["state"] == "PENDING" and pg["scheduling_state"] == "INFEASIBLE"
    assert pg["demand"] == [{"CPU": 10.0}, {"CPU": 10.0}] and pg["strategy"] == "STRICT_PACK"
    assert pg["waiting_s"] > 60  # from Ray's creation time, not from when verltop looked
    assert pg["reason"] == ("2 bundles × {CPU: 10} STRICT_PACK: no node has 20 CPU for all bundles together "
                            "(node 192.0.2.2: 4 CPU, 4 free) — infeasible")
    task = pend[3]
    assert (task["name"], task["strategy"], task["demand"]) == ("needs_ten_cpus", None, [{"CPU": 10.0}])
    # the actor rows keep their fields; the short reason is in stall_reason
    for a in doc["actors"]:
        assert set(a) == ACTOR_KEYS and a["state"] == "PENDING_CREATION" and a["stalled"] is True
    on_pg = next(a for a in doc["actors"] if a["actor_name"] == "Wb5vE3DemoWorker_0:0")
    assert on_pg["stall_reason"].endswith("waits for placement group Wb5vE3verl_group_2:0 (INFEASIBLE)")
    assert on_pg["stalls"][0]["rule"] == "pending" and on_pg["stalls"][0]["waits_for"] == "placement_group"


def test_snapshot_text_says_why_actors_cannot_start():
    with ReplayDashboard(case=FIX / "failures", phase="final") as d:
        p = run("--address", d.url, "snapshot", "--no-local")
        doc = json.loads(run("--address", d.url, "snapshot", "--json", "--no-local").stdout)
    assert p.returncode == 0, p.stderr
    assert "PENDING" not in p.stdout  # nothing waits
    assert "STALLED: cannot start: ERROR: No matching distribution found for this-package-does-not-exist-xyz==9.9" \
        in p.stdout
    assert "STALLED: cannot start: ValueError: Could not find Conda executable at conda." in p.stdout
    assert "STALLED: actor DEAD after 5 restarts: worker process died (SYSTEM_ERROR)" in p.stdout
    assert doc["pending"] == []
    rules = {a["actor_name"]: a["stalls"][0]["rule"] for a in doc["actors"]}
    assert rules["pip_fail_actor"] == rules["import_error_actor"] == "cannot_start"


def test_without_the_autoscalers_status_the_node_totals_still_speak():
    """Autoscaler v2 clusters (and the first seconds of any) have no status: no strategy, no free counts;
    the reason still holds the demand against each node's total, and Ray's verdict."""
    from aiohttp import web

    with ReplayDashboard(case=FIX / "infeasible", phase="hung") as d:
        d.hooks["/api/cluster_status"] = lambda req: web.json_response(
            {"result": True, "msg": "", "data": {"autoscalingStatus": None, "clusterStatus": None}})
        doc = json.loads(run("--address", d.url, "snapshot", "--json", "--no-local").stdout)
    pg = doc["pending"][0]
    assert pg["strategy"] is None and doc["source"]["errors"] == []
    assert pg["reason"] == "2 bundles × {CPU: 10}: no node has 10 CPU for even one bundle (node 192.0.2.2: 4 CPU) — infeasible"
