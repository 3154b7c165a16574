"""The CLI as a user runs it: real processes against a real (replayed) dashboard."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest

from tests.faults.helpers import clean_env
from tests.net import free_port
from tests.replay_server import ReplayDashboard

ACTOR_KEYS = {"actor_id", "actor_name", "class_name", "pid", "node_ip", "state", "worker_group", "rank",
              "world_size", "role", "roles", "task", "task_running_s", "gpu_index", "gpu_util_percent",
              "gpu_mem_bytes", "cpu_percent", "rss_bytes", "stalled", "stall_reason", "stalls", "processes", "num_restarts",
              "gpu_power_w", "gpu_mem_peak_bytes", "rss_peak_bytes", "gpu_mem_growth_bytes_per_min",
              "rss_growth_bytes_per_min"}
NODE_KEYS = {"node_id", "ip", "hostname", "cpu_percent", "mem_used_bytes", "mem_total_bytes", "gpus",
             "object_store_used_bytes", "object_store_total_bytes", "object_store_spilled_bytes"}


def run(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "verltop", *args], capture_output=True, text=True,
                          env=clean_env(**(env or {})),
                          timeout=timeout)


def test_snapshot_json_contract(replay):
    p = run("--address", replay.url, "snapshot", "--json", "--no-local")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) == {"taken_at", "source", "nodes", "actors", "phase", "orphans", "pending", "steps", "training",
                        "slow_ranks", "rollout", "memory", "memory_note"}
    assert doc["orphans"] is None  # --no-local and no probe: no node's processes were read
    assert set(doc["source"]) == {"address", "age_s", "errors"}
    assert doc["pending"] == [] and doc["source"]["errors"] == []
    assert all(set(n) == NODE_KEYS for n in doc["nodes"])
    # the capture's one step: the first update_actor, hung (running), nothing finished before it
    tasks = json.loads((replay.dir / "api_v0_tasks.json").read_text())["data"]["result"]["result"]
    update_start = min(t["start_time_ms"] for t in tasks if t["name"].endswith("_update_actor")) / 1000
    [step] = doc["steps"]
    assert step["index"] == 1 and step["duration_s"] is None
    assert step["started_at"] == pytest.approx(update_start, abs=0.01)
    assert {k for k, v in step["phases"].items() if v is not None} == {"update_actor"}
    assert step["phases"]["update_actor"] == pytest.approx(doc["taken_at"] - update_start, abs=5)
    assert doc["phase"] == "update_actor"
    for a in doc["actors"]:
        assert set(a) == ACTOR_KEYS
        assert a["processes"] is None
    wd = sorted((a for a in doc["actors"] if a["worker_group"]), key=lambda a: a["rank"])
    assert [(a["worker_group"], a["rank"], a["role"]) for a in wd] == [("abcd", 0, "actor_rollout"),
                                                                        ("abcd", 1, "actor_rollout")]
    assert [a["gpu_index"] for a in wd] == [0, 1]
    ctl = [a for a in doc["actors"] if a["role"] == "controller"]
    assert len(ctl) == 1 and ctl[0]["stalled"] is False
    assert {g["index"] for g in doc["nodes"][0]["gpus"]} == {0, 1}


def test_snapshot_stall_after_applies(replay):
    doc = json.loads(run("--address", replay.url, "snapshot", "--json", "--no-local", "--stall-after", "999999999").stdout)
    assert not any(a["stalled"] for a in doc["actors"])
    doc = json.loads(run("--address", replay.url, "snapshot", "--json", "--no-local", "--stall-after", "60").stdout)
    assert all(a["stalled"] for a in doc["actors"] if a["worker_group"])


def test_address_from_env_and_text_output(replay):
    p = run("snapshot", "--no-local", env={"RAY_DASHBOARD_ADDRESS": replay.url})
    assert p.returncode == 0 and "actor_rollout" in p.stdout and "GROUP" in p.stdout
    assert p.stdout.splitlines()[1] == "step 1"  # the running step, under the header


def test_dashboard_down_is_one_line():
    p = run("--address", f"http://127.0.0.1:{free_port()}", "snapshot")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "not reachable" in p.stderr and "Traceback" not in p.stderr


def test_wrong_token_is_one_line_and_never_printed():
    with ReplayDashboard(token="right-token") as d:
        p = run("--address", d.url, "snapshot", env={"RAY_AUTH_TOKEN": "wrong-token-123"})
        assert p.returncode == 2 and "403" in p.stderr and "RAY_AUTH_TOKEN" in p.stderr
        assert "wrong-token-123" not in p.stderr + p.stdout
        p = run("--address", d.url, "snapshot", "--no-local", env={"RAY_AUTH_TOKEN": "right-token"})
        assert p.returncode == 0


def test_token_file(tmp_path):
    tok = tmp_path / "tok"
    tok.write_text("file-token\n")
    with ReplayDashboard(token="file-token") as d:
        p = run("--address", d.url, "snapshot", "--no-local", env={"RAY_AUTH_TOKEN_PATH": str(tok)})
        assert p.returncode == 0, p.stderr


def test_dump_bad_flags():
    p = run("dump", "--native", "--nonblocking")
    assert p.returncode == 2 and "--native" in p.stderr and "Traceback" not in p.stderr


def test_dump_output_never_overwrites(tmp_path, replay):
    out = tmp_path / "d.json"
    out.write_text("keep")
    p = run("--address", replay.url, "dump", "--output", str(out))
    assert p.returncode == 2 and "exists" in p.stderr and out.read_text() == "keep"


def test_dump_remote_ranks_with_profiling_off_report_errors(replay, tmp_path):
    # the replayed cluster's pids are not on this machine and its dashboard forbids profiling: every rank
    # is listed with its error, the command exits non-zero with one line
    out = tmp_path / "dump.json"
    p = run("--address", replay.url, "dump", "--json", "--via", "dashboard", "--samples", "1", "-o", str(out))
    assert p.returncode == 1 and "no rank could be dumped" in p.stderr
    doc = json.loads(p.stdout)
    assert len(doc["ranks"]) == 3 and all(r["error"] for r in doc["ranks"])
    assert "RAY_DASHBOARD_ENABLE_PROFILING" in doc["ranks"][0]["error"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_doctor_dashboard_down_is_one_line_exit_2():
    p = run("--address", f"http://127.0.0.1:{free_port()}", "doctor", "--json")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "cannot list the cluster's nodes" in p.stderr and "not reachable" in p.stderr
    assert "Traceback" not in p.stderr


def test_doctor_help_names_its_options():
    p = run("doctor", "--help")
    assert p.returncode == 0 and "--path SHARED_DIR" in p.stdout and "--node-timeout" in p.stdout


@pytest.mark.parametrize("n", ["0", "-3"])
def test_dump_samples_below_one_refused(n):
    p = run("dump", "--samples", n)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert p.stderr.splitlines()[-1] == "verltop dump: error: argument --samples: must be ≥ 1"


def test_unresolvable_address_is_named():
    p = run("--address", "notaurl.invalid", "snapshot", "--no-local")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert "dashboard not reachable at http://notaurl.invalid: no such host" in p.stderr


def test_memory_without_a_dashboard_is_one_line():
    p = run("memory", "--address", "http://127.0.0.1:9", "--timeout", "2")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "verltop: error: dashboard not reachable at http://127.0.0.1:9: connection refused; is Ray running? use "
        "--address or RAY_DASHBOARD_ADDRESS"]


def test_main_returns_in_a_process_that_is_a_ray_driver_of_its_own(replay, capsys, monkeypatch):
    """``main`` is called in-process by scripts and tests; one that drives a Ray job of its own (as a test
    beside the demo does) must get its return code back, not have its process ended under it (only the
    ``verltop`` command's own process ends at once)."""
    import types

    from verltop.cli import main

    ray = types.ModuleType("ray")
    ray.is_initialized = lambda: True  # the process joined a cluster before verltop ran
    monkeypatch.setitem(sys.modules, "ray", ray)
    for argv in (["snapshot", "--json", "--no-local"], ["dump", "--json", "--no-local", "--samples", "1"]):
        rc = main(["--address", replay.url, *argv])
        out = capsys.readouterr().out
        assert rc in (0, 1) and json.loads(out), (argv, rc)
