"""Dumps of child processes, on real process trees shaped like verl's rollout servers (``tests/shapes``):
a vLLM-shaped server whose engine core waits on two TP workers in gloo, one of which hangs in
``_load_weights``; an SGLang-shaped server whose TP0 scheduler hangs while TP1 waits in ``broadcast_pyobj``;
a reward scorer whose sandbox child never returns. No Ray: the servers are plain processes titled like their
Ray workers, so the whole local path (children from /proc, py-spy per child, titles, chains, suspects) runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import psutil
import pytest

from tests.analysis.helpers import row
from tests.net import free_port
from tests.shapes import spawn
from tests.wait import wait_until
from verltop.analysis.dump import analyse
from verltop.sources.pyspy import DumpOptions, find_pyspy
from verltop.sources.stacks import StackCapture, Target
from verltop.text.chains import end_text
from verltop.text.contract import dump_json

pytestmark = pytest.mark.skipif(find_pyspy() is None, reason="py-spy not installed")


def _kill_tree(p) -> None:
    with contextlib.suppress(psutil.Error):
        procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        for q in procs:
            with contextlib.suppress(psutil.Error):
                q.kill()
    p.wait()


def _wait_titles(pid: int, titles: set[str], timeout: float = 60) -> dict[str, int]:
    def children() -> dict[str, int]:
        got = {}
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    got[c.cmdline()[0] if c.cmdline() else ""] = c.pid
        return got

    return wait_until(lambda: titles <= set(got := children()) and got, timeout, f"children titled {sorted(titles)}",
                      step=0.2, detail=lambda: sorted(children()))


def _server_row(aid: str, pid: int, cls: str, name: str):
    from dataclasses import replace

    return replace(row(aid, None, None, "rollout_server", task=f"{cls}.generate", pid=pid), class_name=cls,
                   actor_name=name, node_id="here")


def _settled(rows, want, timeout: float = 90):
    """Dump until ``want(report)`` holds (the children take seconds to import torch and get in place)."""
    last: list = [None]

    def dumped():
        rep = last[0] = _dump(rows)
        return want(rep) and rep

    try:
        return wait_until(dumped, timeout, "the dump to show the children in place", step=0.5)
    except AssertionError:
        return last[0]  # the caller's assertions say what is missing


def _op(rep, title: str):
    r = next((r for r in rep.ranks if r.process == title), None)
    return r.blocked_on.op if r is not None and r.blocked_on else None


def _dump(rows, samples: int = 2):
    async def go():
        cap = StackCapture(None, frozenset({"here"}), DumpOptions(samples=samples, interval_s=0.5))
        kids = await cap.children(rows)
        by_id = {r.actor_id: r for r in rows}
        from dataclasses import replace

        from verltop.analysis.dump import child_key

        procs = [Target(child_key(c), replace(by_id[c.actor_id], pid=c.pid), c.title) for c in kids]
        s = await cap.capture([*rows, *procs])
        return kids, s

    kids, s = asyncio.run(go())
    return analyse(rows, s, time.time(), children=kids)


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm")
    p = spawn("servers.vllm_server_main", str(d), 2, free_port(), 1)
    try:
        kids = _wait_titles(p.pid, {"VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"})
        yield p, kids
    finally:
        _kill_tree(p)


def test_vllm_shaped_server_names_the_hung_tp_worker(vllm_server):
    p, kids = vllm_server
    # until TP0 sits in the all_reduce that TP1 never joins
    rep = _settled([_server_row("srv", p.pid, "vLLMHttpServer", "vllm_server_0_0")],
                   lambda r: _op(r, "VLLM::Worker_TP0") == "all_reduce" and r.chains  # (all() of none holds)
                   and all("did not move" in end_text(c.ends_in) for c in r.chains))
    doc = dump_json(rep)
    by_title = {r["process"]: r for r in doc["ranks"]}
    assert set(by_title) >= {None, "VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"}
    for title in ("VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"):
        r = by_title[title]
        assert r["pid"] == kids[title] and r["actor_id"] == "srv" and r["error"] is None and r["stack"]
    assert by_title["VLLM::EngineCore_DP0"]["parent_pid"] == p.pid
    assert by_title["VLLM::Worker_TP1"]["parent_pid"] == kids["VLLM::EngineCore_DP0"]
    assert by_title[None]["parent_pid"] is None and by_title[None]["pid"] == p.pid
    assert by_title["VLLM::Worker_TP0"]["blocked_on"]["op"] == "all_reduce"  # waits with its TP peer
    # the chain: the server awaits its engine, which waits on its workers; TP1 is where it ends
    (chain,) = doc["chains"]
    assert [h["task"] for h in chain["path"]] == ["vLLMHttpServer.generate", "VLLM::EngineCore_DP0",
                                                  "VLLM::Worker_TP1"]
    assert chain["ends_in"]["pid"] == kids["VLLM::Worker_TP1"] and chain["ends_in"]["process"] == "VLLM::Worker_TP1"
    assert "_load_weights" in chain["ends_in"]["frame"] and "did not move" in chain["ends_in"]["reason"]
    # the suspect is TP1 (the TP0 peer waits in all_reduce for it); the engine and TP0 are not
    sus = doc["suspects"]
    assert sus[0]["pid"] == kids["VLLM::Worker_TP1"] and sus[0]["actor_id"] == "srv"
    assert {s["pid"] for s in sus} == {kids["VLLM::Worker_TP1"]}
    assert "not in all_reduce with TP0" in sus[0]["reason"] and "_load_weights" in sus[0]["reason"]


def test_sglang_shaped_server_names_tp0(tmp_path):
    p = spawn("servers.sglang_server_main", str(tmp_path), 2, free_port(), True)
    try:
        kids = _wait_titles(p.pid, {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"})
        rep = _settled([_server_row("sg", p.pid, "SGLangHttpServer", "sglang_server_0_0")],
                       lambda r: bool(r.chains) and r.chains[0].ends_in.process == "sglang::scheduler_TP0"
                       and "did not move" in end_text(r.chains[0].ends_in))
    finally:
        _kill_tree(p)
    doc = dump_json(rep)
    (chain,) = doc["chains"]
    assert chain["ends_in"]["process"] == "sglang::scheduler_TP0"
    assert "update_weights_from_tensor" in chain["ends_in"]["frame"]
    # TP1 waits in broadcast_pyobj under recv_requests: normal between batches, never a suspect
    assert [s["pid"] for s in doc["suspects"]] == [kids["sglang::scheduler_TP0"]]


def test_reward_sandbox_child_is_the_suspect(tmp_path):
    p = spawn("servers.reward_main", "loop forever")
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(p.pid).children():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        (child,) = psutil.Process(p.pid).children()
        rep = _settled([_server_row("rw", p.pid, "RewardLoopWorker", "reward_loop_worker_0")],
                       lambda r: bool(r.chains) and "did not move" in end_text(r.chains[0].ends_in))
    finally:
        _kill_tree(p)
    doc = dump_json(rep)
    (chain,) = doc["chains"]
    assert chain["ends_in"]["pid"] == child.pid and "run_tests" in chain["ends_in"]["frame"]
    assert "did not move" in chain["ends_in"]["reason"]
    assert "sandbox.py" in chain["ends_in"]["frame"]
    assert [s["pid"] for s in doc["suspects"]] == [child.pid]
    # the scorer's own process waits on it: subprocess.run in the executor thread
    (me,) = [r for r in doc["ranks"] if r["process"] is None]
    assert me["pid"] == p.pid


def test_titles_from_cmdline():
    from verltop.sources.children import title_of

    assert title_of(b"VLLM::Worker_TP1" + b"\0" * 40) == "VLLM::Worker_TP1"
    assert title_of(b"ray::vLLMHttpServer.generate\0\0") == "ray::vLLMHttpServer.generate"
    rt = b"/usr/bin/python3\0-c\0from multiprocessing.resource_tracker import main;main(8)\0"
    assert title_of(rt) == "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(8)"
    assert title_of(b"/usr/bin/python3\0") == "/usr/bin/python3"
