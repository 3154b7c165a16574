"""Process trees on the demo's real cluster: the rollout server's engine and TP workers under it, as
``verltop snapshot --json`` and the TUI show them; then TP worker 1 hung in its weight load.

Healthy-job tests first; the ``tp_hung_demo`` tests last (see conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.wait import pilot_wait, wait_until
from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals
from verltop.sources.config import Endpoint
from verltop.ui.app import VerltopApp
from verltop.ui.widgets.actor_table import ActorTable

pytestmark = pytest.mark.ray

ENGINE = ("VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1")


def snapshot(demo, *extra: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    if demo.token:
        env["RAY_AUTH_TOKEN"] = demo.token
    p = subprocess.run([sys.executable, "-m", "verltop", "--address", demo.address, "snapshot", "--json", *extra],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["actor_name"]: a for a in doc["actors"] if a["actor_name"]}


def test_snapshot_json_shows_the_engine_under_the_server(demo):
    pids = {v["role"] + str(v["rank"]): pid for pid, v in demo.worker_pids().items()}
    doc = snapshot(demo, "--cpu-window", "0.5")  # child processes' CPU % needs a window
    actors = by_name(doc)
    srv = actors["vllm_server_0_0"]
    assert srv["role"] == "rollout_server" and srv["class_name"] == "vLLMHttpServer"
    procs = srv["processes"]
    assert [p["title"] for p in procs] == list(ENGINE), procs
    engine, tp0, tp1 = procs
    assert engine["pid"] == pids["engine_core0"] and engine["ppid"] == srv["pid"] == pids["rollout_server0"]
    assert (tp0["pid"], tp0["ppid"], tp1["pid"], tp1["ppid"]) == (pids["tp_worker0"], engine["pid"],
                                                                  pids["tp_worker1"], engine["pid"])
    for p in procs:
        assert list(p) == ["pid", "ppid", "title", "cpu_percent", "rss_bytes", "gpu_index", "gpu_mem_bytes"]
        assert p["rss_bytes"] > 10 << 20 and p["cpu_percent"] is not None
        assert p["gpu_index"] is None and p["gpu_mem_bytes"] is None  # CPU only
    assert tp0["rss_bytes"] > 100 << 20  # the TP workers hold torch
    # every live actor of this node was read: lists, not null; the rest of the job has no children
    for name in ("agent_loop_worker_0", "agent_loop_worker_1"):
        assert actors[name]["processes"] == [] and actors[name]["role"] == "agent_loop"
    assert actors["reward_loop_worker_0"]["role"] == "reward_loop"
    wd = [a for a in doc["actors"] if a["class_name"].endswith("WorkerDict")]
    assert len(wd) == 8 and all(a["processes"] == [] for a in wd)
    # none of this job's processes is an orphan (the other test worker's cluster, on this same machine, may
    # leave one of its own on purpose: test_a_killed_server_leaves_an_orphan_engine)
    ours = set(pids.values())
    assert doc["orphans"] is not None and [o for o in doc["orphans"] if o["pid"] in ours] == []


def test_the_reward_loop_scores_in_a_sandbox_child(demo):
    """The sandbox lives ~0.3 s per score, 8 scores a step: poll until one is caught under its actor."""
    from verltop.sources.procfs import ProcReader

    loop_pid = next(pid for pid, v in demo.worker_pids().items() if v["role"] == "reward_loop")
    r = ProcReader()
    seen = wait_until(lambda: [x for x in r.read([loop_pid])["procs"] if x[2] and x[2].endswith("demo/sandbox.py")],
                      40, "a sandbox child under reward_loop_worker_0", step=0.05)
    assert seen[0][1] == loop_pid and " -I -S " in seen[0][2]


async def test_tui_shows_the_tree_under_the_server(demo):
    iv = Intervals(actors_s=1.0, tasks_s=1.0, nodes_s=5.0, node_detail_s=5.0, timeout_s=10.0)
    app = VerltopApp.live(Endpoint(demo.address, "--address", demo.token, "demo"), iv, StallSettings(), use_local=True)
    async with app.run_test(size=(200, 60)) as pilot:
        t = app.screen.query_one(ActorTable)
        def server():
            snap = app.snapshot
            return next((a for a in snap.actors if a.actor_name == "vllm_server_0_0"), None) if snap else None

        srv = await pilot_wait(pilot, lambda: (s := server()) is not None and len(s.processes) == 3 and all(
            p.cpu_percent is not None for p in s.processes) and s, 30, "the server's three processes with CPU figures",
            step=0.5, detail=server)
        assert srv is not None and [p.title for p in srv.processes] == list(ENGINE)
        await pilot.pause(0.2)
        kids = [f"proc:{srv.actor_id}:{p.pid}" for p in srv.processes]
        i = t.keys.index(srv.actor_id)
        assert t.keys[i + 1 : i + 4] == kids  # three children: open by default
        assert [t.cells(k)["role"] for k in kids] == ["└ EngineCore_DP0", "  ├ Worker_TP0", "  └ Worker_TP1"]
        assert all(t.cells(k)["pid"] == str(p.pid) for k, p in zip(kids, srv.processes, strict=True))
        t.move_cursor(i)
        await pilot.press("c")
        assert not set(kids) & set(t.keys) and t.cells(srv.actor_id)["role"].startswith("▸")


def _stack(pid: int) -> list[str]:
    """The main thread's functions, innermost first, by py-spy (as verltop dumps them)."""
    from verltop.sources import pyspy

    exe = pyspy.find_pyspy()
    if exe is None:
        pytest.skip("py-spy not installed")
    p = subprocess.run([exe, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
    if p.returncode != 0 and "ermission" in p.stderr + p.stdout:
        pytest.skip("py-spy may not attach here")
    assert p.returncode == 0, p.stderr
    threads, err = pyspy.parse_json(p.stdout)
    assert err is None, err
    main = next(t for t in threads if t.name == "MainThread")
    return [f.func.rsplit(".", 1)[-1] for f in main.frames]


def test_tp_hang_sits_in_the_weight_load_and_peers_wait(tp_hung_demo):
    info = tp_hung_demo.hang_info()
    assert info["target"] == "tp1" and info["rank"] == 1
    pids = {v["role"] + str(v["rank"]): pid for pid, v in tp_hung_demo.worker_pids().items()}
    assert info["pid"] == pids["tp_worker1"]
    assert tp_hung_demo.progress()["phase"] == "update_weights" and tp_hung_demo.progress()["hanging"]
    tp1 = _stack(pids["tp_worker1"])
    assert "_load_weights_bucket" in tp1 and "update_weights" in tp1 and "worker_busy_loop" in tp1, tp1
    # TP0 loads its last buckets before it reaches the check's all-reduce: a busy machine takes a while
    tp0 = wait_until(lambda: (st := _stack(pids["tp_worker0"])) and "all_reduce" in st and st, 30,
                     "TP worker 0 in the weight check's all_reduce", step=0.3, detail=lambda: _stack(pids["tp_worker0"]))
    assert "all_reduce" in tp0 and "update_weights" in tp0 and "_load_weights_bucket" not in tp0, tp0
    core = _stack(pids["engine_core0"])
    assert "get_response" in core and "collective_rpc" in core and "run_busy_loop" in core, core
    # verltop still shows the tree while it hangs
    srv = by_name(snapshot(tp_hung_demo))["vllm_server_0_0"]
    assert [p["title"] for p in srv["processes"]] == list(ENGINE)
