"""blocked_on on real py-spy captures from 2x H200 (NCCL) and Ray 2.60."""

from __future__ import annotations

import pytest

from tests.conftest import load
from verltop.analysis.collectives import blocked_on, task_thread
from verltop.model import Frame, ThreadStack
from verltop.sources.pyspy import parse_json, parse_text

CASES = [
    # file, gpu util of that rank, expected op, expected frame (substring)
    ("ray-gpu-cluster/hung/pyspy_0.json", 100.0, "cuda_sync", "ray_driver.py:69 WorkerDict.actor_rollout_update_actor"),
    ("ray-gpu-cluster/hung/pyspy_1.json", 0.0, None, None),
    ("ray-gpu-cluster/hung/pyspy_TaskRunner.json", None, "ray.get", "ray_driver.py:92 TaskRunner.run"),
    ("nccl-straggler/hung/rank0.pyspy.json", 100.0, "cuda_sync", "nccl_scenario.py:61 worker"),
    ("nccl-straggler/hung/rank1.pyspy.json", 0.0, None, None),
    ("nccl-barrier/hung/rank0.pyspy.json", 100.0, "barrier", "nccl_scenario.py:79 worker"),
    ("nccl-barrier/hung/rank1.pyspy.json", 0.0, None, None),
    ("nccl-mismatch/hung/rank0.pyspy.json", 100.0, "cuda_sync", "nccl_scenario.py"),
    ("nccl-mismatch/hung/rank1.pyspy.json", 100.0, "cuda_sync", "nccl_scenario.py"),
]


@pytest.mark.parametrize(("path", "gpu", "op", "frame"), CASES)
def test_blocked_on_real_json(path, gpu, op, frame):
    threads, err = parse_json(load(path))
    assert err is None and threads
    t = task_thread(threads)
    assert t is not None and t.name == "MainThread"
    b = blocked_on(t, gpu)
    if op is None:
        assert b is None
    else:
        assert b is not None and b.op == op
        assert frame in (b.frame or "")


def test_without_gpu_signal_an_nccl_waiter_is_not_guessed():
    # Python-only stack, no native frames, GPU unknown: do not claim an NCCL wait
    threads, _ = parse_json(load("nccl-straggler/hung/rank0.pyspy.json"))
    assert blocked_on(task_thread(threads), None) is None


@pytest.mark.parametrize(
    ("path", "op", "evidence"),
    [
        ("ray-gpu-cluster/hung/pyspy_0.native.txt", "cuda_sync", "cuLaunchKernel"),
        ("nccl-barrier/hung/rank0.pyspy.native.txt", "barrier", "c10d::ProcessGroupNCCL::barrier"),
        ("nccl-straggler/hung/rank0.pyspy.native.txt", "cuda_sync", "cuLaunchKernel"),
    ],
)
def test_native_evidence_without_gpu_numbers(path, op, evidence):
    threads, err = parse_text(load(path))
    assert err is None
    b = blocked_on(task_thread(threads), None)
    assert b is not None and b.op == op and b.gpu_wait
    assert evidence in b.evidence


def test_dashboard_traceback_text_equals_pyspy_text():
    a, _ = parse_text(load("ray-gpu-cluster/hung/worker_traceback_0_native0.txt"))
    b, _ = parse_text(load("ray-gpu-cluster/hung/pyspy_0.txt"))
    assert [t.frames for t in a] == [t.frames for t in b]


def test_gloo_collective_and_wrapper_frames():
    frames = (
        Frame("all_reduce", "/x/torch/distributed/distributed_c10d.py", 2800),
        Frame("_exception_logger.<locals>.wrapper", "/x/torch/distributed/c10d_logger.py", 83),
        Frame("ActorWorker.update_actor", "/app/verltop/demo/workers.py", 120),
        Frame("func", "/x/verl/single_controller/base/decorator.py", 400),
    )
    b = blocked_on(ThreadStack(1, "MainThread", True, False, frames))
    assert b.op == "all_reduce" and b.frame == "workers.py:120 ActorWorker.update_actor"


def test_parsers_reject_garbage_without_raising():
    assert parse_json("not json")[1]
    assert parse_json("{}")[1]
    assert parse_text("Error: Permission denied (os error 13)")[1]
