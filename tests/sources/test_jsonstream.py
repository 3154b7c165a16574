"""The node summary read a node at a time gives what parsing it whole gives, on Ray's real answers and on
answers of other shapes (which fall back to the whole parse and its errors)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIX
from verltop.sources import node_answers, parse
from verltop.sources.jsonstream import each

REAL = ["ray-gpu-cluster/hung/nodes_view_summary.json", "ray-gpu-cluster/hung/nodes_view_summary.2.json",
        "ray-token-auth-1gpu/hung/nodes_view_summary.json"]


@pytest.mark.parametrize("name", REAL)
def test_real_summary_read_a_node_at_a_time(name):
    body = (FIX / name).read_bytes()
    assert node_answers.nodes_summary_bytes(body, now=1795960290.0) == parse.nodes_summary(json.loads(body), now=1795960290.0)


def test_many_nodes_in_order_with_the_envelope():
    nodes = [{"now": 10.0, "ip": f"10.0.0.{i}", "hostname": f"h{i}", "cpu": 5.0 + i, "mem": [100, 40, 60.0, 60],
              "gpus": [], "raylet": {"nodeId": f"{i:056x}", "state": "ALIVE", "coreWorkersStats": [{"pid": i}] * 50}}
             for i in range(40)]
    body = json.dumps({"result": True, "msg": "Node summary fetched.", "data": {"summary": nodes}}).encode()
    got = node_answers.nodes_summary_bytes(body, now=12.0)
    assert got == parse.nodes_summary(json.loads(body), now=12.0)
    assert [n.ip for n in got] == [f"10.0.0.{i}" for i in range(40)] and got[3].mem_used_bytes == 60


@pytest.mark.parametrize(("body", "error"), [
    (b'{"result": false, "msg": "boom", "data": {}}', "dashboard error: boom"),
    (b'{"result": true, "data": {"nodes": []}}', "lacks data.summary"),
    (b'{"result": true, "data": {"summary": [{"raylet": {"nodeId": "a"', "invalid JSON"),
    (b"<html>502</html>", "HTML, not JSON"),
])
def test_other_shapes_say_what_the_whole_parse_says(body, error):
    with pytest.raises(parse.ParseError, match=error):
        node_answers.nodes_summary_bytes(body, now=0.0)


def test_each_walks_only_the_path():
    seen: list = []
    text = '{"a": 1, "data": {"x": "]", "summary": [1, {"k": [2, "]"]}, []], "total": 3}, "z": null}'
    assert each(text, ("data", "summary"), seen.append) == [{"a": 1, "z": None}, {"x": "]", "total": 3}]
    assert seen == [1, {"k": [2, "]"]}, []]
    for bad in ('{"data": {"summary": 3}}', '{"data": {"summary": [1, 2', "[1]", '{"data": {"summary": []}} x'):
        with pytest.raises(ValueError):
            each(bad, ("data", "summary"), seen.append)
