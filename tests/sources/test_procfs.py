"""The /proc reader on real process trees titled as vLLM's and SGLang's processes title themselves."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.proc_shapes import SHAPES, spawn
from verltop.sources.local import LocalSampler, tree_from_plain
from verltop.sources.procfs import ProcReader, is_engine_comm

pytest.importorskip("setproctitle")


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """A process titled as verl's rollout server actor, with vLLM's engine and two TP workers below it."""
    p, pids = spawn({"title": "ray::vLLMHttpServer", "children": [SHAPES["vllm"]]})
    try:
        yield p, pids
    finally:
        _kill(pids)
        p.wait()


def test_descendants_in_tree_order_with_titles_and_cpu(server):
    _p, (root, engine, tp0, tp1) = server
    r = ProcReader()
    first = r.read([root])
    assert [(x[0], x[1], x[2]) for x in first["procs"]] == [
        (engine, root, "VLLM::EngineCore_DP0"), (tp0, engine, "VLLM::Worker_TP0"), (tp1, engine, "VLLM::Worker_TP1")]
    assert all(x[3] is None for x in first["procs"])  # CPU % needs an interval
    assert all(x[4] and x[4] > 1 << 20 for x in first["procs"])  # RSS, bytes
    created = first["procs"][0][5]
    assert abs(created - time.time()) < 120
    time.sleep(1.0)
    second = r.read([root])
    cpu = {x[0]: x[3] for x in second["procs"]}
    assert all(v is not None and v >= 0 for v in cpu.values()), cpu
    assert cpu[tp0] > 0 or cpu[tp1] > 0, cpu  # the workers burn ~5 % of a core each
    assert first["loose"] == [] or all(x[0] not in (engine, tp0, tp1) for x in first["loose"])


def test_children_started_later_and_gone_ones(server):
    _p, (root, engine, tp0, tp1) = server
    r = ProcReader()
    r.read([root])
    late, late_pids = spawn({"title": "sglang::detokenizer"})  # not below the root
    try:
        os.kill(tp1, signal.SIGKILL)
        time.sleep(0.3)
        got = r.read([root], extra=[late_pids[0]])
        assert [x[0] for x in got["procs"]] == [engine, tp0]  # tp1 is gone (a zombie until its parent reaps)
        # the caller's GPU holder under no root, and an engine title with no Ray worker above: both loose
        assert late_pids[0] in {x[0] for x in got["loose"]}
    finally:
        _kill(late_pids)
        late.wait()


def test_a_killed_server_leaves_its_engine_behind(server):
    p, (root, engine, tp0, tp1) = server
    r = ProcReader()
    r.read([root])
    os.kill(root, signal.SIGKILL)  # as the OOM killer does: no cleanup, the engine is reparented
    time.sleep(0.3)
    zombie = r.read([root])  # the root is a zombie: its parent has not reaped it yet
    assert zombie["procs"] == []
    assert {x[0] for x in zombie["loose"]} >= {engine, tp0, tp1}
    assert {pid: by for pid, by in zombie["left_by"]} == {engine: root, tp0: root, tp1: root}
    p.wait()  # reaped; the actor is no longer a root either
    gone = r.read([])
    left = {x[0]: x for x in gone["loose"]}
    assert left[engine][1] != root and left[engine][2] == "VLLM::EngineCore_DP0"
    assert dict(gone["left_by"])[engine] == root
    # verltop started after the death sees the engine by its title, not whose it was
    fresh = ProcReader().read([])
    assert engine in {x[0] for x in fresh["loose"]} and engine not in dict(fresh["left_by"])
    # the TP workers die with the engine (PR_SET_PDEATHSIG), and nothing is left
    os.kill(engine, signal.SIGKILL)
    time.sleep(0.5)
    after = r.read([])
    assert not {engine, tp0, tp1} & {x[0] for x in after["loose"]}


def test_processes_under_a_live_ray_worker_are_not_orphans():
    p, pids = spawn({"title": "ray::IDLE", "children": [{"title": "VLLM::EngineCore"}]})
    try:
        got = ProcReader().read([], extra=pids)  # not roots (no live actor), but a live Ray worker above
        assert not set(pids) & {x[0] for x in got["loose"]}
    finally:
        _kill(pids)
        p.wait()


def test_engine_comm_names():
    assert is_engine_comm("VLLM::EngineCor") and is_engine_comm("sglang::schedul") and is_engine_comm("MY_X::Worker")
    assert not is_engine_comm("ray::vLLMHttpSe") and not is_engine_comm("python3") and not is_engine_comm("::x")


def test_local_sampler_tree_only_below_ray_workers(server):
    _p, (root, engine, tp0, tp1) = server
    s = LocalSampler(use_nvml=False)
    got = s.sample({root, 1})  # pid 1 is no Ray worker: not a root
    assert got.tree is not None and got.tree.roots == (root,)
    assert [(x.pid, x.ppid, x.title) for x in got.tree.procs] == [
        (engine, root, "VLLM::EngineCore_DP0"), (tp0, engine, "VLLM::Worker_TP0"), (tp1, engine, "VLLM::Worker_TP1")]


def test_reader_runs_where_verltop_is_not_installed(tmp_path):
    """The probe ships ProcReader by value (with every verltop module it uses, as the probe does); it must run in a
    process that cannot import verltop."""
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    import verltop.sources.procfs as procfs
    from verltop.sources.probe_actor import ship_by_value

    ship_by_value(procfs)
    blob = cloudpickle.dumps(procfs.ProcReader)
    (tmp_path / "reader.pkl").write_bytes(blob)
    code = (
        "import sys, pickle\n"
        "sys.modules['verltop'] = None  # any import of verltop fails\n"
        f"cls = pickle.loads(open({str(tmp_path / 'reader.pkl')!r}, 'rb').read())\n"
        "out = cls().read([1])\n"
        "print(len(out['procs']) > 0, type(out['loose']).__name__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "list"]


def test_tree_from_plain_keeps_order_and_roots(server):
    _p, (root, *_rest) = server
    t = tree_from_plain(ProcReader().read([root]), [root], node_id="n2")
    assert t.node_id == "n2" and t.roots == (root,) and next(x.ppid for x in t.procs) == root
