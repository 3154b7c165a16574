"""The JSON contracts' shapes: every key of every view, whatever the values (``None`` is a value)."""

from __future__ import annotations

import json

from tests.analysis.test_incidents import demo_report
from tests.engine.helpers import synthetic_snapshots
from verltop.model import Chain, ChainEnd, ChainLink, EndWhy, PendingItem, ProcRow, Stall
from verltop.text.contract import (
    chain_json,
    dump_json,
    orphan_json,
    pending_json,
    snapshot_json,
    stall_json,
)
from verltop.text.pending import not_placed

NODE_KEYS = {"node_id", "ip", "hostname", "cpu_percent", "mem_used_bytes", "mem_total_bytes", "gpus",
             "object_store_used_bytes", "object_store_total_bytes", "object_store_spilled_bytes"}
GPU_KEYS = {"index", "name", "util_percent", "mem_used_bytes", "mem_total_bytes", "power_w"}
PROC_KEYS = {"pid", "ppid", "title", "cpu_percent", "rss_bytes", "gpu_index", "gpu_mem_bytes"}


def test_snapshot_view_nodes_gpus_and_orphans():
    s = synthetic_snapshots(2)[-1]
    doc = json.loads(json.dumps(snapshot_json(s)))
    assert set(doc) == {"taken_at", "source", "nodes", "actors", "phase", "orphans", "pending", "steps", "training",
                        "slow_ranks", "rollout", "memory", "memory_note"}
    assert doc["nodes"] and all(set(n) == NODE_KEYS for n in doc["nodes"])
    assert all(set(g) == GPU_KEYS for n in doc["nodes"] for g in n["gpus"])
    o = ProcRow(7, 1, "VLLM::Worker_TP0", None, None, 0, 2**30, node_ip="10.0.0.2", actor_id="a1")
    assert set(orphan_json(o)) == PROC_KEYS | {"node_ip", "actor_id"} and orphan_json(o)["actor_id"] == "a1"


def test_dump_view_chains_and_suspects():
    doc = dump_json(demo_report())
    assert set(doc) == {"taken_at", "ranks", "groups", "suspects", "chains", "notes"}
    assert all(set(s) == {"actor_id", "worker_group", "rank", "pid", "reason", "placement_group_id"}
               for s in doc["suspects"]) and doc["suspects"]
    c = Chain((ChainLink(None, "driver", None, 5), ChainLink("a1", "w", "W.run", 6)),
              ChainEnd(6, None, "x.py:1 f", EndWhy("own_code")))
    assert chain_json(c) == {
        "path": [{"actor_id": None, "actor_name": "driver", "task": None, "pid": 5},
                 {"actor_id": "a1", "actor_name": "w", "task": "W.run", "pid": 6}],
        "ends_in": {"pid": 6, "process": None, "frame": "x.py:1 f", "reason": "in its own code",
                    "placement_group_id": None}}


def test_a_placement_group_not_placed_is_one_sentence_everywhere():
    pg = PendingItem("placement_group", "pg1", "verl_group_2:0", "actor_rollout", "PENDING", "INFEASIBLE",
                     ((("CPU", 10.0),), (("CPU", 10.0),)), "STRICT_PACK", 300.0)
    why = pending_json(pg)["reason"]
    assert why == "2 bundles × {CPU: 10} STRICT_PACK: no node can ever hold it (Ray: INFEASIBLE)"
    assert not_placed(pg) == f"placement group verl_group_2:0 is not placed: {why}"
    assert not_placed(pg, True) == (f"placement group verl_group_2:0 (worker group actor_rollout) is not placed "
                                    f"for 5m00s: {why}")


def test_a_resources_wait_keeps_its_demand_as_data_and_says_it_in_words():
    st = Stall("pending", waits_for="resources", scheduling_state="INFEASIBLE", waiting_s=60.0,
               demand=(("CPU", 10.0),))
    assert st.target is None and stall_json(st)["target"] == "{CPU: 10}"
    assert stall_json(st)["reason"] == "pending 1m00s: needs {CPU: 10}, which no node has (infeasible)"
    # a recording written before the demand was kept holds the words in target: they read the same
    old = Stall("pending", waits_for="resources", target="{CPU: 10}", scheduling_state="INFEASIBLE", waiting_s=60.0)
    assert stall_json(old) == stall_json(st)
