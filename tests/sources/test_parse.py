from __future__ import annotations

import json

import pytest

from tests.conftest import load, load_json
from verltop.sources import node_answers, parse


def test_real_actor_rows():
    rows, lr = parse.actors(load_json("ray-gpu-cluster/hung/api_v0_actors.json"))
    assert lr.total == 3 and not lr.truncated
    wd = [a for a in rows if a.class_name.endswith("WorkerDict")]
    assert sorted(a.name for a in wd) == ["abcdWorkerDict_0:0", "abcdWorkerDict_0:1"]
    assert all(a.pid and a.node_id for a in rows)


def test_actor_rows_read_one_at_a_time_are_those_read_whole():
    """``actors_bytes`` (the live view's detail reads, an actor at a time) against ``actors`` of the parsed
    answer, on every real actor list of the fixtures, a cut one, and answers of other shapes."""
    from pathlib import Path

    bodies = [f.read_bytes() for f in sorted((Path(__file__).parent.parent / "fixtures").rglob("api_v0_actors*.json"))]
    assert len(bodies) >= 5
    cut = {"result": True, "msg": "", "data": {"result": {"total": 12000, "num_after_truncation": 10000,
                                                          "partial_failure_warning": "1 node timed out",
                                                          "result": [{"actor_id": "a", "class_name": "C"}]}}}
    bodies.append(json.dumps(cut, indent=1).encode())
    for body in bodies:
        (rows, lr), (rows2, lr2) = parse.actors(parse.loads(body)), parse.actors_bytes(body)
        assert rows2 == rows and (lr2.total, lr2.truncated, lr2.warning) == (lr.total, lr.truncated, lr.warning)
    assert parse.actors_bytes(bodies[-1])[1].truncated and parse.actors_bytes(bodies[-1])[1].warning
    for bad in (b"<html>502</html>", b'{"result": false, "msg": "boom"}', b'{"result": true, "data": {}}',
                b'{"result": true, "data": {"result": {"result": [{"no_id": 1}]}}}', b'{"result": true', b"\xff"):
        with pytest.raises(parse.ParseError):
            parse.actors_bytes(bad)


def test_real_running_tasks_have_start_times():
    rows, _ = parse.tasks(load_json("ray-gpu-cluster/hung/api_v0_tasks.json"))
    running = [t for t in rows if t.state == "RUNNING"]
    assert {t.func_name for t in running} == {"TaskRunner.run", "WorkerDict.actor_rollout_update_actor"}
    assert all(t.start_time_ms and t.worker_pid for t in running)


def test_real_node_summary_and_detail():
    nodes = parse.nodes_summary(load_json("ray-gpu-cluster/hung/nodes_view_summary.json"), now=1795960290.0)
    (n,) = nodes
    assert n.ip == "192.0.2.2" and len(n.gpus) == 2
    g0 = n.gpus[0]
    assert g0.util_percent == 100 and g0.processes[0][0] == 2120 and g0.processes[0][1] == 1536 * 1024 * 1024
    assert n.stats_age_s == pytest.approx(5.74, abs=0.01)
    d = parse.node_detail(load_json("ray-gpu-cluster/hung/nodes_NODE_ID.json"))
    assert {p.pid for p in d.procs} >= {2120, 2121, 2125}


def test_only_rank_keys_survive_from_runtime_env():
    env = json.dumps({"env_vars": {"RANK": "3", "WORLD_SIZE": "8", "WG_PREFIX": "abc", "WANDB_API_KEY": "sk-secret",
                                   "HF_TOKEN": "hf_secret"}, "pip": ["x"]})
    a = parse.actor({"actor_id": "x", "class_name": "C", "state": "ALIVE", "serialized_runtime_env": env})
    assert dict(a.env) == {"RANK": "3", "WORLD_SIZE": "8", "WG_PREFIX": "abc"}
    assert "secret" not in repr(a)
    assert a.env_setup == ("pip",)
    # read again (the next poll): the same answer, from a memo that keeps a digest, not the string
    again = parse.actor({"actor_id": "y", "class_name": "C", "state": "ALIVE", "serialized_runtime_env": env})
    assert (again.env, again.env_setup) == (a.env, a.env_setup)
    assert all(isinstance(k, bytes) and b"secret" not in k for k in parse._ENV_MEMO)
    other = json.dumps({"env_vars": {"RANK": "4", "WORLD_SIZE": "8"}})
    b = parse.actor({"actor_id": "z", "class_name": "C", "state": "ALIVE", "serialized_runtime_env": other})
    assert dict(b.env) == {"RANK": "4", "WORLD_SIZE": "8"} and b.env_setup == ()


