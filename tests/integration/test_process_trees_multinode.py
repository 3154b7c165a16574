"""Process trees on the scenario cluster (three raylets on this machine): a vLLM-shaped server (the demo's
``vLLMHttpServer``: engine core and two TP workers in gloo) on one worker node and an SGLang-shaped one
(schedulers and detokenizer as its children) on the other, read as this machine's processes and, as on a
real multi-node cluster, through a probe actor per node; then the vLLM server is SIGKILLed (as the OOM killer
does) and its engine, reparented, is an orphan.

Runs after the other scenario-cluster modules; leaves a DEAD ``vllm_server_0_0`` and a live
``sglang_server_0_0`` on the cluster (the engine it left behind is killed at the end).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.wait import wait_until_async
from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.config import Endpoint
from verltop.text.contract import snapshot_json

pytestmark = pytest.mark.ray

VLLM = ["VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]
SGLANG = ["sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"]


@pytest.fixture(scope="module")
def rollout(scenario_cluster) -> dict[str, Any]:
    r = scenario_cluster.cmd(cmd="rollout", timeout=300)
    yield r
    for pid in [r["vllm"]["engine"], *r["vllm"]["workers"]]:  # whatever the kill left behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _trees(doc: dict[str, Any]) -> dict[str, list[tuple[int, int, str]]]:
    return {a["actor_name"]: [(p["pid"], p["ppid"], p["title"]) for p in a["processes"]]
            for a in doc["actors"] if a["actor_name"] in ("vllm_server_0_0", "sglang_server_0_0")}


def _expected(r: dict[str, Any]) -> dict[str, list[tuple[int, int, str]]]:
    v, s = r["vllm"], r["sglang"]
    engine, (tp0, tp1) = v["engine"], v["workers"]
    return {"vllm_server_0_0": [(engine, v["server_pid"], VLLM[0]), (tp0, engine, VLLM[1]), (tp1, engine, VLLM[2])],
            "sglang_server_0_0": [(pid, s["server_pid"], t) for pid, t in zip(s["children"], SGLANG, strict=True)]}


@pytest.mark.parametrize("path", ["local", "probe"])
def test_trees_on_every_node(scenario_cluster, rollout, path):
    c = scenario_cluster
    env = None
    args = ["snapshot", "--json", "--cpu-window", "0.5"]  # the TP workers' CPU % (not an actor's: no agent figure)
    if path == "probe":
        # as on a multi-node cluster: nothing read from this machine, each node through its probe actor
        args += ["--no-local", "--remote-processes"]
        env = {"RAY_ADDRESS": c.gcs, "RAY_AUTH_MODE": "token"}
    p, _ = c.verltop(*args, env=env, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert _trees(doc) == _expected(rollout)
    actors = {a["actor_name"]: a for a in doc["actors"]}
    assert actors["vllm_server_0_0"]["node_ip"] and actors["sglang_server_0_0"]["role"] == "rollout_server"
    tp = [x for x in actors["vllm_server_0_0"]["processes"] if x["title"].startswith("VLLM::Worker")]
    assert all(x["rss_bytes"] > 100 << 20 and x["cpu_percent"] is not None for x in tp), tp
    assert doc["orphans"] == []
    # the vLLM-shaped server's own /metrics, found on its listening socket (here, or through the probe there)
    load = {r["actor_name"]: r for r in doc["rollout"]}
    v = load["vllm_server_0_0"]
    assert v["engine"] == "vllm" and v["address"].endswith(f":{rollout['vllm']['metrics_port']}"), v
    assert v["problem"] is None and v["running"] == 0 and v["kv_cache_usage"] == 0.0, v
    assert load["sglang_server_0_0"]["address"] is None and load["sglang_server_0_0"]["problem"], load
    if path == "probe":
        # every WorkerDict rank's tree was read on its own node too (none has children)
        wd = [a for a in doc["actors"] if a["class_name"].endswith("WorkerDict") and a["state"] == "ALIVE"]
        assert wd and all(a["processes"] == [] for a in wd)
        probes = [a for a in c.dashboard.rows("actors", detail="true") if a["class_name"].endswith("VerltopProbe")
                  and a["ray_namespace"] == "verltop-probe" and a["state"] == "ALIVE"]
        assert probes == [], probes  # removed when verltop ended


def test_the_view_reads_another_node_only_when_asked(scenario_cluster, rollout):
    """As the TUI on a head node sees its workers: nothing of the other nodes is read (no probe, processes
    null, ray not imported) until the user asks for a node (`t`); then that node only, through one probe,
    re-read while it is on screen; the probe goes when the view does. (In its own process: see remote_view.)"""
    c = scenario_cluster
    v = rollout["vllm"]
    probes = lambda: {a["actor_id"]: a for a in c.dashboard.rows("actors", detail="true")  # noqa: E731
                      if a["class_name"].endswith("VerltopProbe")}
    before = set(probes())
    env = {k: val for k, val in os.environ.items() if k not in ("RAY_DASHBOARD_ADDRESS",)}
    env.update(RAY_ADDRESS=c.gcs, RAY_AUTH_MODE="token")
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("remote_view.py")), c.address, v["node_id"],
                        v["actor_id"]], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    # its last JSON line: Ray, joined for the probe, may still write to stdout as the process exits
    seen = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    assert seen["before"] == {"processes": None, "orphans": None, "ray_imported": False}, seen
    assert seen["asked"] == [[v["node_id"]], []] and "error" not in seen, seen
    assert [t for _, _, t in seen["tree"]] == VLLM and seen["tree"][0][:2] == [v["engine"], v["server_pid"]]
    assert seen["others_read"] == [v["node_id"]]  # only the node asked about
    assert seen["reread_after_s"] is not None and seen["reread_after_s"] <= 10, seen
    assert seen["orphans"] == []
    new = {k: a for k, a in probes().items() if k not in before}
    assert [a["node_id"] for a in new.values()] == [v["node_id"]] and {a["state"] for a in new.values()} == {"DEAD"}


async def test_a_killed_server_leaves_an_orphan_engine(scenario_cluster, rollout):
    c = scenario_cluster
    v = rollout["vllm"]
    iv = Intervals(actors_s=0.5, tasks_s=1.0, nodes_s=2.0, node_detail_s=2.0, local_s=0.5, timeout_s=10.0)
    mon = Monitor(Endpoint(c.address, "--address", c.token, None), iv, StallSettings(), use_local=True)
    mon.start()
    try:
        snap = await _until(mon, lambda s: [p.title for a in s.actors if a.actor_id == v["actor_id"]
                                            for p in a.processes] == VLLM, "the engine under the server")
        os.kill(v["server_pid"], signal.SIGKILL)  # no cleanup: the engine is reparented, with its TP workers
        snap = await _until(mon, lambda s: len(s.orphans or ()) >= 3 and any(
            a.actor_id == v["actor_id"] and a.state == "DEAD" for a in s.actors), "the orphans")
        orphans = {o.pid: o for o in snap.orphans}
        engine = orphans[v["engine"]]
        assert engine.title == VLLM[0] and engine.ppid != v["server_pid"] and engine.actor_id == v["actor_id"]
        assert {orphans[w].title for w in v["workers"]} == set(VLLM[1:])
        assert all(orphans[w].ppid == v["engine"] and orphans[w].actor_id == v["actor_id"] for w in v["workers"])
        j = snapshot_json(snap)["orphans"]
        assert {o["pid"] for o in j} >= {v["engine"], *v["workers"]}
        assert all(set(o) == {"pid", "ppid", "title", "cpu_percent", "rss_bytes", "gpu_index", "gpu_mem_bytes",
                              "node_ip", "actor_id"} for o in j)
    finally:
        await mon.stop()
    # verltop started after the death still finds the engine by its title (whose it was is not known then)
    p, _ = c.verltop("snapshot", "--json")
    doc = json.loads(p.stdout)
    found = {o["pid"]: o for o in doc["orphans"]}
    assert found[v["engine"]]["title"] == VLLM[0] and found[v["engine"]]["actor_id"] is None


async def _until(mon: Monitor, ok, what: str, timeout: float = 60.0):
    return await wait_until_async(lambda: (s := mon.latest) is not None and ok(s) and s, timeout, what, step=0.5,
                                  detail=lambda: mon.latest and mon.latest.orphans)
