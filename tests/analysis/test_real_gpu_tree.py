"""Process trees against real captures from an NVIDIA H200 (tests/fixtures/real-gpu-tree): the server's TP
workers hold GPU memory, the server none. The dashboard's ``processesPids`` of that moment, joined to the
tree, must give what NVML gave on the node; the orphans after the kill keep the contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verltop.analysis.history import TaskHistory
from verltop.analysis.view import ClusterData, build_snapshot
from verltop.model import ProcStat, ProcTree, RawActor
from verltop.sources import parse
from verltop.text.contract import actor_json

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu-tree"
FIELDS = ["pid", "ppid", "title", "cpu_percent", "rss_bytes", "gpu_index", "gpu_mem_bytes"]


def load(run: str, name: str):
    return json.loads((ROOT / run / name).read_text())


def server(doc: dict) -> dict:
    return next(a for a in doc["actors"] if a["actor_name"] == "vllm_server_0_0")


@pytest.mark.parametrize("run", ["grouped", "detached"])
def test_local_and_probe_paths_agreed_on_the_gpu(run):
    local, probe = server(load(run, "snapshot_local.json")), server(load(run, "snapshot_probe.json"))
    pids = load(run, "pids.json")
    assert local["pid"] == pids["server_pid"]
    assert [p["title"] for p in local["processes"]] == ["VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    assert [list(p) for p in local["processes"]] == [FIELDS] * 3
    tp = {p["title"]: p for p in local["processes"]}
    assert tp["VLLM::EngineCore_DP0"]["gpu_mem_bytes"] is None
    assert tp["VLLM::Worker_TP0"]["gpu_index"] == tp["VLLM::Worker_TP1"]["gpu_index"] == 0
    # the actor holds nothing itself; its row carries its workers' memory and their GPU
    assert local["gpu_index"] == 0
    assert local["gpu_mem_bytes"] == tp["VLLM::Worker_TP0"]["gpu_mem_bytes"] + tp["VLLM::Worker_TP1"]["gpu_mem_bytes"]
    strip = lambda ps: [(p["pid"], p["ppid"], p["title"], p["gpu_index"], p["gpu_mem_bytes"]) for p in ps]  # noqa: E731
    assert strip(probe["processes"]) == strip(local["processes"])
    assert (probe["gpu_index"], probe["gpu_mem_bytes"]) == (local["gpu_index"], local["gpu_mem_bytes"])


def test_dashboard_process_list_joined_to_the_tree_gives_nvmls_figures():
    """Rebuild the probe path from its raw parts: the captured /nodes/{id} and the tree of that moment."""
    run = "detached"
    local = server(load(run, "snapshot_local.json"))
    pids = load(run, "pids.json")
    node = parse.node_detail(load(run, "nodes_NODE_ID.json"))
    assert node is not None and node.node_id == pids["node_id"]
    tree = ProcTree(1.0, roots=(local["pid"],), procs=tuple(
        ProcStat(p["pid"], p["cpu_percent"], p["rss_bytes"], None, p["title"], p["ppid"]) for p in local["processes"]),
        node_id=node.node_id)
    actor = RawActor("a", "vLLMHttpServer", "ALIVE", "vllm_server_0_0", node.node_id, local["pid"])
    snap = build_snapshot(ClusterData(address="x", actors=(actor,), nodes=(node,), remote_trees=(tree,)),
                          TaskHistory(), 2.0)
    row = actor_json(snap.actors[0])
    assert [(p["pid"], p["gpu_index"], p["gpu_mem_bytes"]) for p in row["processes"]] == \
        [(p["pid"], p["gpu_index"], p["gpu_mem_bytes"]) for p in local["processes"]]
    assert (row["gpu_index"], row["gpu_mem_bytes"]) == (local["gpu_index"], local["gpu_mem_bytes"])


def test_orphans_after_the_kill():
    grouped = load("grouped", "snapshot_after_kill.json")
    assert grouped["orphans"] == []  # Ray killed the server's process group, engine included
    assert server(grouped)["state"] == "DEAD" and server(grouped)["processes"] is None
    detached = load("detached", "snapshot_after_kill.json")
    pids = load("detached", "pids.json")
    orphans = {o["pid"]: o for o in detached["orphans"]}
    assert set(orphans) == {pids["engine"], *pids["workers"]}
    assert orphans[pids["engine"]]["ppid"] == 1 and orphans[pids["engine"]]["title"] == "VLLM::EngineCore_DP0"
    held = sum(orphans[w]["gpu_mem_bytes"] for w in pids["workers"])
    assert held == server(load("detached", "snapshot_local.json"))["gpu_mem_bytes"]
    assert all(list(o) == [*FIELDS, "node_ip", "actor_id"] and o["actor_id"] is None for o in orphans.values())
