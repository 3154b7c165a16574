"""Tests of the synthetic Ray dashboard itself: shapes against real Ray 2.60 captures, auth, State API
semantics (limit, filters, sorting, truncation), time evolution, hang/kill modes, faults, CLI."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fakeray.cluster import PLANTED_SECRETS, WORKER_DICT_CLASS, FakeClock, FakeCluster
from tests.fakeray.server import FakeDashboard, Faults
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
_REL = Path("real-gpu") / "ray-gpu-cluster" / "hung"
FIX = ROOT / "tests" / "fixtures" / _REL
AUTH_FIX = FIX.parent.parent / "ray-token-auth-1gpu" / "hung"

RUNNING_Q = "detail=1&limit=10000&filter_keys=state&filter_predicates=%3D&filter_values=RUNNING"


def real(name: str):
    return json.loads((FIX / name).read_text())


def get(fd: FakeDashboard, path: str, headers: dict | None = None, method: str = "GET", timeout: float = 30
        ) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(fd.url + path, headers={**fd.headers, **(headers or {})}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(fd: FakeDashboard, path: str, **kw):
    status, _, body = get(fd, path, **kw)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def rows(fd: FakeDashboard, path: str) -> list[dict]:
    return get_json(fd, path)["data"]["result"]["result"]


# Maps keyed by ids, IPs or resource names: their keys differ between clusters by nature.
DYNAMIC = {"required_resources", "resources_total", "resourcesTotal", "usedResources", "nodeLogicalResources",
           "actors", "labels", "requiredResources", "disk", "extra_data"}


def shape_diff(fake, ref, path: str = "$", superset: bool = False) -> list[str]:
    """Key sets equal (or a superset) and leaf types equal wherever both sides are not null."""
    out: list[str] = []
    if ref is None or fake is None:
        return out
    if isinstance(ref, dict):
        if not isinstance(fake, dict):
            return [f"{path}: {type(fake).__name__} instead of dict"]
        if path.rsplit(".", 1)[-1] in DYNAMIC:
            return out
        rk, fk = set(ref), set(fake)
        if (fk != rk) if not superset else not rk <= fk:
            out.append(f"{path}: missing {sorted(rk - fk)}, extra {sorted(fk - rk)}")
        for k in rk & fk:
            out += shape_diff(fake[k], ref[k], f"{path}.{k}", superset)
    elif isinstance(ref, list):
        if not isinstance(fake, list):
            return [f"{path}: {type(fake).__name__} instead of list"]
        if ref and fake:
            if all(isinstance(x, dict) for x in ref):
                for x in fake[:5]:
                    out += shape_diff(x, ref[0], f"{path}[]", superset)
            else:
                for a, b in zip(fake, ref, strict=False):
                    out += shape_diff(a, b, f"{path}[]", superset)
    elif type(fake) is not type(ref):
        out.append(f"{path}: {type(fake).__name__} {fake!r:.40} vs real {type(ref).__name__} {ref!r:.40}")
    return out


@pytest.fixture(scope="module")
def fd():
    """A small healthy cluster, read-only use (tests that mutate start their own)."""
    with FakeDashboard(nodes=2, gpus_per_node=4, seed=7, dead_actors=3, extra_actors=6) as d:
        yield d


def fresh(**kw) -> FakeDashboard:
    kw.setdefault("nodes", 2)
    kw.setdefault("gpus_per_node", 2)
    return FakeDashboard(**kw)


# ---------------------------------------------------------------------------------------------- shapes


def test_actor_rows_match_real_capture(fd):
    body = get_json(fd, "/api/v0/actors?detail=1&limit=10000&timeout=10")
    assert shape_diff(body, real("api_v0_actors.json")) == []
    for r in body["data"]["result"]["result"]:
        assert list(r) == list(real("api_v0_actors.json")["data"]["result"]["result"][0])  # same key order
        assert isinstance(r["num_restarts"], str) and isinstance(r["pid"], int)


def test_task_rows_match_real_capture(fd):
    body = get_json(fd, "/api/v0/tasks?detail=1&limit=10000")
    ref = real("api_v0_tasks.json")
    assert shape_diff(body, ref) == []
    got = body["data"]["result"]["result"]
    kinds = {r["type"] for r in got}
    assert {"ACTOR_TASK", "ACTOR_CREATION_TASK"} <= kinds
    running = [r for r in got if r["state"] == "RUNNING"]
    assert running and all(isinstance(r["start_time_ms"], float) and r["end_time_ms"] is None for r in running)
    assert all(r["events"][-1]["state"] == "RUNNING" for r in running)
    done = [r for r in got if r["state"] == "FINISHED" and r["type"] == "ACTOR_TASK"]
    assert done and all(r["end_time_ms"] >= r["start_time_ms"] for r in done)
    creation = [r for r in got if r["type"] == "ACTOR_CREATION_TASK"]
    assert all(r["task_id"].startswith("f" * 16) and r["node_id"] is None for r in creation)
    assert any(re.fullmatch(r"[A-Za-z0-9]{6}WorkerDict_\d+:\d+:WorkerDict\.__init__", r["name"]) for r in creation)


def test_node_payloads_match_real_capture(fd):
    c = fd.cluster
    summary = get_json(fd, "/nodes?view=summary")
    ref = real("nodes_view_summary.json")
    head = next(s for s in summary["data"]["summary"] if s["raylet"]["isHeadNode"])
    other = next(s for s in summary["data"]["summary"] if not s["raylet"]["isHeadNode"])
    assert shape_diff({**summary, "data": {**summary["data"], "summary": [head]}}, ref) == []
    ref_other = {k: v for k, v in ref["data"]["summary"][0].items() if k != "gcs"}  # gcs: head only
    assert shape_diff(other, ref_other) == []
    assert set(summary["data"]["nodeLogicalResources"]) == {n.node_id for n in c.nodes}

    detail = get_json(fd, f"/nodes/{c.nodes[0].node_id}")
    assert shape_diff(detail, real("nodes_NODE_ID.json")) == []
    d = detail["data"]["detail"]
    assert "coreWorkersStats" not in d["raylet"]
    assert {w["pid"] for w in d["workers"]} >= {a.proc.pid for a in c.nodes[0].actors if a.state == "ALIVE"}
    titles = {w["cmdline"][0] for w in d["workers"]}
    assert {"ray::DashboardAgent", "ray::IDLE", "ray::TaskRunner.run"} <= titles
    # coreWorkerStats are merged like a healthy dashboard (real 2.60 sometimes leaves them empty)
    wd = next(w for w in d["workers"] if w["cmdline"][0].startswith("ray::WorkerDict"))
    assert shape_diff(wd["coreWorkerStats"][0], ref["data"]["summary"][0]["raylet"]["coreWorkersStats"][2]) == []
    gpu = d["gpus"][0]
    assert wd["pid"] in {p["pid"] for g in d["gpus"] for p in g["processesPids"]}
    assert gpu["memoryTotal"] == 143771 and gpu["name"] == "NVIDIA H200"

    state_nodes = get_json(fd, "/api/v0/nodes?detail=1&limit=10000")
    assert shape_diff(state_nodes, real("api_v0_nodes.json")) == []
    workers = get_json(fd, "/api/v0/workers?detail=1&limit=10000")
    assert shape_diff(workers, real("api_v0_workers.json")) == []
    logical = get_json(fd, "/logical/actors")
    ref_la = next(iter(real("logical_actors.json")["data"]["actors"].values()))
    for a in list(logical["data"]["actors"].values())[:5]:
        assert shape_diff(a, ref_la, superset=True) == []


def test_detail_false_gives_base_columns(fd):
    a = rows(fd, "/api/v0/actors?limit=3")
    assert list(a[0]) == ["actor_id", "class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace"]
    t = rows(fd, "/api/v0/tasks?limit=3")
    assert "events" not in t[0] and "start_time_ms" not in t[0] and "worker_pid" in t[0]
    n = rows(fd, "/api/v0/nodes")
    assert "start_time_ms" not in n[0] and "resources_total" in n[0]


def test_verl_actor_names_classes_and_runtime_env(fd):
    c = fd.cluster
    got = rows(fd, "/api/v0/actors?detail=1&limit=10000")
    by_class: dict[str, list[dict]] = {}
    for r in got:
        by_class.setdefault(r["class_name"], []).append(r)
    wd = by_class[WORKER_DICT_CLASS]
    assert len(wd) == 2 * 4
    prefix = wd[0]["name"][:6]
    for r in wd:
        m = re.fullmatch(r"([A-Za-z0-9]{6})WorkerDict_(\d+):(\d+)", r["name"])
        assert m and m.group(1) == prefix
        env = json.loads(r["serialized_runtime_env"])["env_vars"]
        assert env["RANK"] == str(int(m.group(2)) * 4 + int(m.group(3)))
        assert env["WORLD_SIZE"] == "8" and env["WG_PREFIX"] == prefix and env["RAY_LOCAL_WORLD_SIZE"] == "4"
        assert env["MASTER_ADDR"] == c.nodes[0].ip and env["MASTER_PORT"].isdigit()
        assert env["WANDB_API_KEY"] == PLANTED_SECRETS["WANDB_API_KEY"]  # the planted secret is there
        assert r["placement_group_id"] and any(k.startswith("GPU_group_") for k in r["required_resources"])
    assert [r["name"] for r in by_class["TaskRunner"]] == [""]
    assert sorted(r["name"] for r in by_class["vLLMHttpServer"]) == ["vllm_server_0_0", "vllm_server_1_0"]
    assert len(by_class["AgentLoopWorker"]) == 8
    assert all(re.fullmatch(r"agent_loop_worker_\d+_[0-9a-f]{8}", r["name"]) for r in by_class["AgentLoopWorker"])
    dead = [r for r in got if r["state"] == "DEAD"]
    assert len(dead) == 3
    for r in dead:
        (kind, ctx), = r["death_cause"].items()
        assert kind in ("actor_died_error_context", "oom_context", "creation_task_failure_context")
        assert any(isinstance(v, str) and v for v in ctx.values())


def test_ids_are_ray_shaped(fd):
    a = rows(fd, "/api/v0/actors?detail=1&limit=10000")
    assert all(re.fullmatch(r"[0-9a-f]{24}01000000", r["actor_id"]) for r in a)
    assert all(re.fullmatch(r"[0-9a-f]{56}", r["node_id"]) for r in a)
    t = rows(fd, "/api/v0/tasks?" + RUNNING_Q)
    assert all(re.fullmatch(r"[0-9a-f]{16}" + r["actor_id"], r["task_id"]) for r in t)


# ---------------------------------------------------------------------------------------------- auth


def test_token_auth_like_ray():
    with fresh(token="s3cret") as d:
        s, h, body = get(d, "/api/v0/actors", headers={"Authorization": ""})
        assert (s, body.decode()) == (401, (AUTH_FIX / "api_v0_actors.NO_AUTH.http401.txt").read_text())
        assert h["Content-Type"].startswith("text/plain")
        s, _, body = get(d, "/nodes?view=summary", headers={"Authorization": ""})
        assert (s, body.decode()) == (401, (AUTH_FIX / "nodes_view_summary.NO_AUTH.http401.txt").read_text())
        s, _, body = get(d, "/api/v0/actors", headers={"Authorization": "Bearer nope"})
        assert (s, body.decode()) == (403, (AUTH_FIX / "api_v0_actors.WRONG_TOKEN.http403.txt").read_text())
        assert get(d, "/api/v0/actors")[0] == 200
        assert get(d, "/api/v0/actors", headers={"Authorization": "", "X-Ray-Authorization": "Bearer s3cret"})[0] == 200
        assert get(d, "/api/v0/actors", headers={"Authorization": "",
                                                 "Cookie": "ray-authentication-token=s3cret"})[0] == 200
        s, _, body = get(d, "/api/authentication_mode", headers={"Authorization": ""})
        assert (s, json.loads(body)) == (200, {"authentication_mode": "token"})
        assert get(d, "/api/no/such/path", headers={"Authorization": ""})[0] == 401  # auth before routing
        d.token = None  # switchable at runtime
        assert get(d, "/api/v0/actors")[0] == 200


def test_no_auth_mode(fd):
    assert get_json(fd, "/api/authentication_mode") == {"authentication_mode": "disabled"}
    assert get(fd, "/api/v0/actors", headers={"Authorization": "Bearer anything"})[0] == 200


# ---------------------------------------------------------------------------------------------- State API


def test_limit_over_10000_is_400(fd):
    s, h, body = get(fd, "/api/v0/actors?limit=10001")
    assert s == 400 and h["Content-Type"].startswith("application/json")
    j = json.loads(body)
    assert j["result"] is False and isinstance(j["data"], dict)
    assert "Given limit 10001 exceeds the supported limit 10000" in j["msg"]
    assert get(fd, "/api/v0/tasks?limit=10000")[0] == 200


@pytest.mark.parametrize("query, msg", [
    ("limit=abc", "invalid literal for int()"),
    ("detail=maybe", "Failed to convert"),
    ("timeout=1.5", "invalid literal"),
    ("filter_keys=colour&filter_predicates=%3D&filter_values=x", "filter column colour is not supported"),
    ("filter_keys=state&filter_predicates=%3E&filter_values=x", "Unsupported filter predicate >"),
])
def test_bad_list_params_are_400(fd, query, msg):
    s, _, body = get(fd, "/api/v0/tasks?" + query)
    j = json.loads(body)
    assert s == 400 and j["result"] is False and msg in j["msg"], j


def test_running_filter_and_counters(fd):
    j = get_json(fd, "/api/v0/tasks?" + RUNNING_Q)["data"]["result"]
    res = j["result"]
    assert res and all(r["state"] == "RUNNING" for r in res)
    assert j["total"] == j["num_after_truncation"] == j["num_filtered"] == len(res)
    assert [r["task_id"] for r in res] == sorted(r["task_id"] for r in res)
    assert sum(r["name"] == "TaskRunner.run" for r in res) == 1
    everything = rows(fd, "/api/v0/tasks?detail=1&limit=10000")
    assert {r["task_id"] for r in res} == {r["task_id"] for r in everything if r["state"] == "RUNNING"}
    not_running = rows(fd, "/api/v0/tasks?detail=1&limit=10000&filter_keys=state&filter_predicates=!%3D"
                           "&filter_values=running")  # case-insensitive
    assert not_running and all(r["state"] != "RUNNING" for r in not_running)
    assert len(not_running) + len(res) == len(everything)


def test_filters_and_and_case(fd):
    c = fd.cluster
    a = c.taskrunner
    q = f"detail=1&limit=10000&filter_keys=actor_id&filter_predicates=%3D&filter_values={a.actor_id}"
    mine = rows(fd, "/api/v0/tasks?" + q)
    assert mine and all(r["actor_id"] == a.actor_id for r in mine)
    both = rows(fd, "/api/v0/tasks?" + q + "&filter_keys=state&filter_predicates=%3D&filter_values=RUNNING")
    assert [r["name"] for r in both] == ["TaskRunner.run"]
    by_name = rows(fd, "/api/v0/tasks?limit=10000&filter_keys=name&filter_predicates=%3D&filter_values=taskrunner.RUN")
    assert [r["name"] for r in by_name] == ["TaskRunner.run"]
    pid = c.workers[0].proc.pid
    by_pid = rows(fd, f"/api/v0/actors?limit=10000&filter_keys=pid&filter_predicates=%3D&filter_values={pid}")
    assert pid in {r["pid"] for r in by_pid}


def test_actor_state_filter_counts_like_gcs(fd):
    j = get_json(fd, "/api/v0/actors?limit=10000&filter_keys=state&filter_predicates=%3D&filter_values=DEAD")
    r = j["data"]["result"]
    n_all = len(fd.cluster.actors)
    assert r["total"] == n_all and r["num_after_truncation"] == n_all  # GCS counts what it filtered out
    assert r["num_filtered"] == len(r["result"]) == 3
    named = rows(fd, "/api/v0/actors?limit=10000&filter_keys=class_name&filter_predicates=%3D"
                     "&filter_values=vllmhttpserver")
    assert len(named) == 2


def test_sorted_by_id_then_cut(fd):
    all_ids = sorted(r["actor_id"] for r in rows(fd, "/api/v0/actors?limit=10000"))
    j = get_json(fd, "/api/v0/actors?limit=5")["data"]["result"]
    assert [r["actor_id"] for r in j["result"]] == all_ids[:5]
    assert j["num_filtered"] == j["total"] == len(all_ids)
    assert len(rows(fd, "/api/v0/actors")) == 100 or len(all_ids) < 100  # Ray's default limit


def test_source_truncation_at_10000_actors():
    c = FakeCluster(nodes=2, gpus_per_node=2, extra_actors=10_050)
    with FakeDashboard(c) as d:
        r = get_json(d, "/api/v0/actors?limit=10000")["data"]["result"]
        assert r["total"] == len(c.actors) > 10_000
        assert r["num_after_truncation"] == 10_000 == len(r["result"])
        t = get_json(d, "/api/v0/tasks?limit=10000")["data"]["result"]
        assert t["total"] > t["num_after_truncation"] == 10_000


def test_exclude_driver(fd):
    assert not any(r["type"] == "DRIVER_TASK" for r in rows(fd, "/api/v0/tasks?limit=10000"))
    assert any(r["type"] == "DRIVER_TASK" for r in rows(fd, "/api/v0/tasks?limit=10000&exclude_driver=false"))


# ---------------------------------------------------------------------------------------------- time


def _running(d: FakeDashboard) -> list[dict]:
    return rows(d, "/api/v0/tasks?" + RUNNING_Q)


def _worker_methods(d: FakeDashboard) -> set[str]:
    return {r["name"] for r in _running(d) if r["name"].startswith("WorkerDict.")}


def test_ppo_step_cycles_phases_on_the_clock():
    clk = FakeClock(1_800_000_000.0)
    c = FakeCluster(nodes=2, gpus_per_node=2, seed=3, clock=clk, history_s=0.0, max_finished_tasks=50)
    with FakeDashboard(c) as d:
        clk.advance(1.0)
        assert c.position()["phase"] == "gen"
        names = {r["name"] for r in _running(d)}
        assert {"TaskRunner.run", "AgentLoopWorker.generate_sequences", "vLLMHttpServer.generate"} <= names
        assert _worker_methods(d) == set()  # async rollout: the WorkerDicts idle during gen
        tr_start = next(r["start_time_ms"] for r in _running(d) if r["name"] == "TaskRunner.run")
        seen: list[str] = []
        finished_counts = []
        for _ in range(180):  # a 63 s step and the next gen, at 0.5 s
            clk.advance(0.5)
            ms = _worker_methods(d)
            assert len(ms) <= 1
            for m in ms:
                if not seen or seen[-1] != m:
                    seen.append(m)
                run = [r for r in _running(d) if r["name"] == m]
                assert len(run) == 4
                pos = c.position()
                assert all(pos["start"] * 1000 - 1 <= r["start_time_ms"] <= clk() * 1000 for r in run)
            assert next(r["start_time_ms"] for r in _running(d) if r["name"] == "TaskRunner.run") == tr_start
            j = get_json(d, "/api/v0/tasks?limit=10000&filter_keys=state&filter_predicates=%3D"
                            "&filter_values=FINISHED&filter_keys=type&filter_predicates=%3D&filter_values=ACTOR_TASK")
            finished_counts.append(j["data"]["result"]["num_filtered"])
        assert seen == [
            "WorkerDict.actor_rollout_compute_log_prob", "WorkerDict.ref_compute_ref_log_prob",
            "WorkerDict.critic_compute_values", "WorkerDict.critic_update_critic",
            "WorkerDict.actor_rollout_update_actor", "WorkerDict.actor_rollout_update_weights",
            "WorkerDict.actor_rollout_compute_log_prob",
        ]
        assert finished_counts[-1] > finished_counts[0]
        assert max(finished_counts) <= 50 + 4 * 3  # the bounded window (+ the init_model rows)


def test_node_stats_evolve():
    clk = FakeClock(1_800_000_000.0)
    c = FakeCluster(nodes=1, gpus_per_node=2, seed=3, clock=clk, history_s=0.0)
    with FakeDashboard(c) as d:
        nid = c.nodes[0].node_id
        s1 = get_json(d, "/nodes?view=summary")["data"]["summary"][0]
        g1 = get_json(d, f"/nodes/{nid}")["data"]["detail"]
        clk.advance(2.0)
        assert get_json(d, "/nodes?view=summary")["data"]["summary"][0]["now"] == s1["now"]  # 5 s reporter
        clk.advance(3.0)
        s2 = get_json(d, "/nodes?view=summary")["data"]["summary"][0]
        assert s2["now"] == pytest.approx(s1["now"] + 5.0)
        # during async gen the vLLM children (not Ray workers) hold the GPU
        wd_pids = {a.proc.pid for a in c.workers}
        gen_procs = [p for g in g1["gpus"] for p in g["processesPids"]]
        assert any(p["pid"] not in wd_pids and p["gpuUtilization"] > 50 for p in gen_procs)
        assert all(p["gpuUtilization"] == 0 for p in gen_procs if p["pid"] in wd_pids)
        clk.advance(24.0 + 6.0 + 5.0 + 4.0 + 1.5 + 8.0 + 3.0)  # into update_actor
        assert c.position()["phase"] == "update_actor"
        g2 = get_json(d, f"/nodes/{nid}")["data"]["detail"]
        busy = [w for w in g2["workers"] if w["pid"] in wd_pids]
        assert all(w["cmdline"][0] == "ray::WorkerDict.actor_rollout_update_actor" for w in busy)
        assert all(w["cpuPercent"] > 50 and w["gpuUtilization"] > 50 for w in busy)
        assert all(g["utilizationGpu"] > 50 for g in g2["gpus"])
        assert g2["now"] > g1["now"] and g2["cpu"] != g1["cpu"]
        assert [w["memoryInfo"]["rss"] for w in busy] != [w["memoryInfo"]["rss"] for w in g1["workers"]
                                                          if w["pid"] in wd_pids]


def test_sync_rollout_and_new_engine_method_names():
    clk = FakeClock(1_800_000_000.0)
    c = FakeCluster(nodes=1, gpus_per_node=2, clock=clk, history_s=0.0, rollout_mode="sync")
    with FakeDashboard(c) as d:
        clk.advance(1.0)
        assert _worker_methods(d) == {"WorkerDict.actor_rollout_generate_sequences"}
        assert not any(a.class_name == "vLLMHttpServer" for a in c.actors)
    c = FakeCluster(nodes=1, gpus_per_node=2, clock=clk, history_s=0.0, engine="new",
                    phase_seconds={"gen": 1.0, "old_log_prob": 1.0})
    with FakeDashboard(c) as d:
        clk.advance(2.5)
        assert _worker_methods(d) == {"WorkerDict.actor_rollout_ref_compute_ref_log_prob"}


def test_reward_model_group_and_speed():
    clk = FakeClock(1_800_000_000.0)
    c = FakeCluster(nodes=3, gpus_per_node=2, clock=clk, history_s=0.0, rm_nodes=1, speed=10.0)
    assert c.step_len == pytest.approx((24 + 3 + 6 + 5 + 4 + 1.5 + 8 + 12 + 2.5) / 10)
    with FakeDashboard(c) as d:
        wd = [r for r in rows(d, "/api/v0/actors?detail=1&limit=10000") if r["class_name"] == WORKER_DICT_CLASS]
        assert len({r["name"][:6] for r in wd}) == 2
        clk.advance(2.4 + 0.1)
        run = [r for r in _running(d) if r["name"].startswith("WorkerDict.")]
        assert {r["name"] for r in run} == {"WorkerDict.rm_compute_rm_score"} and len(run) == 2


def test_deterministic_for_a_seed():
    def dump(seed: int) -> tuple[bytes, bytes, bytes]:
        clk = FakeClock(1_800_000_000.0)
        c = FakeCluster(nodes=2, gpus_per_node=2, seed=seed, clock=clk, dead_actors=2)
        with FakeDashboard(c) as d:
            clk.advance(40.0)
            return (get(d, "/api/v0/actors?detail=1&limit=10000")[2], get(d, "/api/v0/tasks?detail=1&limit=10000")[2],
                    get(d, "/nodes?view=summary")[2])

    assert dump(5) == dump(5)
    assert dump(5)[0] != dump(6)[0]


# ---------------------------------------------------------------------------------------------- hang, kill


def test_hang_mode_stuck_collective():
    clk = FakeClock(1_800_000_000.0)
    c = FakeCluster(nodes=2, gpus_per_node=2, seed=3, clock=clk, history_s=0.0, hang_at_s=0.0, hang_rank=1,
                    profiling=True)
    with FakeDashboard(c) as d:
        clk.advance(30.0)
        first = _running(d)
        clk.advance(3600.0)
        pos = c.position()
        assert pos["hung"] and pos["phase"] == "old_log_prob"
        now_running = _running(d)
        stuck = [r for r in now_running if r["name"].startswith("WorkerDict.")]
        assert {r["name"] for r in stuck} == {"WorkerDict.actor_rollout_compute_log_prob"} and len(stuck) == 4
        before = {r["task_id"]: r["start_time_ms"] for r in first}
        assert all(before[r["task_id"]] == r["start_time_ms"] for r in stuck)  # the same attempts, an hour on
        assert any(r["name"] == "TaskRunner.run" for r in now_running)
        straggler = c.workers[1]
        node = c.nodes[straggler.node]
        det = get_json(d, f"/nodes/{node.node_id}")["data"]["detail"]
        by_pid = {w["pid"]: w for w in det["workers"]}
        util = {p["pid"]: p["gpuUtilization"] for g in det["gpus"] for p in g["processesPids"]}
        gpu_of = {p["pid"]: g["utilizationGpu"] for g in det["gpus"] for p in g["processesPids"]}
        peer = c.workers[0]
        assert util[straggler.proc.pid] == 0 and gpu_of[straggler.proc.pid] == 0
        assert util[peer.proc.pid] == 100 and gpu_of[peer.proc.pid] == 100
        assert by_pid[straggler.proc.pid]["cpuPercent"] < 5 < 90 < by_pid[peer.proc.pid]["cpuPercent"]
        assert by_pid[straggler.proc.pid]["cmdline"][0] == "ray::WorkerDict.actor_rollout_compute_log_prob"
        err = get(d, f"/api/v0/logs/file?actor_id={peer.actor_id}&lines=50&suffix=err")[2].decode()
        assert "Watchdog caught collective operation timeout" in err
        err = get(d, f"/api/v0/logs/file?actor_id={straggler.actor_id}&lines=50&suffix=err")[2].decode()
        assert "Watchdog caught" not in err
        tb_peer = get(d, f"/worker/traceback?pid={peer.proc.pid}&node_id={node.node_id}&native=0")[2].decode()
        tb_str = get(d, f"/worker/traceback?pid={straggler.proc.pid}&node_id={node.node_id}")[2].decode()
        assert f'Thread {peer.proc.pid} (active): "MainThread"' in tb_peer
        assert f'Thread {straggler.proc.pid} (idle): "MainThread"' in tb_str
        c.clear_hang()
        assert not c.position()["hung"]


def test_kill_rank_marks_dead_and_peers_hang():
    clk = FakeClock(1_800_000_000.0)
    c = FakeCluster(nodes=2, gpus_per_node=2, seed=3, clock=clk, history_s=0.0)
    with FakeDashboard(c) as d:
        clk.advance(27.0)  # inside old_log_prob
        victim = c.kill_rank(2)
        clk.advance(120.0)
        a = next(r for r in rows(d, "/api/v0/actors?detail=1&limit=10000") if r["actor_id"] == victim.actor_id)
        assert a["state"] == "DEAD"
        ctx = a["death_cause"]["actor_died_error_context"]
        assert ctx["reason"] == "WORKER_DIED" and ctx["pid"] == victim.proc.pid and ctx["actor_id"] == victim.actor_id
        mine = rows(d, f"/api/v0/tasks?detail=1&limit=10000&filter_keys=actor_id&filter_predicates=%3D"
                       f"&filter_values={victim.actor_id}&filter_keys=type&filter_predicates=%3D"
                       "&filter_values=ACTOR_TASK")
        failed = [r for r in mine if r["state"] == "FAILED"]
        assert failed and failed[-1]["error_type"] == "ACTOR_DIED" and failed[-1]["error_message"]
        stuck = [r for r in _running(d) if r["name"].startswith("WorkerDict.")]
        assert len(stuck) == 3 and victim.actor_id not in {r["actor_id"] for r in stuck}
        det = get_json(d, f"/nodes/{c.nodes[victim.node].node_id}")["data"]["detail"]
        assert victim.proc.pid not in {w["pid"] for w in det["workers"]}
        assert victim.proc.pid not in {p["pid"] for g in det["gpus"] for p in g["processesPids"]}


# ---------------------------------------------------------------------------------------------- faults


def test_fault_status_codes_and_match():
    with fresh() as d:
        d.faults.status_code = 500
        d.faults.match = r"^/api/v0/tasks"
        s, _, body = get(d, "/api/v0/tasks")
        j = json.loads(body)
        assert s == 500 and j["result"] is False and "Failed to query data from GCS" in j["msg"]
        assert get(d, "/api/v0/actors")[0] == 200
        d.faults.match = None
        d.faults.status_code = 429
        s, _, body = get(d, "/nodes?view=summary")
        assert s == 429 and "Max number of in-progress requests" in json.loads(body)["msg"]
        d.faults.status_code = 404
        assert get(d, "/worker/traceback?pid=1&node_id=ab")[0] == 404
        d.faults.status_code = 503
        d.faults.body = "upstream connect error"
        assert get(d, "/api/v0/actors")[:3:2] == (503, b"upstream connect error")
        d.faults.reset()
        d.faults.status_code = 500
        d.faults.remaining = 2
        assert [get(d, "/api/v0/actors")[0] for _ in range(3)] == [500, 500, 200]


def test_fault_html_truncate_and_fields():
    with fresh() as d:
        d.faults.html = True
        s, h, body = get(d, "/api/v0/actors")
        assert s == 200 and h["Content-Type"].startswith("text/html") and body.startswith(b"<!DOCTYPE html>")
        d.faults.reset()
        whole = get(d, "/api/v0/actors?detail=1")[2]
        d.faults.truncate = True
        cut = get(d, "/api/v0/actors?detail=1")[2]
        assert len(cut) == len(whole) // 2 and whole.startswith(cut)
        with pytest.raises(json.JSONDecodeError):
            json.loads(cut)
        d.faults.truncate = 100
        assert len(get(d, "/api/v0/actors?detail=1")[2]) == 100
        d.faults.reset()
        d.faults.drop_fields = {"pid", "start_time_ms"}
        d.faults.null_fields = {"node_id"}
        a = rows(d, "/api/v0/actors?detail=1")
        assert a and all("pid" not in r and r["node_id"] is None for r in a)
        t = rows(d, "/api/v0/tasks?detail=1")
        assert t and all("start_time_ms" not in r for r in t)
        d.clear_faults()
        assert all("pid" in r for r in rows(d, "/api/v0/actors?detail=1"))


def test_fault_delay_and_extra_rules():
    with fresh() as d:
        d.faults.delay_s = 0.3
        t0 = time.perf_counter()
        assert get(d, "/api/v0/nodes")[0] == 200
        assert time.perf_counter() - t0 >= 0.3
        d.faults.reset()
        d.add_fault(match="^/nodes$", status_code=500)
        d.add_fault(match="tasks", delay_s=0.05)
        assert get(d, "/nodes?view=summary")[0] == 500
        assert get(d, "/api/v0/tasks")[0] == 200
        assert get(d, "/api/v0/actors")[0] == 200
        d.clear_faults()
        assert get(d, "/nodes?view=summary")[0] == 200


def test_fault_down_and_take_down():
    with fresh() as d:
        d.faults.down = True
        with pytest.raises((ConnectionError, urllib.error.URLError, OSError)):
            get(d, "/api/v0/actors")
        d.faults.down = False
        assert get(d, "/api/v0/actors")[0] == 200
        port = d.port
        d.take_down()
        assert not d.is_up
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            get(d, "/api/v0/actors", timeout=2)
        d.bring_up()
        assert d.port == port and get(d, "/api/v0/actors")[0] == 200
        d.take_down(for_s=0.3)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            get(d, "/api/v0/actors", timeout=2)
        wait_until(lambda: d.is_up, 5, "the dashboard back up", step=0.05)
        assert get(d, "/api/v0/actors")[0] == 200


def test_faults_defaults_are_inert():
    f = Faults()
    assert not f.active and not f.applies("/api/v0/actors")


# ---------------------------------------------------------------------------------------------- misc endpoints


def test_request_counts_per_path():
    with fresh() as d:
        for _ in range(3):
            get(d, "/api/v0/actors?limit=5")
        get(d, "/nodes?view=summary")
        get(d, f"/nodes/{d.cluster.nodes[0].node_id}")
        assert d.counts["/api/v0/actors"] == 3 and d.count("/nodes") == 1 and d.stats.total() == 5
        assert d.count("/nodes", prefix=True) == 2
        assert [r.status for r in d.stats.log] == [200] * 5
        assert d.stats.max_inflight >= 1
        d.reset_counts()
        assert d.stats.total() == 0


def test_traceback_profiling_off_and_on():
    with fresh() as d:
        c = d.cluster
        a = c.workers[0]
        node = c.nodes[a.node]
        s, _, body = get(d, f"/worker/traceback?pid={a.proc.pid}&node_id={node.node_id}")
        assert s == 403 and body.decode().startswith("Profiling is disabled by default for security reasons")
        d.profiling = True
        s, h, body = get(d, f"/worker/traceback?pid={a.proc.pid}&node_id={node.node_id}&native=1")
        text = body.decode()
        assert s == 200 and h["Content-Type"].startswith("text/plain")
        assert re.match(rf"Process {a.proc.pid}: ray::WorkerDict(\.\w+)?\nPython v3\.12\.3 \(/usr/bin/python3\.12\)\n\n"
                        rf"Thread {a.proc.pid} \((active|idle)\): \"MainThread\"\n", text)
        assert '"PythonGCThread"' in text
        tr = c.taskrunner
        s, _, body = get(d, f"/worker/traceback?pid={tr.proc.pid}&ip={c.nodes[0].ip}")
        assert s == 200 and "TaskRunner.run" in body.decode()
        s, _, body = get(d, f"/worker/traceback?pid=1&node_id={node.node_id}")
        assert s == 500 and body.decode().startswith("Failed to execute")
        assert get(d, f"/worker/traceback?pid=x&node_id={node.node_id}")[0] == 400
        assert get(d, "/worker/traceback?pid=1&node_id=" + "0" * 56)[0] == 500


def test_logs_file():
    with fresh() as d:
        c = d.cluster
        s, h, body = get(d, f"/api/v0/logs/file?actor_id={c.taskrunner.actor_id}&lines=3&suffix=out")
        assert s == 200 and h["Content-Type"].startswith("text/plain")
        assert len(body.decode().splitlines()) == 3 and body.decode().splitlines()[-1].startswith("step:")
        full = get(d, f"/api/v0/logs/file?actor_id={c.workers[0].actor_id}&suffix=err")[2].decode()
        assert full.startswith(":job_id:01000000\n:actor_name:WorkerDict\n")
        a = c.workers[1]
        s, _, body = get(d, f"/api/v0/logs/file?pid={a.proc.pid}&node_id={c.nodes[a.node].node_id}&lines=2")
        assert s == 200 and len(body.splitlines()) == 2
        assert get(d, "/api/v0/logs/file?actor_id=" + "ab" * 16)[:3:2] == (500, f"Actor ID {'ab' * 16} not found.".encode())
        assert get(d, f"/api/v0/logs/file?actor_id={a.actor_id}&suffix=log")[0] == 500


def test_methods_and_unknown_paths(fd):
    assert get(fd, "/api/v0/actors", method="POST")[0] == 405
    assert get(fd, "/nodes?view=summary", method="DELETE")[0] == 405
    assert get(fd, "/api/actors/kill?actor_id=x")[0] == 404
    s, _, body = get(fd, "/nodes")
    assert s == 500 and json.loads(body)["msg"] == "Unknown view None"


def test_small_endpoints(fd):
    v = get_json(fd, "/api/version")
    assert v["ray_version"] == "2.60.0" and v["version"] == "4"
    p = get_json(fd, "/api/profiling_enabled")
    assert p["data"]["profilingEnabled"] is False and "maxDuration" in p["data"]["profilingDefaults"]
    assert get(fd, "/api/healthz")[2] == b"success"
    a = fd.cluster.workers[0]
    la = get_json(fd, f"/logical/actors?ids={a.actor_id},nope")["data"]["actors"]
    assert la[a.actor_id]["name"] == a.name and la["nope"] is None
    assert get_json(fd, f"/logical/actors/{a.actor_id}")["data"]["detail"]["pid"] == a.proc.pid
    unknown = get_json(fd, "/nodes/" + "0" * 56)["data"]["detail"]
    assert unknown["workers"] == [] and unknown["actors"] == {}


async def test_async_context_manager_and_client():
    import aiohttp

    async with (
        FakeDashboard(nodes=1, gpus_per_node=1) as d,
        aiohttp.ClientSession() as s,
        s.get(d.url + "/api/v0/actors", params={"detail": "1"}) as r,
    ):
        assert r.status == 200
        j = await r.json()
        assert j["data"]["result"]["total"] == len(d.cluster.actors)


def test_ten_thousand_actors_answer_fast():
    c = FakeCluster(nodes=128, gpus_per_node=8, seed=1, extra_actors=10_000 - 1161)
    assert len(c.actors) == 10_000
    with FakeDashboard(c) as d:
        t0 = time.perf_counter()
        r = get_json(d, "/api/v0/actors?detail=1&limit=10000&timeout=10")["data"]["result"]
        cold = time.perf_counter() - t0
        assert r["total"] == r["num_filtered"] == len(r["result"]) == 10_000
        t0 = time.perf_counter()
        for _ in range(5):
            get(d, "/api/v0/actors?detail=1&limit=10000&timeout=10")
        warm = (time.perf_counter() - t0) / 5
        assert cold < 5.0 and warm < 0.5, (cold, warm)
        assert d.app_state.builds == 1  # served from the cached bytes


def test_cli_script_serves_until_interrupted():
    p = subprocess.Popen(
        [sys.executable, "-m", "scripts.fake_dashboard", "--nodes", "2", "--gpus", "2", "--port", "0",
         "--token", "T", "--seed", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        line = p.stdout.readline()
        m = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        assert m, line + p.stderr.read()
        req = urllib.request.Request(m.group(1) + "/api/v0/actors", headers={"Authorization": "Bearer T"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["data"]["result"]["total"] > 0
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=15) == 0
