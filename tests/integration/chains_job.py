"""A job shaped like verl 0.9's agent-loop rollout, on a real Ray cluster, hung on purpose in three places.

Run as ``python chains_job.py host --state-dir DIR``: starts a two-raylet cluster on this machine (head, and
a worker node with resource ``n1``), then the job, and answers JSON-line commands on stdin (the pytest side
is ``test_process_chains.py``):

- ``TaskRunner.run`` (the controller, a sync actor) waits in ``ray.get`` on three ``AgentLoopWorker`` async
  actors' ``generate_sequences``; the driver (this process) waits in ``ray.get`` on ``TaskRunner.run``;
- ``agent_loop_worker_0`` awaits ``vllm_server_0_0.generate`` (on the worker node): its engine core
  (``VLLM::EngineCore_DP0``) waits in ``collective_rpc`` on ``VLLM::Worker_TP0`` (in gloo ``all_reduce``)
  and ``VLLM::Worker_TP1`` (hung in ``_load_weights``);
- ``agent_loop_worker_1`` awaits ``reward_loop_worker_0.compute_score``, whose scorer waits in
  ``subprocess.run`` on a sandbox child that never returns;
- ``agent_loop_worker_2`` awaits ``sglang_server_0_0.generate``, whose ``sglang::scheduler_TP0`` hangs in
  ``update_weights_from_tensor`` while ``sglang::scheduler_TP1`` waits in ``broadcast_pyobj``;
- on ``gloo``: a worker group ``t10k`` of two ranks enters a gloo ``all_reduce`` that rank 1 never joins
  (the test SIGKILLs it there), and ``t10rWorker_0:0`` raises in ``__init__``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path

import ray

TESTS = str(Path(__file__).resolve().parent.parent)


def _shapes() -> None:
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)


def _port() -> int:
    _shapes()
    from net import free_port

    return free_port()


@ray.remote(num_cpus=0)
class vLLMHttpServer:
    def __init__(self, hang_tp: int) -> None:
        _shapes()
        from shapes.servers import start_vllm

        self.dir = tempfile.mkdtemp(prefix="vllm_")
        self.procs = start_vllm(self.dir, 2, _port(), hang_tp)

    async def generate(self) -> str:
        from shapes.servers import generate

        return await generate(self.dir, "update_weights")

    def pids(self) -> dict:
        return {"pid": os.getpid(), "engine": self.procs[0].pid}


@ray.remote(num_cpus=0)
class SGLangHttpServer:
    def __init__(self) -> None:
        _shapes()
        from shapes.servers import start_sglang

        self.dir = tempfile.mkdtemp(prefix="sglang_")
        self.procs = start_sglang(self.dir, 2, _port(), True)

    async def generate(self) -> str:
        from shapes.servers import generate

        return await generate(self.dir, "update_weights_from_tensor")

    def pids(self) -> dict:
        return {"pid": os.getpid()}


@ray.remote(num_cpus=0)
class RewardLoopWorker:
    def __init__(self) -> None:
        _shapes()

    async def compute_score(self, program: str) -> float:
        from shapes.servers import compute_score

        return await compute_score(program)

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class AgentLoopWorker:
    def __init__(self, target, how: str) -> None:
        self.target = target
        self.how = how

    async def generate_sequences(self) -> str:
        if self.how == "reward":
            return str(await self.target.compute_score.remote("loop forever"))
        return await self.target.generate.remote()

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class TaskRunner:
    def __init__(self, loops: list) -> None:
        self.loops = loops

    def run(self) -> list:
        return ray.get([al.generate_sequences.remote() for al in self.loops])

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class GlooRank:
    """A rank of worker group ``t10k`` (verl's rank keys in its runtime env)."""

    def setup(self, rank: int, port: int) -> int:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                timeout=timedelta(hours=1))
        self.rank = rank
        return os.getpid()

    def update_actor(self, pos: str) -> None:
        import torch
        import torch.distributed as dist

        Path(pos).write_text("all_reduce")
        if self.rank == 0:
            dist.all_reduce(torch.ones(1024))
        else:
            threading.Event().wait()  # never joins: the test SIGKILLs it here


