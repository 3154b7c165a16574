"""Process faults with real processes: a reused pid, a zombie, py-spy refused by the kernel (EPERM, for
real: py-spy run as ``nobody`` against a root process), py-spy hung with children, py-spy missing on a
remote node, NVML missing (for real) or failing (a fake pynvml: the one fault here that cannot be caused),
and a cluster of more than 10,000 actors. Each: the rank says what is wrong, the rest is reported.

(Faults that need a real Ray cluster: an actor dying mid-dump, a node leaving, a probe that cannot be
scheduled, running without ptrace: tests/faults/test_live_cluster.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from aiohttp import web

from tests.analysis.helpers import row
from tests.fakeray import FakeDashboard
from tests.faults.helpers import FakeDashboardProcess, screen_text, verltop
from tests.wait import pilot_wait, proc_state, wait_until
from verltop.sources.local import LocalSampler, is_actor_process
from verltop.sources.pyspy import DumpOptions, no_pyspy_problem, ptrace_problem
from verltop.sources.stacks import StackCapture

PYSPY = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
SPIN = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


def spawn(title: str | None = None) -> subprocess.Popen:
    """A Python process, returned once its interpreter runs (py-spy finds no interpreter in one still
    starting); with ``title``, its argv[0] (what /proc/PID/cmdline shows first) is ``title``, as Ray sets
    ``ray::WorkerDict.method`` on its workers."""
    p = subprocess.Popen([title or sys.executable, "-c", SPIN], executable=sys.executable, stdout=subprocess.PIPE)
    assert p.stdout is not None
    wait_until(lambda: select.select([p.stdout], [], [], 0)[0], 30, f"process {p.pid} to start")
    assert p.stdout.readline() == b"ready\n"
    return p


@pytest.fixture
def procs():
    ps: list[subprocess.Popen] = []
    yield ps
    for p in ps:
        if p.poll() is None:
            p.kill()
        p.wait()


def local_row(actor_id: str, rank: int, pid: int):
    from dataclasses import replace

    return replace(row(actor_id, "wg", rank, pid=pid), node_id="local-node", class_name="WorkerDict")


def capture(rows, **opts) -> dict:
    cap = StackCapture(None, frozenset({"local-node"}), DumpOptions(**opts))
    return asyncio.run(cap.capture(rows))


# ---------------------------------------------------------------------------------------------- pids


def test_reused_pid_and_zombie_are_never_dumped(procs, tmp_path):
    """On this machine, a rank's pid that now belongs to another program (reuse) is refused with the
    reason, and py-spy never runs on that program; a killed, unreaped rank is "exited"; the real Ray-titled
    rank next to them is dumped."""
    worker = spawn("ray::WorkerDict.actor_rollout_update_actor")
    stranger = subprocess.Popen(["sleep", "60"])
    zombie = spawn("ray::WorkerDict.actor_rollout_update_actor")
    procs += [worker, stranger, zombie]
    zombie.send_signal(signal.SIGKILL)
    wait_until(lambda: proc_state(zombie.pid) == "Z", 30, "the killed rank to be a zombie")  # /proc/PID still there
    assert is_actor_process(worker.pid, "create_colocated_worker_cls.<locals>.WorkerDict")
    assert not is_actor_process(stranger.pid, "WorkerDict") and not is_actor_process(zombie.pid, "WorkerDict")

    log = tmp_path / "pyspy.log"
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {PYSPY} "$@"\n')
    wrapper.chmod(0o755)
    rows = [local_row("w", 0, worker.pid), local_row("s", 1, stranger.pid), local_row("z", 2, zombie.pid)]
    cap = StackCapture(None, frozenset({"local-node"}), DumpOptions(samples=1))
    cap.pyspy = str(wrapper)
    got = asyncio.run(cap.capture(rows))
    assert got["w"][0].error is None and got["w"][0].threads
    assert got["s"][0].error.text == f"pid {stranger.pid} is no longer this actor's process (it exited and the pid was reused)"
    assert got["z"][0].error.text == "process exited before it could be dumped"
    ran_on = log.read_text()
    assert str(worker.pid) in ran_on and str(stranger.pid) not in ran_on and str(zombie.pid) not in ran_on

    # the sampler, too, reports only the Ray worker: the other programs' CPU and memory are not a rank's
    s = LocalSampler(use_nvml=False)
    s.sample_procs({worker.pid, stranger.pid, zombie.pid})
    assert set(s.sample_procs({worker.pid, stranger.pid, zombie.pid})) == {worker.pid}


# ---------------------------------------------------------------------------------------------- py-spy


def _can_drop_privileges() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.mark.skipif(not _can_drop_privileges(), reason="needs root and setpriv to run py-spy as nobody")
def test_pyspy_not_permitted_for_real(procs, tmp_path):
    """py-spy run as ``nobody`` against a root process: the kernel refuses ptrace (EPERM), py-spy prints its
    own error, and the rank says how to fix it; another rank in the same dump is still read."""
    victim = spawn("ray::WorkerDict.actor_rollout_update_actor")
    ok = spawn("ray::WorkerDict.actor_rollout_update_actor")
    procs += [victim, ok]
    raw = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PYSPY, "dump", "--pid",
                          str(victim.pid)], capture_output=True, text=True)
    assert raw.returncode != 0 and "ermission" in raw.stderr + raw.stdout  # the real refusal, as py-spy says it
    unpriv = tmp_path / "py-spy"
    unpriv.write_text(f'#!/bin/sh\ncase "$*" in *{victim.pid}*) exec setpriv --reuid=65534 --regid=65534 '
                      f'--clear-groups {PYSPY} "$@";; esac\nexec {PYSPY} "$@"\n')
    unpriv.chmod(0o755)
    cap = StackCapture(None, frozenset({"local-node"}), DumpOptions(samples=1))
    cap.pyspy = str(unpriv)
    got = asyncio.run(cap.capture([local_row("v", 0, victim.pid), local_row("ok", 1, ok.pid)]))
    assert got["v"][0].error == ptrace_problem()
    assert "CAP_SYS_PTRACE" in ptrace_problem().text and "ptrace_scope" in ptrace_problem().text
    assert got["ok"][0].error is None and got["ok"][0].threads


def test_hung_pyspy_is_killed_with_its_children(procs, tmp_path):
    """A py-spy that hangs (and started a child of its own) is killed at the timeout, children too: no
    process is left behind, and the other rank's dump is not held up."""
    target = spawn("ray::WorkerDict.actor_rollout_update_actor")
    other = spawn("ray::WorkerDict.actor_rollout_update_actor")
    procs += [target, other]
    kid = tmp_path / "kid.pid"
    hung = tmp_path / "py-spy"
    hung.write_text(f'#!/bin/sh\ncase "$*" in *{target.pid}*) sleep 300 & echo $! > {kid}; wait;; esac\n'
                    f'exec {PYSPY} "$@"\n')
    hung.chmod(0o755)
    cap = StackCapture(None, frozenset({"local-node"}), DumpOptions(samples=1, timeout_s=1.0))
    cap.pyspy = str(hung)
    t0 = time.monotonic()
    got = asyncio.run(cap.capture([local_row("t", 0, target.pid), local_row("o", 1, other.pid)]))
    assert time.monotonic() - t0 < 5
    assert got["t"][0].error.text == "py-spy did not finish within 1 s (killed)"
    assert got["o"][0].error is None and got["o"][0].threads
    grandchild = int(kid.read_text())
    wait_until(lambda: proc_state(grandchild) in (None, "Z"), 10, "py-spy's child to be killed",
               detail=lambda: proc_state(grandchild))  # gone (or dead, unreaped)