@pytest.mark.parametrize("body", ["<html>502</html>", '{"result": true', "[]", '{"result": false, "msg": "boom"}',
                                  '{"result": true, "data": {}}', "null"])
def test_bad_answers_are_parse_errors(body):
    with pytest.raises(parse.ParseError):
        parse.actors(parse.loads(body))


def test_schema_drift_degrades_to_none():
    doc = {"result": True, "data": {"result": {"result": [
        {"actor_id": "a", "state": None, "pid": "12", "new_field": {"x": 1}},
        {"no_id": 1},
        "garbage",
    ], "total": 3, "num_after_truncation": 3}}}
    rows, _ = parse.actors(doc)
    assert len(rows) == 1 and rows[0].pid == 12 and rows[0].state == "UNKNOWN" and rows[0].class_name == "?"


def test_truncation_is_reported():
    doc = {"result": True, "data": {"result": {"result": [], "total": 20000, "num_after_truncation": 10000}}}
    _, lr = parse.actors(doc)
    assert lr.truncated


def test_401_and_403_bodies_are_not_json():
    for f in ("ray-token-auth-1gpu/hung/api_v0_actors.NO_AUTH.http401.txt",
              "ray-token-auth-1gpu/hung/api_v0_actors.WRONG_TOKEN.http403.txt"):
        with pytest.raises(parse.ParseError):
            parse.loads(load(f))


@pytest.mark.parametrize("rows", [300, 12_000])  # ~0.2 MB (orjson's range) and ~8 MB (the stdlib's)
def test_a_big_answer_is_parsed_within_a_few_times_its_size(rows):
    """The TUI's peak RSS at 10,000 actors is set by parsing the largest answers: orjson held ~15x a 7 MB
    answer for a moment (~100 MB); what parses them holds at most 6x, and both parsers read the same."""
    import tracemalloc

    row = {"actor_id": "a" * 32, "class_name": "WorkerDict", "state": "ALIVE", "job_id": "01000000", "name": "w",
           "node_id": "n" * 56, "pid": 1234, "ray_namespace": "ns", "required_resources": {"CPU": 1.0, "GPU": 1.0},
           "death_cause": None, "is_detached": False, "placement_group_id": "p" * 36, "repr_name": "",
           "num_restarts": "0", "call_site": None, "label_selector": {}, "serialized_runtime_env": "{}"}
    doc = {"result": True, "msg": "", "data": {"result": {"total": rows, "num_after_truncation": rows,
                                                          "result": [dict(row, actor_id=f"{i:032x}") for i in range(rows)]}}}
    body = json.dumps(doc).encode()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        got = parse.loads(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == doc
    if len(body) >= parse.LEAN_FROM_BYTES:
        assert peak < 6 * len(body), f"{peak / len(body):.1f}x a {len(body) >> 20} MB answer"


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_a_node_detail_is_read_without_its_actors_where_they_are_most_of_it(run, monkeypatch):
    """Ray adds a node's actors last to its detail (``DataOrganizer.get_node_info``): at ~80 actors a node they
    are two thirds of the answer and never used. The answer cut before them reads the same node; an answer
    of another shape, or with few actors, is parsed whole, as before."""
    from pathlib import Path

    body = (Path(__file__).parent.parent / "fixtures" / "real-gpu-run" / run / "nodes_NODE_ID.json").read_bytes()
    doc = json.loads(body)
    whole = parse.node_detail(doc, 5.0)
    assert whole is not None and whole.procs and node_answers.node_detail_bytes(body, 5.0) == whole  # few actors: whole
    one = next(iter(doc["data"]["detail"]["actors"].values()))
    doc["data"]["detail"]["actors"] = {f"{k:032x}": {**one, "actorId": f"{k:032x}"} for k in range(200)}
    big = json.dumps(doc).encode()  # Ray's separators (", ", ": ")
    sizes: list[int] = []
    loads = parse.loads
    monkeypatch.setattr(node_answers, "loads", lambda b: (sizes.append(len(b)), loads(b))[1])
    assert node_answers.node_detail_bytes(big, 5.0) == whole
    assert sizes == [big.rfind(b'"actors":') + len(b'"actors": {}}}}')] and sizes[0] < len(big) / 3  # the cut
    # a key after the actors (another Ray's order): the cut would lose it, so the answer is parsed whole
    d = doc["data"]["detail"]
    reordered = {k: v for k, v in d.items() if k != "workers"} | {"workers": d["workers"]}
    sizes.clear()
    other = json.dumps({**doc, "data": {"detail": reordered}}).encode()
    assert node_answers.node_detail_bytes(other, 5.0) == whole and sizes[-1] == len(other)
    with pytest.raises(parse.ParseError):
        node_answers.node_detail_bytes(big[: len(big) // 2], 5.0)
