"""Object store and GPU power from real Ray 2.60 node answers (captured with 80 MB of store and a spill)."""

from __future__ import annotations

import json
from pathlib import Path

from verltop.sources import parse

E = Path(__file__).parent.parent / "fixtures" / "ray-2.60" / "E_object_store"


def node(name: str):
    (n,) = parse.nodes_summary(json.loads((E / name).read_text()), now=0.0)
    return n


def test_idle_store():
    n = node("0_idle_nodes_view_summary.json")
    assert (n.object_store_used_bytes, n.object_store_total_bytes, n.object_store_spilled_bytes) == (0, 83886080, 0)


def test_spilled_store():
    n = node("1_spilled_nodes_view_summary.json")
    assert n.object_store_used_bytes == 62915068 and n.object_store_total_bytes == 83886080
    assert n.object_store_spilled_bytes == 62915068  # storeStats.spilledBytesTotal, a string in Ray's JSON


def test_spilled_total_stays_after_release():
    n = node("2_after_release_nodes_view_summary.json")
    assert n.object_store_used_bytes == 0 and n.object_store_spilled_bytes == 62915068


def test_node_detail_has_the_store_too():
    d = parse.node_detail(json.loads((E / "1_spilled_node_detail.json").read_text()))
    assert d is not None and d.object_store_used_bytes == 62915068


def test_first_seconds_without_store_stats_are_unknown_not_empty():
    assert parse.object_store({"objectStoreUsedMemory": 0, "objectStoreAvailableMemory": 0}) == (None, None, None)
    assert parse.object_store({"objectStoreUsedMemory": 0, "objectStoreAvailableMemory": 0,
                               "resourcesTotal": {"objectStoreMemory": 8e7}}) == (None, 80000000, None)


def test_gpu_power_from_milliwatts():
    g = parse._gpu({"index": 0, "name": "NVIDIA H200", "utilizationGpu": 100, "memoryUsed": 1024,
                    "memoryTotal": 143771, "powerMw": 612500, "processesPids": []})
    assert g is not None and g.power_w == 612.5
    g = parse._gpu({"index": 0, "powerMw": None})
    assert g is not None and g.power_w is None