def test_pyspy_missing_or_refused_on_another_node(replay):
    """A remote rank dumped through the dashboard: "py-spy is not installed" and a ptrace refusal on that
    node come back as the same fixes as locally, naming the node."""
    answers = iter([
        web.Response(status=500, text="Failed to execute: py-spy is not installed"),
        web.Response(status=500, text="Failed to execute `py-spy dump`: Permission Denied: Try running again "
                                      "with elevated permissions"),
    ])
    replay.hooks["/worker/traceback"] = lambda req: next(answers)
    from verltop.sources.config import Endpoint
    from verltop.sources.http import DashboardClient

    async def go():
        client = DashboardClient(Endpoint(replay.url, "--address", None, None))
        cap = StackCapture(client, frozenset(), DumpOptions(samples=1, via="dashboard"))
        from dataclasses import replace

        rows = [replace(row("a", "wg", 0, pid=11), node_id="ab" * 28), replace(row("b", "wg", 1, pid=12),
                                                                              node_id="ab" * 28)]
        out = [await cap.one(r) for r in rows]
        await client.close()
        return out

    missing, refused = asyncio.run(go())
    assert missing.error == no_pyspy_problem(" (on that node)")
    assert refused.error == ptrace_problem(" (on that node)")


# ---------------------------------------------------------------------------------------------- NVML


