"""The demo job seen through the Ray dashboard HTTP API, as verltop sees it (no ray import in the checks).

Healthy-job tests come first; the ``hung_demo`` tests come last (see conftest.py for the contract).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import time
from collections import Counter
from typing import Any

import pytest

from tests.wait import wait_until, wait_until_async

pytestmark = pytest.mark.ray

WORKER_DICT = "create_colocated_worker_cls.<locals>.WorkerDict"
NAME_RE = re.compile(r"^(?P<prefix>[A-Za-z0-9]{6})WorkerDict_(?P<pg>\d+):(?P<local_rank>\d+)$")
PHASES = [
    "AgentLoopWorker.generate_sequences",
    "vLLMHttpServer.generate",
    "RewardLoopWorker.compute_score",
    "WorkerDict.rm_compute_rm_score",
    "WorkerDict.actor_rollout_compute_log_prob",
    "WorkerDict.ref_compute_ref_log_prob",
    "WorkerDict.critic_compute_values",
    "WorkerDict.critic_update_critic",
    "WorkerDict.actor_rollout_update_actor",
    "WorkerDict.actor_rollout_update_weights",
    "vLLMHttpServer.update_weights",
]
# Phases long enough (>= ~0.5 s on every rank) to be caught RUNNING by a 0.5 s poll.
LONG_PHASES = {
    "AgentLoopWorker.generate_sequences",
    "vLLMHttpServer.generate",
    "WorkerDict.actor_rollout_compute_log_prob",
    "WorkerDict.critic_update_critic",
    "WorkerDict.actor_rollout_update_actor",
}
UPDATE_ACTOR = "WorkerDict.actor_rollout_update_actor"


def _env(actor: dict[str, Any]) -> dict[str, str]:
    return json.loads(actor.get("serialized_runtime_env") or "{}").get("env_vars", {})


def test_dashboard_needs_the_token(demo, dashboard):
    if demo.token is None:
        pytest.skip("token auth is off (RAY_AUTH_MODE set to something other than token)")
    assert dashboard.raw("/api/v0/actors", token=None)[0] == 401
    assert dashboard.raw("/api/v0/actors", token="0" * 64)[0] == 403  # a wrong token is 403, not 401
    assert dashboard.raw("/api/v0/actors")[0] == 200
    assert "token" not in repr(demo) and demo.token not in repr(demo)


def test_worker_dict_actors(dashboard):
    actors = [a for a in dashboard.rows("actors", detail="true") if a["state"] == "ALIVE"]
    classes = Counter(a["class_name"] for a in actors)
    assert classes == {WORKER_DICT: 8, "TaskRunner": 1, "vLLMHttpServer": 1, "AgentLoopWorker": 2,
                       "RewardLoopWorker": 1}, classes
    rollout = {a["name"]: a["class_name"] for a in actors if a["class_name"] != WORKER_DICT}
    assert rollout == {"": "TaskRunner", "vllm_server_0_0": "vLLMHttpServer", "agent_loop_worker_0": "AgentLoopWorker",
                       "agent_loop_worker_1": "AgentLoopWorker", "reward_loop_worker_0": "RewardLoopWorker"}, rollout

    groups: dict[str, list[dict[str, Any]]] = {}
    for a in actors:
        if a["class_name"] != WORKER_DICT:
            continue
        m = NAME_RE.match(a["name"])
        assert m, a["name"]
        env = _env(a)
        assert {"RANK", "WORLD_SIZE", "WG_PREFIX", "MASTER_ADDR", "MASTER_PORT"} <= env.keys(), env
        assert env["WG_PREFIX"] == m["prefix"]
        # One placement group per pool on one node: RANK = local_rank.
        assert m["pg"] == "0" and env["RANK"] == m["local_rank"]
        assert a["placement_group_id"]
        groups.setdefault(env["WG_PREFIX"], []).append(a)

    sizes = sorted(len(g) for g in groups.values())
    assert sizes == [2, 2, 4], sizes
    for members in groups.values():
        envs = [_env(a) for a in members]
        assert {e["WORLD_SIZE"] for e in envs} == {str(len(members))}
        assert sorted(int(e["RANK"]) for e in envs) == list(range(len(members)))
        assert len({e["MASTER_PORT"] for e in envs}) == 1  # one gloo group per WorkerDict group

    runner = next(a for a in actors if a["class_name"] == "TaskRunner")
    assert runner["name"] == ""  # verl's TaskRunner is unnamed


def test_running_tasks_cycle_through_phases(demo, dashboard):
    # A full step is ~10 s; returns from start_demo at the start of step 1.
    seen: set[str] = set()

    def all_long_phases_seen_running() -> bool:
        # Right after start, actor creation tasks ("<name>:WorkerDict.__init__") can still read RUNNING
        # (task events reach GCS in batches); phases are the ACTOR_TASK rows.
        names = {t["name"] for t in dashboard.running_tasks() if t["type"] == "ACTOR_TASK"}
        assert "TaskRunner.run" in names
        seen.update(names)
        return seen >= LONG_PHASES and demo.progress().get("step", 0) >= 2

    # two steps; slower when the machine is busy
    wait_until(all_long_phases_seen_running, 120, "every long phase running, through step 2", step=0.5,
               detail=lambda: (sorted(LONG_PHASES - seen), demo.progress()))
    # init_model rows may lag the same way at the start.
    extra = {n for n in seen - set(PHASES) - {"TaskRunner.run", "vLLMHttpServer.launch_server"}
             if not n.endswith("_init_model")}
    assert not extra, extra

    # Short phases may fall between polls, but each has run by now (finished attempts are listed too); the
    # last one of step 1 (the rollout server's weight load) ends as step 2 starts and its event reaches the
    # dashboard a moment later.
    all_names = wait_until(
        lambda: (n := Counter(t["name"] for t in dashboard.rows("tasks", limit=10000))) and all(n[p] for p in PHASES)
        and n, 20, "every phase listed as run", step=1,
        detail=lambda: sorted(set(PHASES) - {t["name"] for t in dashboard.rows("tasks", limit=10000)}))
    # init_model ran once in every process of every role; get_master_addr_port once per group.
    assert all_names["WorkerDict.critic_init_model"] == 4
    assert all_names["WorkerDict.actor_rollout_init_model"] == 4
    assert all_names["WorkerDict.ref_init_model"] == 2
    assert all_names["WorkerDict.rm_init_model"] == 2
    assert all_names["get_master_addr_port"] == 3


async def test_every_group_shows_its_roles_soon(demo):
    """A monitor started on a running job names every colocated group's roles within a few polls, the groups
    whose methods are too short to be seen running (rm scores a batch in well under a poll) included."""
    from verltop.engine import Intervals, Monitor
    from verltop.sources.config import Endpoint

    mon = Monitor(Endpoint(demo.address, "--address", demo.token, "demo"), Intervals.every(1.0), use_local=False)
    got = []
    mon.subscribe(got.append)
    mon.start()
    try:
        def roles() -> dict[str | None, tuple[str, ...]]:
            return {a.worker_group: a.roles for a in got[-1].actors if a.worker_group} if got else {}

        await wait_until_async(lambda: len(r := roles()) == 3 and all("other" not in x for x in r.values()), 40,
                               "every group's roles named", step=0.5, detail=roles)
        roles = roles()
        assert sorted(sorted(r) for r in roles.values()) == [["actor_rollout", "critic"], ["ref"], ["rm"]], roles
    finally:
        await mon.stop()


def _some_cpu(address: str, env: dict, extra: tuple, docs: list[dict]) -> bool:
    """One ``verltop snapshot --json``: every live actor carries a CPU figure; is any above 0?"""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "verltop", "--address", address, "snapshot", "--json", *extra],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    docs.append(doc := json.loads(p.stdout))
    alive = [a for a in doc["actors"] if a["state"] == "ALIVE"]
    assert len(alive) >= 9
    assert all(isinstance(a["cpu_percent"], (int, float)) for a in alive), [(a["actor_name"], a["cpu_percent"])
                                                                            for a in alive]
    return any(a["cpu_percent"] > 0 for a in alive)


def test_one_shot_snapshot_has_cpu_without_waiting(demo):
    """`verltop snapshot --json` with its defaults does not sleep to sample CPU: every live actor carries the
    dashboard agent's figure; `--cpu-window` samples this machine's processes instead, and still gives one."""
    env = {**os.environ, "RAY_AUTH_TOKEN": demo.token or ""}
    for extra in ((), ("--cpu-window", "0.3")):
        docs: list[dict] = []
        # the controller and the training ranks do work: some figure is above 0 (the agent samples each worker
        # every few seconds: a snapshot in a quiet moment of the step may read all of them at 0)
        wait_until(functools.partial(_some_cpu, demo.address, env, extra, docs), 60,
                   "a snapshot with some actor's CPU above 0", step=0.5,
                   detail=lambda docs=docs: [(a["actor_name"], a["cpu_percent"]) for a in docs[-1]["actors"]])
        doc = docs[-1]
        # the rollout server's own load, from its /metrics (found through its listening socket in /proc)
        r = {x["actor_name"]: x for x in doc["rollout"]}["vllm_server_0_0"]
        assert r["address"] and r["engine"] == "vllm" and r["problem"] is None, r
        assert isinstance(r["running"], int) and isinstance(r["kv_cache_usage"], float), r


def test_hang_blocks_peers_in_update_actor(hung_demo, dashboard):
    marker = hung_demo.hang_info()
    assert marker and marker["rank"] == 2, marker
    actors = {a["actor_id"]: a for a in dashboard.rows("actors", detail="true")}

    def stuck() -> dict[str, int]:
        """task_id -> RANK of RUNNING update_actor tasks."""
        return {t["task_id"]: int(_env(actors[t["actor_id"]])["RANK"])
                for t in dashboard.running_tasks() if t["name"] == UPDATE_ACTOR}

    # task events reach GCS about once a second
    first = wait_until(lambda: len(s := stuck()) >= 4 and s, 30, "four running update_actor attempts", step=1,
                       detail=stuck)
    assert sorted(first.values()) == [0, 1, 2, 3], first
    # still the same attempts, running, once the hang has lasted twice a healthy update_actor (the longest
    # in the controller's phase log), by the dashboard's later reads
    log = hung_demo.phase_log()
    longest = max((b["time"] - a["time"] for a, b in itertools.pairwise(log) if a["phase"] == "update_actor"),
                  default=5.0)
    since = marker["since"]
    listed_at = time.monotonic()

    def still_stuck_long_after() -> bool:
        now = stuck()
        assert now == first, "the same update_actor attempts must still be RUNNING"
        return time.time() - since > 2 * longest and time.monotonic() - listed_at > 2

    wait_until(still_stuck_long_after, 2 * longest + 30, "twice a healthy update_actor's time", step=1)
    assert "TaskRunner.run" in {t["name"] for t in dashboard.running_tasks()}
    progress = hung_demo.progress()
    assert progress["phase"] == "update_actor" and progress["hanging"], progress


def test_hang_stacks_through_dashboard(hung_demo, dashboard):
    status, body = dashboard.raw("/api/profiling_enabled")
    assert status == 200 and json.loads(body)["data"]["profilingEnabled"], body
    node_id = dashboard.rows("nodes")[0]["node_id"]
    pids = hung_demo.worker_pids()
    marker = hung_demo.hang_info()
    assert marker, "not hung"

    def stack(pid: int) -> str:
        status, body = dashboard.raw("/worker/traceback", pid=pid, node_id=node_id, timeout=60)
        text = body.decode(errors="replace")
        if status == 500 and "permission" in text.lower():
            pytest.skip(f"py-spy may not attach here: {text[:200]}")
        assert status == 200, text[:300]
        return text

    assert "_stuck_rollout" in stack(marker["pid"])
    peers = [p for p, info in pids.items() if info["role"] in ("actor_rollout", "critic") and p != marker["pid"]]
    assert len(peers) == 3
    peer = stack(peers[0])
    assert "all_reduce" in peer and "update_actor" in peer, peer
    runner = next(p for p, info in pids.items() if info["role"] == "task_runner")
    assert "TaskRunner.run" in stack(runner)
