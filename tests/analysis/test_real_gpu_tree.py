"""Process trees against real captures from an NVIDIA H200 (tests/fixtures/real-gpu-tree): a vLLM-shaped
rollout server whose TP workers hold GPU memory, the server none; then the server SIGKILLed.

The raw captures (the dashboard's ``/api/v0/actors`` and ``/nodes/{id}``, before and after the kill, with
``processesPids`` carrying NVML's per-process memory) go through today's parsing and snapshot building; the
process facts of the moment (pid, parent, title, CPU, RSS: /proc, which the capture kept only in verltop's
output) join them. What comes out must be what the TUI showed on that machine (``tmux_*.txt``) and what the
setup put there (TP worker r holds (r + 1) × 2 GiB plus its CUDA context)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.model import ProcStat, ProcTree, Snapshot
from verltop.sources import parse
from verltop.text.contract import snapshot_json

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu-tree"
GIB = 1 << 30
TITLES = ["VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]


def load(run: str, name: str):
    return json.loads((ROOT / run / name).read_text())


def procs(run: str, after_kill: bool = False) -> list[ProcStat]:
    """The engine and its workers as /proc had them (after the kill, the detached engine's parent is init)."""
    doc = load(run, "snapshot_after_kill.json" if after_kill else "snapshot_local.json")
    rows = doc["orphans"] if after_kill else next(a for a in doc["actors"] if a["processes"])["processes"]
    return [ProcStat(p["pid"], p["cpu_percent"], p["rss_bytes"], None, p["title"], p["ppid"]) for p in rows]


def snapshot(run: str, after_kill: bool = False) -> Snapshot:
    """The probe path: the raw dashboard captures and the node's tree, through today's code."""
    actors, _ = parse.actors(load(run, "actors.json"))
    node = parse.node_detail(load(run, "nodes_NODE_ID.after_kill.json" if after_kill else "nodes_NODE_ID.json"))
    assert node is not None and node.node_id == load(run, "pids.json")["node_id"]
    if after_kill:  # Ray marks the actor dead; what is left on the node is loose, under no root
        actors = [replace(a, state="DEAD") for a in actors]
        tree = ProcTree(2.0, roots=(), loose=tuple(procs(run, True)), node_id=node.node_id)
    else:
        tree = ProcTree(1.0, roots=tuple(a.pid for a in actors), procs=tuple(procs(run)), node_id=node.node_id)
    return build_snapshot(ClusterData(address="x", actors=tuple(actors), nodes=(node,), remote_trees=(tree,)),
                          TaskHistory(), 3.0)


def seen_on_screen(run: str, name: str) -> dict[str, tuple[int, float | None]]:
    """title -> (pid, GPU memory in GiB) of the tree's lines in the TUI as captured in tmux."""
    out = {}
    for line in (ROOT / run / name).read_text().splitlines():
        m = re.search(r"(EngineCore_DP0|Worker_TP\d)\s+(\d+)(.*)", line)
        if m:
            mem = re.search(r"(\d+\.\d)G", m[3])  # GPU MEM, the first figure in G on the line
            out[f"VLLM::{m[1]}"] = (int(m[2]), float(mem[1]) if mem else None)
    return out


@pytest.mark.parametrize("run", ["grouped", "detached"])
def test_the_servers_tree_carries_nvmls_memory_per_worker(run):
    snap = snapshot(run)
    [row] = snap.actors
    pids = load(run, "pids.json")
    assert row.pid == pids["server_pid"] and row.role == "rollout_server"
    assert [p.title for p in row.processes] == TITLES
    assert [p.pid for p in row.processes] == [pids["engine"], *pids["workers"]]
    engine, tp0, tp1 = row.processes
    assert engine.gpu_index is None and engine.gpu_mem_bytes is None  # the engine core holds nothing
    assert tp0.gpu_index == tp1.gpu_index == 0
    assert 2 * GIB < tp0.gpu_mem_bytes < 3 * GIB and 4 * GIB < tp1.gpu_mem_bytes < 5 * GIB
    # the actor holds nothing itself; its row carries its workers' memory and their GPU
    assert row.gpu_index == 0 and row.gpu_mem_bytes == tp0.gpu_mem_bytes + tp1.gpu_mem_bytes
    # as the TUI showed it on the machine
    screen = seen_on_screen(run, "tmux_tree.txt")
    assert {p.title: (p.pid, p.gpu_mem_bytes and round(p.gpu_mem_bytes / GIB, 1)) for p in row.processes} == screen
    assert snap.orphans == ()


def test_a_detached_engine_is_left_behind_holding_the_gpu():
    snap = snapshot("detached", after_kill=True)
    pids = load("detached", "pids.json")
    [row] = snap.actors
    assert row.state == "DEAD" and not row.processes
    orphans = {o.pid: o for o in snap.orphans}
    assert list(orphans) == [pids["engine"], *pids["workers"]]
    assert orphans[pids["engine"]].ppid == 1 and orphans[pids["engine"]].title == TITLES[0]
    held = sum(orphans[w].gpu_mem_bytes for w in pids["workers"])
    assert round(held / GIB, 1) == 7.2  # "3 processes with no live actor above them  holding 7.2G"
    assert "holding 7.2G of GPU memory" in (ROOT / "detached" / "tmux_orphans.txt").read_text()
    assert {o.title: (o.pid, o.gpu_mem_bytes and round(o.gpu_mem_bytes / GIB, 1)) for o in snap.orphans} == \
        seen_on_screen("detached", "tmux_orphans.txt")
    doc = snapshot_json(snap)["orphans"]
    assert all(set(o) == {"pid", "ppid", "title", "cpu_percent", "rss_bytes", "gpu_index", "gpu_mem_bytes",
                          "node_ip", "actor_id"} and o["actor_id"] is None for o in doc)


def test_no_orphan_from_a_pid_the_dashboard_still_lists():
    """Grouped: Ray killed the engine with the server; the dashboard's ``processesPids`` still lists the dead
    workers (its agent reports every 5 s), but nothing is left on the node: no orphan, no tree."""
    after = load("grouped", "nodes_NODE_ID.after_kill.json")
    listed = {p["pid"] for gpu in after["data"]["detail"]["gpus"] for p in gpu.get("processesPids") or ()}
    assert set(load("grouped", "pids.json")["workers"]) <= listed
    actors, _ = parse.actors(load("grouped", "actors.json"))
    node = parse.node_detail(after)
    tree = ProcTree(2.0, roots=(), node_id=node.node_id)
    snap = build_snapshot(ClusterData(address="x", actors=tuple(replace(a, state="DEAD") for a in actors),
                                      nodes=(node,), remote_trees=(tree,)), TaskHistory(), 3.0)
    assert snap.orphans == () and not snap.actors[0].processes and snap.actors[0].state == "DEAD"
