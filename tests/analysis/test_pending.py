"""Pending work on real Ray 2.60 answers (tests/fixtures/pending): placement groups, actors and tasks Ray has
not placed, held against the cluster per node; the startup rules of actor rows; the suspect a pending
placement group is."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.analysis.helpers import controller_in_get, in_collective, row
from verltop.analysis.dump import analyse
from verltop.analysis.pending import (
    NodeCap,
    PendingData,
    build_pending,
    camel,
    capacity_of,
    clean_demand,
    pool_prefix,
    startup_stall,
)
from verltop.analysis.pending_waits import chain_end
from verltop.model import Node, PendingItem, RawActor
from verltop.sources import parse, parse_pending
from verltop.text.contract import chain_json, pending_json, suspect_json
from verltop.text.pending import capacity, demand, pending_reason, resources
from verltop.text.stalls import stall_reason, stall_tag
from verltop.text.suspects import suspect_reason

FIX = Path(__file__).parent.parent / "fixtures" / "pending"
PENDING_KEYS = {"kind", "id", "name", "worker_group", "state", "scheduling_state", "demand", "strategy", "waiting_s",
                "reason"}


def doc(case: str, name: str):
    return json.loads((FIX / case / name).read_text())


def moment(case: str) -> tuple[PendingData, list[RawActor], list[Node]]:
    pgs, _ = parse_pending.placement_groups(doc(case, "api_v0_placement_groups.json"))
    tasks, _ = parse_pending.pending_tasks(doc(case, "api_v0_tasks.json"))
    tasks = [t for t in tasks if t.state == "PENDING_NODE_ASSIGNMENT"]
    load = parse_pending.cluster_load(doc(case, "api_cluster_status.json"))
    actors, _ = parse.actors(doc(case, "api_v0_actors.json"))
    nodes = parse.state_nodes(doc(case, "api_v0_nodes.json"))
    return PendingData(tuple(pgs), tuple(tasks), load), actors, nodes


# ---------------------------------------------------------------- parsing


def test_placement_group_row_and_cluster_status_parse():
    pgs, _ = parse_pending.placement_groups(doc("infeasible/hung", "api_v0_placement_groups.json"))
    (pg,) = pgs
    assert (pg.name, pg.state, pg.scheduling_state, pg.job_id) == ("Wb5vE3verl_group_2:0", "PENDING", "INFEASIBLE",
                                                                   "01000000")
    assert pg.bundles == ((("CPU", 10.0),), (("CPU", 10.0),))
    assert pg.created_s == pytest.approx(1796048671.8297, abs=1e-3)
    load = parse_pending.cluster_load(doc("infeasible/hung", "api_cluster_status.json"))
    assert load.pg_strategies == ((((("CPU", 10.0),), (("CPU", 10.0),)), "STRICT_PACK"),)
    (nl,) = load.nodes
    # camelCased names come back as Ray spells them; node markers are not resources
    assert dict((k, (t, f)) for k, t, f in nl.resources)["object_store_memory"][0] == 7344914841.0
    assert all(not k.startswith("node:") for k, _, _ in nl.resources)
    # a placement group's own resources (CPUGroup0<pg id>...) are not capacity
    busy = parse_pending.cluster_load(doc("busy/hung", "api_cluster_status.json"))
    assert [k for k, _, _ in busy.nodes[0].resources] == ["CPU", "memory", "object_store_memory"]
    assert busy.nodes[0].resources[0] == ("CPU", 4.0, 0.0)
    nodes = parse.state_nodes(doc("busy/hung", "api_v0_nodes.json"))
    assert [k for k, _ in nodes[0].resources_total] == ["CPU", "memory", "object_store_memory"]


def test_cluster_status_without_autoscaler_status_is_none():
    assert parse_pending.cluster_load({"result": True, "msg": "", "data": {"clusterStatus": None}}) is None


def test_pending_task_rows_keep_demand_and_creation_time():
    tasks, _ = parse_pending.pending_tasks(doc("infeasible/hung", "api_v0_tasks.json"))
    by = {t.name: t for t in tasks}
    t = by["needs_ten_cpus"]
    assert (t.type, t.state, t.demand, t.actor_id) == ("NORMAL_TASK", "PENDING_NODE_ASSIGNMENT", (("CPU", 10.0),), None)
    assert t.created_s == pytest.approx(1796048672.350)
    pg_bound = by["Wb5vE3DemoWorker_0:0:PendingOnPG.__init__"]
    assert pg_bound.placement_group_id == "293d3c0e47723a95d56ab3e2f3b701000000"
    assert clean_demand(pg_bound.demand) == (("CPU", 1.0),)


# ---------------------------------------------------------------- items


def test_infeasible_verl_pool_reason_compares_demand_with_each_node():
    pd, actors, nodes = moment("infeasible/hung")
    items = build_pending(pd, actors, nodes, now=pd.pgs[0].created_s + 65)
    assert [p.kind for p in items] == ["placement_group", "actor", "actor", "task"]
    pg = items[0]
    assert pending_json(pg).keys() == PENDING_KEYS
    assert (pg.strategy, pg.scheduling_state, pg.waiting_s) == ("STRICT_PACK", "INFEASIBLE", 65.0)
    assert pending_reason(pg) == ("2 bundles × {CPU: 10} STRICT_PACK: no node has 20 CPU for all bundles together "
                         "(node 192.0.2.2: 4 CPU, 4 free) — infeasible")
    assert pending_json(pg)["demand"] == [{"CPU": 10.0}, {"CPU": 10.0}]
    by = {p.name: p for p in items}
    on_pg = by["Wb5vE3DemoWorker_0:0"]
    assert (on_pg.waits_for, on_pg.target, on_pg.scheduling_state) == ("placement_group", "Wb5vE3verl_group_2:0",
                                                                       "INFEASIBLE")
    assert pending_reason(on_pg) == "waits for placement group Wb5vE3verl_group_2:0 (INFEASIBLE)"
    big = by["big_actor_needs_10cpu"]
    assert pending_reason(big) == "{CPU: 10}: no node has 10 CPU (node 192.0.2.2: 4 CPU, 4 free) — infeasible"
    assert by["needs_ten_cpus"].kind == "task" and pending_reason(by["needs_ten_cpus"]) == pending_reason(big)
    # the actor's wait starts when its creation task was submitted, not when verltop first looked
    assert big.waiting_s == pytest.approx(pg.waiting_s - 0.53, abs=0.01)


def test_busy_pool_waits_for_resources_held_by_another_job_then_goes():
    pd, actors, nodes = moment("busy/hung")
    items = build_pending(pd, actors, nodes, now=pd.pgs[0].created_s + 12)
    pg = next(p for p in items if p.kind == "placement_group")
    assert (pg.name, pg.worker_group, pg.scheduling_state) == ("job2verl_group_4:0", "job2", "NO_RESOURCES")
    assert pending_reason(pg) == ("4 bundles × {CPU: 1} STRICT_PACK: no node has 4 CPU free for all bundles together "
                         "(node 192.0.2.2: 4 CPU, 0 free) — waits for resources held by others")
    pd, actors, nodes = moment("busy/released")
    items = build_pending(pd, actors, nodes, now=0.0)
    assert not [p for p in items if p.kind == "placement_group"]  # CREATED: the row goes
    waiting = [p for p in items if p.kind == "actor"]
    assert {p.worker_group for p in waiting} == {"job2wg"} and {p.waits_for for p in waiting} == {"worker"}


def test_nothing_pending_builds_nothing():
    pd, actors, nodes = moment("failures/final")
    assert build_pending(PendingData(pd.pgs, (), pd.load), actors, nodes, 0.0) == ()


# ---------------------------------------------------------------- capacity, one strategy at a time


def caps(*nodes: tuple[str, dict[str, float], dict[str, float] | None]) -> list[NodeCap]:
    return [NodeCap(ip, total, free) for ip, total, free in nodes]


def test_pack_places_bundle_by_bundle():
    c = capacity_of(((("CPU", 10.0),),) * 2, "PACK", caps(("192.0.2.2", {"CPU": 16.0}, {"CPU": 13.0})))
    assert (c.verdict, c.resource, c.need, c.node_total, c.node_free, c.bundle, c.taken) == (
        "infeasible", "CPU", 10.0, 16.0, 13.0, 2, 10.0)
    p = PendingItem("placement_group", "x", "p", None, "PENDING", None, ((("CPU", 10.0),),) * 2, "PACK", 1.0,
                    capacity=c)
    assert pending_reason(p) == ("2 bundles × {CPU: 10} PACK: no node has 10 CPU left for bundle 2 (node 192.0.2.2: 16 CPU, "
                        "13 free, 10 of it for the bundles before) — infeasible")
    two = caps(("a", {"CPU": 16.0}, {"CPU": 13.0}), ("b", {"CPU": 16.0}, {"CPU": 2.0}))
    c = capacity_of(((("CPU", 10.0),),) * 2, "PACK", two)
    assert (c.verdict, c.node_ip, c.node_free, c.taken) == ("busy", "a", 13.0, 10.0)
    assert capacity(c) == ("no node has 10 CPU free for bundle 2 (freest node a: 16 CPU, 13 free, 10 of it for the "
                               "bundles before)")
    assert capacity_of(((("CPU", 10.0),),) * 2, "PACK", caps(("a", {"CPU": 16.0}, {"CPU": 16.0}),
                                                             ("b", {"CPU": 16.0}, {"CPU": 10.0}))).verdict == "fits"


def test_gpu_pool_across_nodes_names_the_missing_gpu():
    b = (("CPU", 10.0), ("GPU", 1.0))
    nodes = caps(("10.0.0.1", {"CPU": 96.0, "GPU": 8.0}, {"CPU": 96.0, "GPU": 2.0}),
                 ("10.0.0.2", {"CPU": 96.0, "GPU": 8.0}, {"CPU": 90.0, "GPU": 0.0}))
    c = capacity_of((b,) * 4, "STRICT_PACK", nodes, "NO_RESOURCES")
    assert (c.verdict, c.resource, c.need, c.node_ip, c.node_free) == ("busy", "GPU", 4.0, "10.0.0.1", 2.0)
    assert capacity(c).startswith("no node has 4 GPU free for all bundles together (freest node 10.0.0.1: 8 GPU")
    c = capacity_of((b,) * 16, "STRICT_PACK", nodes, "INFEASIBLE")
    assert (c.verdict, c.resource, c.need, c.node_total) == ("infeasible", "GPU", 16.0, 8.0)
    assert "largest node" in capacity(c)


def test_strict_spread_counts_nodes():
    nodes = caps(("a", {"CPU": 4.0}, {"CPU": 4.0}), ("b", {"CPU": 4.0}, {"CPU": 0.0}))
    c = capacity_of(((("CPU", 1.0),),) * 3, "STRICT_SPREAD", nodes)
    assert (c.verdict, c.per, c.need, c.node_total, c.node_free) == ("infeasible", "nodes", 3.0, 2.0, 1.0)
    assert capacity(c) == "needs 3 nodes that each hold one bundle; 2 of 2 nodes could, 1 with room now"


def test_custom_resources_match_their_camelcased_use():
    assert camel("object_store_memory") == "objectStoreMemory" and camel("my_accel") == "myAccel"
    nodes = caps(("a", {"my_accel": 2.0}, {"myAccel": 0.5}))
    c = capacity_of(((("my_accel", 1.0),),), None, nodes)
    assert (c.verdict, c.resource, c.node_free) == ("busy", "my_accel", 0.5)


def test_unknown_load_falls_back_to_what_ray_says():
    c = capacity_of(((("CPU", 10.0),),), None, [], "INFEASIBLE")
    assert c.verdict == "unknown"
    p = PendingItem("placement_group", "x", "g:0", None, "PENDING", "INFEASIBLE", ((("CPU", 10.0),),), None, 3.0,
                    capacity=c)
    assert pending_reason(p) == "1 bundle {CPU: 10}: no node can ever hold it (Ray: INFEASIBLE)"


def test_names():
    assert pool_prefix("global_poolverl_group_8:0") == "global_pool" and pool_prefix("verl_group_2:0") is None
    assert pool_prefix("my_pg") is None
    assert resources((("CPU", 10.0), ("memory", 8 * 2**30))) == "{CPU: 10, memory: 8.0G}"
    assert demand(((("CPU", 1.0), ("GPU", 1.0)), (("CPU", 1.0),), (("CPU", 1.0),))) == \
        "3 bundles: {CPU: 1, GPU: 1} + 2 × {CPU: 1}"


# ---------------------------------------------------------------- actor rows


RULES = dict(pending_after_s=10.0, startup_after_s=60.0, restart_window_s=600.0)


def test_actor_rows_say_why_they_cannot_start():
    actors, _ = parse.actors(doc("failures/final", "api_v0_actors.json"))
    st = {a.name: startup_stall(a, None, PendingData(), 0.0, **RULES) for a in actors}
    assert st["pip_fail_actor"].rule == "cannot_start"
    assert stall_reason(st["pip_fail_actor"]) == ("cannot start: ERROR: No matching distribution found for "
                                           "this-package-does-not-exist-xyz==9.9")
    assert stall_reason(st["conda_fail_actor"]) == "cannot start: ValueError: Could not find Conda executable at conda."
    assert stall_tag(st["import_error_actor"]) == ("cannot start: ModuleNotFoundError: No module named "
                                            "'this_module_does_not_exist_xyz'")
    assert "No module named 'this_module_does_not_exist_xyz'" in stall_reason(st["import_error_actor"])
    assert st["raise_in_init_restarts_actor"].cause == "ValueError: boom in __init__ (max_restarts=2)"
    loop = st["restart_loop_actor"]
    assert (loop.rule, loop.restarts, stall_tag(loop)) == ("dead", 5, "DEAD after 5 restarts")
    assert stall_reason(loop).startswith("actor DEAD after 5 restarts: worker process died (SYSTEM_ERROR)")
    # the whole text stays, never cut
    pip = next(a for a in actors if a.name == "pip_fail_actor")
    assert len(pip.death_text) > 2000 and pip.death_text.rstrip().endswith(
        "No matching distribution found for this-package-does-not-exist-xyz==9.9")


def test_restart_loop_shows_the_count_and_the_last_cause():
    early, _ = parse.actors(doc("failures", "actors_t003.json"))
    later, _ = parse.actors(doc("failures", "actors_t009.json"))
    a3 = next(a for a in early if a.name == "restart_loop_actor")
    a9 = next(a for a in later if a.name == "restart_loop_actor")
    assert (a3.state, a3.num_restarts, a3.death_cause) == ("ALIVE", 1, None)
    # ALIVE after a restart verltop did not see: nothing to say
    assert startup_stall(a3, None, PendingData(), 100.0, **RULES) is None
    seen = PendingData(restarted_at={a3.actor_id: 95.0}, last_cause={a3.actor_id: "Fatal Python error: Aborted"})
    st = startup_stall(a3, None, seen, 100.0, **RULES)
    assert (st.rule, st.restarts, stall_tag(st)) == ("restarting", 1, "restarted 1×")
    assert stall_reason(st) == "restarted 1 time; last cause: Fatal Python error: Aborted"
    st = startup_stall(a9, None, PendingData(), 100.0, **RULES)
    assert (a9.state, st.restarts) == ("RESTARTING", 4)
    assert stall_reason(st) == "restarting now; restarted 4 times; Ray keeps no cause until it gives up"


def test_pending_actor_is_stalled_only_when_blocked_or_slow():
    pd, actors, nodes = moment("infeasible/hung")
    now = pd.pgs[0].created_s + 5
    items = {p.id: p for p in build_pending(pd, actors, nodes, now)}
    big = next(a for a in actors if a.name == "big_actor_needs_10cpu")
    assert startup_stall(big, items[big.actor_id], pd, now, **RULES) is None  # 4.5 s: not yet
    later = now + 10
    items = {p.id: p for p in build_pending(pd, actors, nodes, later)}
    st = startup_stall(big, items[big.actor_id], pd, later, **RULES)
    assert (st.rule, stall_tag(st)) == ("pending", "pending: infeasible")
    assert stall_reason(st).endswith("needs {CPU: 10}, which no node has (infeasible)")
    on_pg = next(a for a in actors if a.placement_group_id)
    st = startup_stall(on_pg, items[on_pg.actor_id], pd, later, **RULES)
    assert stall_tag(st) == "pending: PG INFEASIBLE" and "Wb5vE3verl_group_2:0" in stall_reason(st)
    # a worker merely starting is given a minute
    starting = PendingItem("actor", "a", "w", None, "PENDING_CREATION", None, (), None, 30.0, None, None, "worker")
    assert startup_stall(big, starting, pd, later, **RULES) is None


# ---------------------------------------------------------------- suspects


def test_controller_waiting_for_workers_that_do_not_exist_names_the_pending_group():
    pd, actors, nodes = moment("infeasible/hung")
    pending = build_pending(pd, actors, nodes, pd.pgs[0].created_s + 300)
    ctl = row("ctl", None, None, "controller", task="run")
    r = analyse([ctl], {"ctl": [controller_in_get()] * 2}, 0.0, pending=pending)
    (s,) = r.suspects
    assert s.placement_group_id == pending[0].id and s.actor_id == "" and suspect_json(s)["actor_id"] is None
    assert suspect_reason(s).startswith("the controller waits in ray.get (job.py:92 TaskRunner.run) on workers that do not "
                               "exist yet: placement group Wb5vE3verl_group_2:0")
    assert "no node has 20 CPU" in suspect_reason(s) and "for 5m00s" in suspect_reason(s)
    assert chain_end(pending) is pending[0]
    # with a group hung in a collective too, its straggler still comes first... and the PG is named
    actors2 = [row(f"a{i}", rank=i) for i in range(2)] + [ctl]
    samples = {"a0": [in_collective("all_reduce")] * 2, "a1": [in_collective("all_reduce")] * 2,
               "ctl": [controller_in_get()] * 2}
    r = analyse(actors2, samples, 0.0, pending=pending)
    assert [x.placement_group_id for x in r.suspects] == [pending[0].id]
    # without a controller in ray.get the pending group is still a suspect, a weaker one
    r = analyse([], {}, 0.0, pending=pending)
    assert r.suspects[0].score == 50.0 and suspect_reason(r.suspects[0]).startswith("placement group Wb5vE3verl_group_2:0")


# ---------------------------------------------------------------- wait chains


def test_the_controllers_wait_chain_ends_in_the_pending_placement_group():
    from tests.analysis.test_chains import JOB, task
    from verltop.analysis.chains import driver_task_id
    from verltop.text.chains import chain_text

    pd, actors, nodes = moment("infeasible/hung")
    pending = build_pending(pd, actors, nodes, pd.pgs[0].created_s + 300)
    ctl_id = "c3" * 12 + JOB
    ctl = replace(row(ctl_id, None, None, "controller", task="TaskRunner.run", pid=10), job_id=JOB)
    drv = replace(row("driver:" + JOB, None, None, "driver", task=None, pid=5), actor_name="driver",
                  class_name="driver", job_id=JOB)
    run_task = task("0" * 16, "TaskRunner.run", ctl_id, driver_task_id(JOB), 10)
    samples = {ctl_id: [controller_in_get()] * 2, drv.actor_id: [controller_in_get()] * 2}
    r = analyse([ctl, drv], samples, 0.0, tasks=[run_task], pending=pending)
    (c,) = r.chains
    assert [lk.pid for lk in c.path] == [5, 10]  # driver → TaskRunner.run, as Ray's task tree says
    assert c.ends_in.placement_group_id == pending[0].id and c.ends_in.pid is None
    assert chain_json(c)["ends_in"]["placement_group_id"] == pending[0].id
    text = chain_text(c)
    assert text.startswith("driver (pid 5) → ") and "on workers that do not exist yet: placement group " \
        "Wb5vE3verl_group_2:0 is not placed: 2 bundles × {CPU: 10} STRICT_PACK" in text
    # the suspect: the placement group, once
    assert [s.placement_group_id for s in r.suspects] == [pending[0].id]
    # a controller alone (nothing else dumped) gets a chain of its own; without pending work, none
    r = analyse([ctl], {ctl_id: [controller_in_get()] * 2}, 0.0, pending=pending)
    assert [(len(c.path), c.ends_in.placement_group_id) for c in r.chains] == [(1, pending[0].id)]
    assert analyse([ctl], {ctl_id: [controller_in_get()] * 2}, 0.0).chains == ()
