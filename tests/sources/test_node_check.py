"""What the doctor's probe reads on a node: the environment allow-list (a planted secret never leaves the
probe), the Ray workers found under a (real, renamed) raylet process, versions, disks, the shared-directory
files, and that the functions run where verltop cannot be imported (they are shipped by value)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from verltop.sources import node_check
from verltop.sources.node_check import env_allowed, filter_environ

SECRET = "sk-planted-node-check-3b9f1e7a2c"


def test_allow_list():
    for name in ("NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_FR_BUFFER_SIZE",
                 "GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES"):
        assert env_allowed(name), name
    for name in ("WANDB_API_KEY", "HF_TOKEN", "RAY_AUTH_TOKEN", "PATH", "XNCCL_DEBUG", "nccl_debug", "CUDA_HOME",
                 "TORCH_DISTRIBUTED_DEBUG", "GLOO_SOCKET_IFNAME_X"):
        assert not env_allowed(name), name


def test_filter_environ_drops_everything_else():
    blob = b"\0".join([b"WANDB_API_KEY=" + SECRET.encode(), b"NCCL_DEBUG=INFO", b"NCCL_IB_HCA==mlx5_0,mlx5_1",
                       b"HF_TOKEN=hf_x", b"\xff\xfe=" + SECRET.encode(), b"no_equals_sign", b"",
                       b"GLOO_SOCKET_IFNAME=eth0", b"TORCH_NCCL_X=" + "é".encode()])
    got = filter_environ(blob)
    assert got == {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "GLOO_SOCKET_IFNAME": "eth0",
                   "TORCH_NCCL_X": "é"}
    assert SECRET not in json.dumps(got)


FAKE_RAYLET = textwrap.dedent("""
    import ctypes, json, os, subprocess, sys, time
    ctypes.CDLL(None).prctl(15, b"raylet", 0, 0, 0)  # PR_SET_NAME: /proc/PID/stat now says (raylet)
    secret = os.environ["WANDB_API_KEY"]
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "WANDB_API_KEY": secret}
    sleeper = [sys.executable, "-c", "import select; select.select([], [], [], 60)"]

    def start(title, **env):
        return subprocess.Popen([title, *sleeper[1:]], executable=sys.executable, env={**base, **env})

    kids = [start("ray::Job", NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1", CUDA_VISIBLE_DEVICES="3",
                  HF_TOKEN=secret),
            start("ray::Job.step", NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1"),
            start("ray::IDLE", NCCL_SOCKET_IFNAME="eth9"),
            start("ray::DashboardAgent", NCCL_SOCKET_IFNAME="eth8"),
            start("ray::VerltopProbe", NCCL_SOCKET_IFNAME="eth7")]
    time.sleep(1.0)  # the children have exec'd
    probe = subprocess.run(["ray::VerltopProbe.call", "-c",
                            "import json; from verltop.sources.node_check import worker_env; print(json.dumps(worker_env()))"],
                           executable=sys.executable, env={**base, "NCCL_SOCKET_IFNAME": "eth6"},
                           capture_output=True, text=True)
    for k in kids:
        k.kill()
    print(probe.stdout, probe.stderr, file=sys.stdout)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_worker_env_reads_the_raylets_job_workers_only(tmp_path):
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.getcwd(), "WANDB_API_KEY": SECRET,
           "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}
    p = subprocess.run([sys.executable, "-c", FAKE_RAYLET], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[0])
    assert got["found_raylet"] is True and got["unreadable"] == 0
    assert got["raylet"] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}
    # two job workers; the idle worker, the agent, other probes and this probe itself are left out
    assert sorted(got["workers"], key=len) == [{"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"},
                                               {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1",
                                                "CUDA_VISIBLE_DEVICES": "3"}]
    assert SECRET not in p.stdout and "WANDB" not in p.stdout and "HF_TOKEN" not in p.stdout


