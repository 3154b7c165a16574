"""Memory on the demo's real verl job (local Ray cluster, CPU, gloo): ``verltop memory`` reads Ray's object
store (the agent-loop workers keep their last output batch there, a 1 MiB ``ray.put``), and a leak asked of
rank 1 (``DemoHandle.request_leak``, what ``verltop demo --leak`` starts with) appears in ``snapshot --json``
``memory.growth`` with its phase, update_actor, read from a running ``verltop watch`` (``--watch-dir``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.engine.procs import Watch
from tests.faults.helpers import ROOT, clean_env
from tests.wait import wait_until

pytestmark = pytest.mark.ray

MIB = 1 << 20
LEAK_MIB = 48
LEAK_WITHIN_S = 210  # the memory book's rule: 2 warm-up steps, then 4 steps that keep it (~10 s a step)


def verltop(demo, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = clean_env(PYTHONPATH=str(ROOT), **({"RAY_AUTH_TOKEN": demo.token} if demo.token else {}))
    return subprocess.run([sys.executable, "-m", "verltop", "--address", demo.address, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_memory_command_shows_the_store_and_who_holds_what(demo):
    def read() -> dict:
        p = verltop(demo, "memory", "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    doc: dict = {}

    def batches_held() -> bool:
        doc.update(read())
        return any(g["actor_name"] == "agent_loop_worker_0" and g["bytes"] >= MIB for g in doc["objects"]["groups"])

    wait_until(batches_held, 60, "agent_loop_worker_0's batch in the object store", step=2)
    (node,) = doc["nodes"]
    assert node["total_bytes"] and node["used_bytes"] is not None and node["spilled_bytes"] is not None
    o = doc["objects"]
    assert o["call_sites_recorded"] is False and "RAY_record_ref_creation_sites=1" in o["call_sites_note"]
    assert o["truncated"] is None and o["returned_refs"] == o["total_refs"] > 0
    assert o["groups"] == sorted(o["groups"], key=lambda g: -g["bytes"])
    holders = {g["holder"] for g in o["groups"]}
    assert any(h.startswith("agent_loop_worker_") for h in holders), holders
    # the controller holds the worker groups' handles and task outputs: it is named, not a bare pid
    assert any(g["class_name"] == "TaskRunner" and g["actor_id"] for g in o["groups"]), holders
    # a limit below what Ray holds is said, in the JSON and on stderr
    p = verltop(demo, "memory", "--limit", "1")
    assert p.returncode == 0 and "only 1 of " in p.stdout and "verltop: warning: only 1 of" in p.stderr
    assert "call sites are not recorded" in p.stdout


def test_leak_flagged_with_its_phase(demo, tmp_path):
    if demo.hung():
        demo.release_hang()
    watch = Watch(tmp_path / "w", demo.address, env={"RAY_AUTH_TOKEN": demo.token} if demo.token else None)
    demo.request_leak(rank=1, mib=LEAK_MIB, cap_mib=16 * LEAK_MIB)
    t0 = time.monotonic()
    try:
        watch.wait(lambda: "watching" in watch.log(), 60, "the watch to start")
        found: dict = {}

        def flagged() -> bool:
            p = verltop(demo, "snapshot", "--json", "--no-local", "--watch-dir", str(tmp_path / "w"))
            assert p.returncode == 0, p.stderr
            doc = json.loads(p.stdout)
            found["doc"] = doc
            growth = (doc["memory"] or {}).get("growth") or []
            found["growth"] = growth
            return any(g["rank"] == 1 and g["phase"] == "update_actor" and g["kind"] == "host" for g in growth)

        wait_until(flagged, LEAK_WITHIN_S, "rank 1's leak in memory.growth", step=5,
                   detail=lambda: (found.get("growth"), (found.get("doc") or {}).get("memory_note")))
        took = time.monotonic() - t0
        (g,) = [g for g in found["growth"] if g["rank"] == 1]
        print(f"\nleak flagged {took:.0f} s after it began: {g['detail']}")
        assert abs(g["bytes_per_step"] - LEAK_MIB * MIB) <= 0.3 * LEAK_MIB * MIB, g
        assert g["peers_bytes_per_step"] is not None and abs(g["peers_bytes_per_step"]) < 0.3 * LEAK_MIB * MIB
        assert [x for x in found["growth"] if x["rank"] != 1 or x["phase"] != "update_actor"] == []  # no false leak
        assert found["doc"]["memory_note"] is None or "history" not in found["doc"]["memory_note"]
    finally:
        demo.stop_leak()
        if watch.proc.poll() is None:
            os.killpg(watch.proc.pid, signal.SIGTERM)
            watch.proc.wait(30)