def test_nvml_missing_for_real():
    """This machine has no NVIDIA driver: the sampler says so in one line and reports processes anyway."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - the point: no driver here
        pass
    s = LocalSampler()
    sample = s.sample({os.getpid()})
    assert sample.gpus is None and sample.gpu_error and sample.gpu_error.startswith("no NVML")
    assert "\n" not in sample.gpu_error
    s.close()


def _fake_nvml(fail_count: bool = False, lost_gpu: int | None = None, init_error: str | None = None):
    class NVMLError(Exception):
        pass

    class Mem:
        used, total = 10 << 30, 80 << 30

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    state = {"fail_count": fail_count}

    def init():
        if init_error:
            raise NVMLError(init_error)

    def count():
        if state["fail_count"]:
            raise NVMLError("Unknown Error")
        return 2

    def handle(i):
        if i == lost_gpu:
            raise NVMLError("GPU is lost")
        return i

    m.nvmlInit, m.nvmlShutdown, m.nvmlDeviceGetCount = init, lambda: None, count
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetMemoryInfo = lambda h: Mem()
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=55)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: []
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    m.nvmlDeviceGetProcessUtilization = lambda h, ts: []
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    return m, state


def test_nvml_failing(monkeypatch):
    """NVML that cannot start, that loses one GPU, or that fails mid-run: never an exception, always one
    line, and the GPUs that still answer are reported."""
    m, _ = _fake_nvml(init_error="Driver Not Loaded")
    monkeypatch.setitem(sys.modules, "pynvml", m)
    gpus, err = LocalSampler().sample_gpus()
    assert gpus is None and err == "no NVML: Driver Not Loaded"

    m, state = _fake_nvml(lost_gpu=1)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    s = LocalSampler()
    gpus, err = s.sample_gpus()
    assert err is None and [g.index for g in gpus] == [0, 1]
    assert gpus[0].util_percent == 55 and gpus[1].name == "error: GPU is lost" and gpus[1].util_percent is None
    state["fail_count"] = True
    gpus, err = s.sample_gpus()
    assert gpus is None and err == "NVML failed: Unknown Error"

    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed at all
    gpus, err = LocalSampler().sample_gpus()
    assert gpus is None and err == "no NVML (nvidia-ml-py not installed)"


async def test_tui_runs_with_nvml_failing(monkeypatch):
    """The TUI with local sampling on and an NVML that fails on every call after start: the table, the
    header and the keys carry on; the header says why local GPUs are not read."""
    from verltop.engine.monitor import Intervals
    from verltop.sources.config import Endpoint
    from verltop.ui.app import VerltopApp

    m, _ = _fake_nvml(fail_count=True)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    async with FakeDashboard(nodes=1, gpus_per_node=2) as fd:
        iv = Intervals(actors_s=0.3, tasks_s=0.3, nodes_s=0.3, node_detail_s=0.3, local_s=0.2, timeout_s=2.0)
        app = VerltopApp.live(Endpoint(fd.url, "--address", None, None), iv, use_local=True)
        async with app.run_test(size=(180, 40)) as pilot:
            await pilot_wait(pilot, lambda: app.snapshot is not None and app.snapshot.actors, 10, what="rows")
            await pilot_wait(pilot, lambda: app.engine.src.local.value is not None, 5, what="a local sample")
            assert app.engine.src.local.error is None  # NVML failing is not a failed local source
            assert app.engine.src.local.value.gpu_error == "NVML failed: Unknown Error"
            assert app.snapshot.gpu_note == "NVML failed: Unknown Error"
            assert sum(len(n.gpus) for n in app.snapshot.nodes) == 2  # the dashboard's GPUs still shown
            await pilot.press("s", "g", "g", "g")
            assert "GPUs 2" in screen_text(app)
            await pilot.press("q")


# ---------------------------------------------------------------------------------------------- scale


@pytest.fixture(scope="module")
def ten_thousand():
    with FakeDashboardProcess("--nodes", "2", "--gpus", "8", "--extra-actors", "10050") as d:
        yield d


def test_snapshot_with_more_than_10000_actors(ten_thousand):
    """Ray returns at most 10,000 rows: the snapshot works and says it was cut, in one line (on stderr
    for --json, whose contract has no field for it)."""
    p = verltop("--address", ten_thousand.url, "snapshot", "--json", "--no-local", timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert len(doc["actors"]) == 10_000
    assert sum(1 for a in doc["actors"] if a["worker_group"]) == 16
    assert p.stderr == "verltop: warning: actors: Ray returned 10077 rows but only the first 10000 (its limit)\n"


async def test_tui_with_more_than_10000_actors(ten_thousand):
    from verltop.engine.monitor import Intervals
    from verltop.sources.config import Endpoint
    from verltop.ui.app import VerltopApp
    from verltop.ui.widgets.actor_table import ActorTable

    app = VerltopApp.live(Endpoint(ten_thousand.url, "--address", None, None), Intervals(timeout_s=20.0),
                     use_local=False)
    async with app.run_test(size=(180, 40)) as pilot:
        t = app.screen.query_one(ActorTable)
        await pilot_wait(pilot, lambda: t.row_count > 10_000, 60, what="10,000 rows")
        header = app.screen.query_one("#header")
        await pilot_wait(pilot, lambda: "only the first 10000" in header.text.plain, 10, what="the truncation")
        await pilot.press("j", "j", "j", "s", "slash")
        await pilot_wait(pilot, lambda: app.focused is not None and app.focused.id == "filter", 10, what="the filter")
        for ch in "ref":
            await pilot.press(ch)
        await pilot.press("enter")
        # laid out at once on the UI loop; a loaded 2-core machine may take seconds over 10,000 actors
        shown = lambda: (t.row_count, app.screen.filter_rx, app.snapshots_shown)  # noqa: E731
        await pilot_wait(pilot, lambda: 0 < t.row_count < 100, 30, what="the filtered rows", detail=shown)
        await pilot.press("escape")
        await pilot_wait(pilot, lambda: t.row_count > 10_000, 30, what="all rows back", detail=shown)
        await pilot.press("q")


def test_nonblocking_is_passed_to_pyspy(procs, tmp_path):
    """``--nonblocking`` reaches py-spy (the target is never paused); the default pauses it briefly."""
    target = spawn("ray::WorkerDict.actor_rollout_update_actor")
    procs.append(target)
    log = tmp_path / "args.log"
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {PYSPY} "$@"\n')
    wrapper.chmod(0o755)
    for nonblocking in (True, False):
        cap = StackCapture(None, frozenset({"local-node"}), DumpOptions(samples=1, nonblocking=nonblocking))
        cap.pyspy = str(wrapper)
        got = asyncio.run(cap.capture([local_row("t", 0, target.pid)]))
        assert got["t"][0].error is None and got["t"][0].threads
    first, second = log.read_text().splitlines()
    assert "--nonblocking" in first.split() and "--nonblocking" not in second.split()