def test_worker_env_outside_a_raylet_reads_only_its_own_allow_listed_names(monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    got = node_check.worker_env()
    if got["found_raylet"]:
        pytest.skip("this test runs under a process named raylet")
    assert got["raylet"]["NCCL_ALGO"] == "Ring" and SECRET not in json.dumps(got)


def test_collect_on_this_machine():
    f = node_check.collect("/tmp/verltop-no-such-session")
    v = f["versions"]
    assert v["python"] == sys.version.split()[0]
    for pkg in ("ray", "torch", "verl", "transformers"):
        if importlib.util.find_spec(pkg.replace("-", "_")) is not None:
            assert v[pkg] not in (None, "absent"), pkg
    assert v["vllm"] in ("absent",) or v["vllm"][0].isdigit()
    if v["torch"] != "absent":
        import torch

        assert v["torch.cuda"] == (torch.version.cuda or "none")
    assert "lo" in f["interfaces"]
    assert f["disk_tmp"]["free_bytes"] > 0 and f["disk_tmp"]["total_bytes"] >= f["disk_tmp"]["free_bytes"]
    assert f["disk_logs"]["path"] == "/tmp/verltop-no-such-session/logs"  # measured on its nearest parent
    assert "error" in f["gpus"] or "driver" in f["gpus"]
    assert isinstance(f["time"], float) and f["hostname"]


def test_shared_directory_markers(tmp_path):
    assert node_check.write_marker(str(tmp_path), "m1", "hello") == {"ok": True, "error": None}
    assert (tmp_path / "m1").stat().st_mode & 0o777 == 0o600
    again = node_check.write_marker(str(tmp_path), "m1", "hello")  # never over an existing file
    assert again["ok"] is False and "exists" in again["error"]
    assert node_check.read_markers(str(tmp_path), {"m1": "hello", "m2": "x"}) == \
        {"seen": {"m1": "ok", "m2": "No such file or directory"}}
    assert node_check.read_markers(str(tmp_path), {"m1": "other"}) == {"seen": {"m1": "different content"}}
    assert node_check.remove_marker(str(tmp_path), "m1") == {"ok": True}
    assert not (tmp_path / "m1").exists()
    assert node_check.write_marker(str(tmp_path / "nope"), "m", "x") == {"ok": False, "error": "does not exist"}
    os.chmod(tmp_path, 0o500)
    try:
        r = node_check.write_marker(str(tmp_path), "m", "x")
        if os.geteuid() != 0:  # root writes anyway
            assert r == {"ok": False, "error": "Permission denied"}
    finally:
        os.chmod(tmp_path, 0o700)


def test_a_step_that_hangs_is_cut_off():
    import time

    t0 = time.monotonic()
    assert node_check._timed(time.sleep, 5, timeout_s=0.2) == {"error": "did not answer within 0.2 s"}
    assert time.monotonic() - t0 < 2
    assert node_check._timed(lambda: 1 / 0)["error"].startswith("ZeroDivisionError")


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray's cloudpickle")
def test_probe_functions_run_where_verltop_cannot_be_imported(tmp_path):
    from ray import cloudpickle

    from verltop.sources.probe_actor import ship_by_value

    ship_by_value(node_check.collect)
    blob = tmp_path / "fn.pkl"
    blob.write_bytes(cloudpickle.dumps((node_check.collect, node_check.write_marker, node_check.now)))
    code = textwrap.dedent(f"""
        import json, pickle, sys
        sys.modules["verltop"] = None  # `import verltop` now fails
        collect, write_marker, now = pickle.loads(open({str(blob)!r}, "rb").read())
        f = collect(None)
        assert write_marker({str(tmp_path)!r}, "m", "x")["ok"]
        print(json.dumps({{"python": f["versions"]["python"], "iface": sorted(f["interfaces"]),
                           "mods": sorted(m for m in sys.modules if m.startswith("verltop") and sys.modules[m])}}))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout)
    assert got["python"] == sys.version.split()[0] and "lo" in got["iface"] and got["mods"] == []


class _NVMLError(Exception):
    pass


def fake_pynvml(ecc: list[int | None], remap: list[tuple | None]) -> Any:
    """NVML as the H200s answered (driver 580.159.04, CUDA 13.0, pages retirement not supported): ECC errors
    and remapped rows cannot be caused on purpose, so their answers are given here."""
    import types

    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000
    m.nvmlDeviceGetCount = lambda: len(ecc)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(free=150109880320, total=150754820096)

    def ecc_of(h: int, kind: int, counter: int) -> int:
        if ecc[h] is None:
            raise _NVMLError("Not Supported")
        return ecc[h]

    def remap_of(h: int) -> tuple:
        if remap[h] is None:
            raise _NVMLError("Not Supported")
        return remap[h]

    def retired(h: int) -> int:
        raise _NVMLError("Not Supported")

    m.nvmlDeviceGetTotalEccErrors = ecc_of
    m.nvmlDeviceGetRemappedRows = remap_of
    m.nvmlDeviceGetRetiredPagesPendingStatus = retired
    return m


def test_gpus_as_nvml_reports_them(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([0, 2, None], [(0, 0, 0, 0), (0, 1, 1, 0), None]))
    g = node_check.gpus()
    assert g["driver"] == "580.159.04" and g["cuda"] == "13.0" and len(g["gpus"]) == 3
    a, b, c = g["gpus"]
    assert a == {"index": 0, "name": "NVIDIA H200", "mem_free_bytes": 150109880320, "mem_total_bytes": 150754820096,
                 "ecc_uncorrected": 0, "remap_pending": False, "remap_failed": False, "retired_pending": None}
    assert b["ecc_uncorrected"] == 2 and b["remap_pending"] is True and b["remap_failed"] is False
    assert c["ecc_uncorrected"] is None and c["remap_pending"] is None and c["retired_pending"] is None


def test_gpus_without_nvml(monkeypatch):
    m = fake_pynvml([0], [None])

    def init() -> None:
        raise _NVMLError("Driver Not Loaded")

    m.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", m)
    assert node_check.gpus() == {"error": "no NVML (Driver Not Loaded)"}


def test_collect_reports_a_part_that_hangs_and_returns_the_rest(monkeypatch):
    import threading
    import time

    monkeypatch.setattr(node_check, "gpus", lambda: threading.Event().wait(30))  # NVML on a GPU that fell off the bus
    t0 = time.monotonic()
    f = node_check.collect(None, budget_s=1.0)
    assert time.monotonic() - t0 < 5
    assert f["gpus"] == {"error": "did not answer within 1 s"}
    assert f["versions"]["python"] == sys.version.split()[0] and "lo" in f["interfaces"]
    assert f["disk_logs"] == {"error": "Ray's session directory is unknown"}
