"""``verltop dump --json`` on a real Ray cluster running an agent-loop-shaped job (``chains_job.py``) hung in a
TP worker of a vLLM-shaped server on another raylet, in a reward sandbox child and in an SGLang-shaped
scheduler; then a gloo rank SIGKILLed in a collective and a worker that raised in ``__init__``.

Checked as a user reads the JSON: every process of the job is in ``ranks`` (children with their title and
parent, the driver), the wait chains run from the driver down to the hung processes, the suspects are
exactly those processes, and the dead ranks carry their death.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.wait import wait_until

pytestmark = pytest.mark.ray

HERE = Path(__file__).resolve().parent


class ChainsCluster:
    def __init__(self, state: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        env["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"
        env.setdefault("RAY_AUTH_MODE", "token")
        env.pop("RAY_ADDRESS", None)
        self.log = open(state / "host.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, str(HERE / "chains_job.py"), "host", "--state-dir",
                                      str(state / "state")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, text=True, start_new_session=True)
        self.state = state / "state"
        self.replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.replies.put(ln) for ln in self.proc.stdout] + [self.replies.put("")],
                         daemon=True).start()
        self.info = self.reply(300)
        assert self.info.get("ok"), self.info.get("error")
        self.address = self.info["dashboard"]

    def reply(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"chains host silent for {timeout:.0f}s (log {self.log.name})") from None
        assert line, f"chains host exited (rc={self.proc.poll()}, log {self.log.name})"
        return json.loads(line)

    def cmd(self, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(kw) + "\n")
        self.proc.stdin.flush()
        r = self.reply(180)
        assert r.get("ok"), r.get("error")
        return r

    def dump(self, *extra: str) -> dict[str, Any]:
        exe = Path(sys.executable).parent / "verltop"
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
        p = subprocess.run([str(exe), "dump", "--json", *extra, "--address", self.address], capture_output=True,
                           text=True, timeout=180, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout)

    def stop(self) -> None:
        kids = []
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        with contextlib.suppress(OSError):
            self.proc.stdin.write('{"cmd": "stop"}\n')
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for k in kids:  # engine and sandbox children that outlived their actors
            with contextlib.suppress(psutil.Error):
                k.kill()
        self.log.close()


@pytest.fixture(scope="module")
def chains_cluster(tmp_path_factory: pytest.TempPathFactory):
    c = ChainsCluster(tmp_path_factory.mktemp("chains"))
    try:
        yield c
    finally:
        c.stop()


def _children(d: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    return {r["process"]: r for r in d["ranks"] if r["actor_name"] == name and r["process"] is not None}


def _chain_to(d: dict[str, Any], title: str) -> dict[str, Any] | None:
    return next((c for c in d["chains"] if c["ends_in"]["process"] == title), None)


def _settled(c: ChainsCluster, want, *extra: str, timeout: float = 150) -> dict[str, Any]:
    """Dump until the job is where it hangs (torch imports in six processes take a while on 2 cores)."""
    last: list = [{}]

    def dumped() -> dict[str, Any] | None:
        d = last[0] = c.dump(*extra)
        return d if want(d) else None

    # each dump samples every process with py-spy: a few seconds apart
    return wait_until(dumped, timeout, "the job where it hangs, in a dump", step=2, detail=lambda: json.dumps(
        {"chains": last[0].get("chains"), "suspects": last[0].get("suspects")})[:4000])


def _hung(d: dict[str, Any]) -> bool:
    ends = {c["ends_in"]["process"]: c["ends_in"]["reason"] for c in d["chains"]}
    # the engine core waits on its workers too (until it reaches collective_rpc, with its workers already hung,
    # the only wait on TP1 is TP0's all_reduce, and the chain starts there)
    tp1 = _chain_to(d, "VLLM::Worker_TP1")
    # and the driver already waits down that path (a dump taken as the agent loop's call to the server has begun,
    # before the controller's wait on it, starts the chain at the agent loop)
    return all("did not move" in ends.get(t, "") for t in ("VLLM::Worker_TP1", "sglang::scheduler_TP0")) and any(
        "run_tests" in (c["ends_in"]["frame"] or "") and "did not move" in c["ends_in"]["reason"] for c in d["chains"]
    ) and tp1 is not None and any(h["task"] == "VLLM::EngineCore_DP0" for h in tp1["path"]) and (
        tp1["path"][0]["actor_name"] == "driver")


def test_every_process_and_the_chains_from_the_driver(chains_cluster):
    c = chains_cluster
    d = _settled(c, _hung)
    info = c.info
    # every process: the engine's children on the other raylet, with their parents; the driver
    v = _children(d, "vllm_server_0_0")
    assert set(v) == {"VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"}, set(v)
    assert v["VLLM::EngineCore_DP0"]["pid"] == info["vllm"]["engine"]
    assert v["VLLM::EngineCore_DP0"]["parent_pid"] == info["vllm"]["pid"]
    assert v["VLLM::Worker_TP1"]["parent_pid"] == info["vllm"]["engine"]
    assert v["VLLM::Worker_TP0"]["blocked_on"]["op"] == "all_reduce"
    assert {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"} <= set(
        _children(d, "sglang_server_0_0"))
    (drv,) = [r for r in d["ranks"] if r["role"] == "driver"]
    assert drv["pid"] == info["driver"] and drv["actor_id"] is None and drv["error"] is None
    for r in d["ranks"]:
        for k in ("process", "parent_pid", "death"):
            assert k in r

    # the chain to the hung TP worker, from the top of the job
    ch = _chain_to(d, "VLLM::Worker_TP1")
    hops = [(h["actor_name"], h["task"]) for h in ch["path"]]
    assert hops[0] == ("driver", hops[0][1]) and ch["path"][0]["pid"] == info["driver"]
    assert hops[1:] == [("TaskRunner", "TaskRunner.run"),
                        ("agent_loop_worker_0", "AgentLoopWorker.generate_sequences"),
                        ("vllm_server_0_0", "vLLMHttpServer.generate"),
                        ("vllm_server_0_0", "VLLM::EngineCore_DP0"), ("vllm_server_0_0", "VLLM::Worker_TP1")], hops
    assert "_load_weights" in ch["ends_in"]["frame"]
    # the reward sandbox: a child of the reward worker, with no title of its own
    sb = next(c for c in d["chains"] if "run_tests" in (c["ends_in"]["frame"] or ""))
    assert [h["actor_name"] for h in sb["path"]][1:4] == ["TaskRunner", "agent_loop_worker_1", "reward_loop_worker_0"]
    assert psutil.Process(sb["ends_in"]["pid"]).ppid() == info["reward"]
    sg = _chain_to(d, "sglang::scheduler_TP0")
    assert "update_weights_from_tensor" in sg["ends_in"]["frame"]
    assert [h["actor_name"] for h in sg["path"]][2] == "agent_loop_worker_2"
    # the suspects are the three processes at the ends, nothing a chain only passes through
    pids = {s["pid"] for s in d["suspects"]}
    assert {v["VLLM::Worker_TP1"]["pid"], sb["ends_in"]["pid"], _children(d, "sglang_server_0_0")[
        "sglang::scheduler_TP0"]["pid"]} <= pids
    assert not pids & {info["runner"], info["vllm"]["pid"], info["vllm"]["engine"], info["reward"], *info["loops"],
                       v["VLLM::Worker_TP0"]["pid"]}


def test_children_through_the_probe(chains_cluster):
    """With ``--via probe`` nothing is read from this machine's /proc: the probe on each raylet lists the
    children and dumps them."""
    d = _settled(chains_cluster, lambda d: _chain_to(d, "VLLM::Worker_TP1") is not None, "--via", "probe")
    v = _children(d, "vllm_server_0_0")
    assert set(v) == {"VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"}
    assert all(r["error"] is None and r["stack"] for r in v.values())
    assert [h["task"] for h in _chain_to(d, "VLLM::Worker_TP1")["path"]][-3:] == [
        "vLLMHttpServer.generate", "VLLM::EngineCore_DP0", "VLLM::Worker_TP1"]


def test_d_on_a_rollout_server_dumps_its_engine(chains_cluster):
    d = chains_cluster.dump("--group", "vllm_server_0_0")
    assert {r["process"] for r in d["ranks"]} == {None, "VLLM::EngineCore_DP0", "VLLM::Worker_TP0",
                                                  "VLLM::Worker_TP1"}
    assert {r["actor_name"] for r in d["ranks"]} == {"vllm_server_0_0"}
    assert [s["pid"] for s in d["suspects"]] == [_children(d, "vllm_server_0_0")["VLLM::Worker_TP1"]["pid"]]


def test_sigkilled_rank_and_a_worker_that_raised(chains_cluster):
    c = chains_cluster
    pids = c.cmd(cmd="gloo")["pids"]
    wait_until(lambda: all((c.state / f"pos{r}").exists() for r in (0, 1)), 60, "both gloo ranks in all_reduce",
               step=0.2)
    time.sleep(1.0)
    os.kill(pids[1], signal.SIGKILL)

    def settled(d: dict[str, Any]) -> bool:
        rows = {r["rank"]: r for r in d["ranks"] if r["worker_group"] == "t10k"}
        raised = [r for r in d["ranks"] if r["worker_group"] == "t10r"]
        return (rows.get(1, {}).get("state") == "DEAD" and rows.get(0, {}).get("task") is None
                and bool(raised) and raised[0]["state"] == "DEAD")

    d = _settled(c, settled)
    rows = {r["rank"]: r for r in d["ranks"] if r["worker_group"] == "t10k"}
    assert rows[0]["blocked_on"] is None  # its all_reduce failed with the peer ("Connection closed by peer")
    sus = [s for s in d["suspects"] if s["worker_group"] == "t10k"]
    assert [(s["rank"], s["pid"]) for s in sus] == [(1, pids[1])], d["suspects"]
    assert sus[0]["reason"].startswith("DEAD (") and "rank 0 of t10k live on" in sus[0]["reason"]
    assert rows[1]["death"]["kind"] in ("unknown", "signal"), rows[1]["death"]
    (raised,) = [r for r in d["ranks"] if r["worker_group"] == "t10r"]
    assert raised["death"] == {"kind": "exception", "detail": "ValueError: bad rollout config: "
                               "tensor_model_parallel_size=3 does not divide 8 heads"}
