"""The node summary read without each raylet's core-worker stats gives what parsing it whole gives: on Ray's
real answers (its separators) and on compact ones (the synthetic dashboard's), with the cut taken; where the cut
is not sound (a key of that name inside a worker's stats, those words inside a string) the answer is read the
slow way and still says the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIX
from verltop.sources import node_answers, parse

REAL = [FIX / "ray-gpu-cluster/hung/nodes_view_summary.json", FIX / "ray-token-auth-1gpu/hung/nodes_view_summary.json",
        *sorted((Path(__file__).parent.parent / "fixtures" / "real-gpu-run").glob("*/nodes_view_summary.*.json"))]
NOW = 1795960290.0


def _read(body: bytes, monkeypatch) -> tuple[list, list[int]]:
    """The nodes, and the sizes of the answers read a node at a time to the end (the cut one, or the whole)."""
    sizes: list[int] = []
    streamed = parse.streamed

    def counted(b: bytes, path, take):
        levels = streamed(b, path, take)
        if levels is not None:
            sizes.append(len(b))
        return levels

    monkeypatch.setattr(node_answers, "streamed", counted)
    return node_answers.nodes_summary_bytes(body, NOW), sizes


def _many(n: int, workers: int = 8) -> dict:
    worker = {"pid": 1, "numRunningTasks": "0", "usedResources": {"CPU": [1.0]}, "actorTitle": "x", "taskQueueLength": 0}
    return {"result": True, "msg": "Node summary fetched.", "data": {"summary": [
        {"now": 10.0, "ip": f"10.0.0.{i}", "hostname": f"h{i}", "cpu": 5.0 + i, "mem": [100, 40, 60.0, 60],
         "gpus": [{"index": g, "utilizationGpu": 50 + g, "memoryUsed": 1000, "memoryTotal": 80000,
                   "processesPids": [{"pid": 100 + g, "gpuMemoryUsage": 900}]} for g in range(8)],
         "raylet": {"coreWorkersStats": [{**worker, "pid": 1000 + w} for w in range(workers)], "numWorkers": workers,
                    "nodeId": f"{i:056x}", "state": "ALIVE", "objectStoreUsedMemory": 5,
                    "objectStoreAvailableMemory": 95}}
        for i in range(n)]}}


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_summaries_cut_read_the_same(path, monkeypatch):
    body = path.read_bytes()
    whole = parse.nodes_summary(json.loads(body), NOW)
    got, sizes = _read(body, monkeypatch)
    assert got == whole and whole
    assert sizes == [len(node_answers.without_core_workers(body)[0])] and sizes[0] < len(body) * 0.8  # the cut


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")], ids=["ray", "compact"])
def test_many_nodes_cut_read_the_same(separators, monkeypatch):
    doc = _many(40)
    body = json.dumps(doc, separators=separators).encode()
    got, sizes = _read(body, monkeypatch)
    assert got == parse.nodes_summary(doc, NOW) and len(got) == 40
    assert sizes == [len(node_answers.without_core_workers(body)[0])] and sizes[0] < len(body) * 0.7
    assert node_answers.without_core_workers(body)[1] == 40


def test_an_unsound_cut_reads_the_slow_way(monkeypatch):
    doc = _many(6)
    # a worker's stats with a list and then a key of the count's name: the cut ends there, and does not parse
    doc["data"]["summary"][2]["raylet"]["coreWorkersStats"][0] |= {"spill": [1, 2], "numWorkers": 3, "more": {}}
    # the words inside a string are escaped quotes: no cut there
    doc["data"]["summary"][4]["hostname"] = '"coreWorkersStats": [ ], "numWorkers": 1'
    body = json.dumps(doc).encode()
    got, sizes = _read(body, monkeypatch)
    assert got == parse.nodes_summary(doc, NOW) and got[4].hostname == doc["data"]["summary"][4]["hostname"]
    assert sizes == [len(body)]  # the cut did not parse, and the whole answer was read instead


def test_a_summary_without_core_workers_and_errors(monkeypatch):
    doc = _many(3)
    for n in doc["data"]["summary"]:
        del n["raylet"]["coreWorkersStats"]
    body = json.dumps(doc).encode()
    assert node_answers.without_core_workers(body) == (body, 0)
    got, sizes = _read(body, monkeypatch)
    assert got == parse.nodes_summary(doc, NOW) and sizes == [len(body)]
    with pytest.raises(parse.ParseError, match="dashboard error: boom"):
        node_answers.nodes_summary_bytes(b'{"result": false, "msg": "boom", "data": {}}', NOW)
    # a node whose list is not followed by its count: the end found is the next node's, and the node between
    # would be lost (its GPUs read as the next one's): read the slow way
    doc = _many(3)
    doc["data"]["summary"][0]["raylet"]["numWorkers"] = doc["data"]["summary"][0]["raylet"].pop("numWorkers")
    doc["data"]["summary"][0]["raylet"]["coreWorkersStats"] = doc["data"]["summary"][0]["raylet"].pop(
        "coreWorkersStats")  # now last: "]}" after it
    body = json.dumps(doc).encode()
    assert node_answers.without_core_workers(body) == (body, 0)
    got, sizes = _read(body, monkeypatch)
    assert got == parse.nodes_summary(doc, NOW) and len(got) == 3 and sizes == [len(body)]