@ray.remote(num_cpus=0)
class Raiser:
    def __init__(self) -> None:
        raise ValueError("bad rollout config: tensor_model_parallel_size=3 does not divide 8 heads")


class Host:
    def __init__(self, state_dir: str) -> None:
        from ray.cluster_utils import Cluster

        self.state = Path(state_dir)
        self.state.mkdir(parents=True, exist_ok=True)
        port = _port()
        from net import AGENT_PORT

        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 4, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port,
            **AGENT_PORT})
        self.cluster.add_node(num_cpus=2, resources={"n1": 1})
        ray.init(address=self.cluster.address, logging_level="WARNING", log_to_driver=False)
        self.dashboard = f"http://127.0.0.1:{port}"
        self.vllm = vLLMHttpServer.options(name="vllm_server_0_0", resources={"n1": 0.01}).remote(1)
        self.sglang = SGLangHttpServer.options(name="sglang_server_0_0").remote()
        self.reward = RewardLoopWorker.options(name="reward_loop_worker_0").remote()
        self.loops = [AgentLoopWorker.options(name=f"agent_loop_worker_{i}").remote(t, how)
                      for i, (t, how) in enumerate(((self.vllm, "generate"), (self.reward, "reward"),
                                                    (self.sglang, "generate")))]
        self.runner = TaskRunner.remote(self.loops)
        info = {"vllm": ray.get(self.vllm.pids.remote(), timeout=180),
                "sglang": ray.get(self.sglang.pids.remote(), timeout=180),
                "reward": ray.get(self.reward.pid.remote()), "runner": ray.get(self.runner.pid.remote()),
                "loops": ray.get([al.pid.remote() for al in self.loops]), "driver": os.getpid()}
        self.run_ref = self.runner.run.remote()
        threading.Thread(target=self._wait_run, daemon=True).start()
        self.info = {"dashboard": self.dashboard, **info}
        self.gloo: list = []

    def _wait_run(self) -> None:
        try:
            ray.get(self.run_ref)  # the driver waits on the controller, as verl's main_ppo does
        except Exception:  # noqa: BLE001 - the cluster goes away at the end
            pass

    def handle(self, cmd: dict) -> dict:
        op = cmd["cmd"]
        if op == "gloo":
            port = _port()
            env = {"WORLD_SIZE": "2", "WG_PREFIX": "t10k"}
            self.gloo = [GlooRank.options(name=f"t10kGlooRank_0:{r}",
                                          runtime_env={"env_vars": {**env, "RANK": str(r)}}).remote()
                         for r in range(2)]
            pids = ray.get([g.setup.remote(r, port) for r, g in enumerate(self.gloo)], timeout=120)
            self.updates = [g.update_actor.remote(str(self.state / f"pos{r}")) for r, g in enumerate(self.gloo)]
            self.raiser = Raiser.options(name="t10rWorker_0:0", runtime_env={"env_vars": {
                "RANK": "0", "WORLD_SIZE": "1", "WG_PREFIX": "t10r"}}).remote()
            return {"pids": pids}
        raise ValueError(f"unknown command {op!r}")

    def stop(self) -> None:
        try:
            ray.shutdown()
        finally:
            self.cluster.shutdown()


def host_main(argv: list[str]) -> int:
    import argparse

    from scenarios import _token_ready

    p = argparse.ArgumentParser()
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _token_ready()
    t0 = time.monotonic()
    try:
        host = Host(args.state_dir)
    except BaseException:
        proto.write(json.dumps({"ok": False, "error": traceback.format_exc()}) + "\n")
        raise
    proto.write(json.dumps({"ok": True, "startup_s": round(time.monotonic() - t0, 1), **host.info}) + "\n")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            if cmd["cmd"] == "stop":
                break
            try:
                reply = {"ok": True, **host.handle(cmd)}
            except Exception:  # noqa: BLE001 - the test sees the traceback
                reply = {"ok": False, "error": traceback.format_exc()}
            proto.write(json.dumps(reply) + "\n")
    finally:
        host.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        asyncio.set_event_loop_policy(None)
        sys.exit(host_main(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} host --state-dir DIR")
