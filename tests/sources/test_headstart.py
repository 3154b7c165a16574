"""`verltop dump`'s head start: py-spy on this machine's Ray workers, started from the first reads before the
engine is imported, taken by the engine instead of a run of its own; never two runs on one pid."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.wait import wait_until
from verltop.sources import headstart, pyspy
from verltop.sources.pyspy import DumpOptions

ROOT = Path(__file__).resolve().parents[2]
WORKER = """import select, sys, time
sys.path.insert(0, {root!r})
from tests.shapes import set_title
set_title("ray::WorkerDict.actor_rollout_generate_sequences")
print("ready", flush=True)
def waiting_in_headstart_test():
    select.select([], [], [], 120)  # blocked in C until the test ends
waiting_in_headstart_test()
"""


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen]]:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER.format(root=str(ROOT))], stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture(autouse=True)
def fresh_module() -> Iterator[None]:
    """The head start is one per process: each test starts from none."""
    def reset() -> None:
        headstart._early.clear()
        headstart._claimed.clear()
        headstart._running.clear()
        headstart._closed[0] = headstart._active[0] = False
        headstart._scan[0] = None

    reset()
    yield
    headstart.discard()
    reset()


def answer(rows: list[dict]) -> Future:
    f: Future = Future()
    f.set_result((200, json.dumps({"result": True, "data": {"result": {"result": rows}}}).encode(), None, None))
    return f


def reads(pids: list[int]) -> tuple[Future, Future]:
    actors = [{"actor_id": f"a{i}", "pid": pid, "state": "ALIVE", "node_id": "n1", "job_id": "01000000",
               "class_name": "create_colocated_worker_cls.<locals>.WorkerDict"} for i, pid in enumerate(pids)]
    actors.append({"actor_id": "other", "pid": 1, "state": "ALIVE", "node_id": "n1", "job_id": "02000000",
                   "class_name": "SomeoneElses"})  # another job's actor here: left alone
    return answer(actors), answer([{"node_id": "n1", "node_ip": "127.0.0.1", "state": "ALIVE"}])


def test_the_engine_takes_the_early_runs(workers):
    exe = pyspy.find_pyspy()
    if exe is None:
        pytest.skip("py-spy not installed")
    pids = [p.pid for p in workers]
    headstart.start(*reads(pids), None, 5.0)
    wait_until(lambda: len(headstart._early) == 2, 10, "both early runs started")

    async def dump(pid: int):
        return await pyspy.dump_local(pid, DumpOptions(), exe)

    got = [asyncio.run(dump(pid)) for pid in pids]
    for d in got:
        assert d.error is None, d.error
        frames = [f.func for t in d.threads for f in t.frames]
        assert "waiting_in_headstart_test" in frames
    # both were early runs (none left to take), and the other job's actor was not dumped
    assert len(headstart._running) == 2 and not headstart._early
    assert headstart.take([exe, *pyspy.dump_args(1)]) is None


def test_a_pid_asked_for_first_is_never_run_twice(workers):
    exe = pyspy.find_pyspy()
    if exe is None:
        pytest.skip("py-spy not installed")
    first, second = (p.pid for p in workers)
    headstart._active[0] = True
    assert headstart.take([exe, *pyspy.dump_args(first)]) is None  # the engine got there first: its own run
    headstart.start(*reads([first, second]), None, 5.0)
    fut = wait_until(lambda: headstart._early.get(tuple([exe, *pyspy.dump_args(second)])), 10, "the early run")
    assert fut.result(10)[0] == 0
    assert tuple([exe, *pyspy.dump_args(first)]) not in headstart._early
    assert [p.args[-1] for p in headstart._running] == [str(second)]
