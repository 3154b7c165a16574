"""The process-tree additions to the snapshot JSON contract: every field present, unknown as null."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import row
from verltop.model import ProcRow, Snapshot
from verltop.text.contract import actor_json, snapshot_json

FIELDS = ["pid", "ppid", "title", "cpu_percent", "rss_bytes", "gpu_index", "gpu_mem_bytes"]


def test_actor_processes_null_when_not_read_and_listed_when_read():
    a = row("a0", rank=0)
    assert actor_json(a)["processes"] is None  # not read: unknown, not "none"
    read = replace(a, processes_read_at=1.0)
    assert actor_json(read)["processes"] == []
    child = ProcRow(pid=11, ppid=10, title="VLLM::EngineCore_DP0", cpu_percent=None, rss_bytes=1 << 20,
                    gpu_index=None, gpu_mem_bytes=None, node_ip="10.0.0.1", actor_id="a0")
    j = actor_json(replace(read, processes=(child,)))["processes"]
    assert [list(p) for p in j] == [FIELDS]
    assert j[0]["title"] == "VLLM::EngineCore_DP0" and j[0]["cpu_percent"] is None


def test_orphans_add_node_ip_and_actor_id():
    o = ProcRow(pid=7, ppid=1, title="VLLM::Worker_TP1", cpu_percent=0.0, rss_bytes=None, gpu_index=0,
                gpu_mem_bytes=4 << 30, node_ip="10.0.0.2", actor_id=None)
    snap = Snapshot(taken_at=0.0, address="x", nodes=(), actors=(), phase=None, orphans=(o,))
    j = snapshot_json(snap)
    assert list(j["orphans"][0]) == [*FIELDS, "node_ip", "actor_id"]
    assert j["orphans"][0]["actor_id"] is None and j["orphans"][0]["node_ip"] == "10.0.0.2"
    assert snapshot_json(Snapshot(taken_at=0.0, address="x", nodes=(), actors=(), phase=None))["orphans"] is None
