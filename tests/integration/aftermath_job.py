"""A verl job whose hang outlives its first symptoms, on a real one-node Ray cluster (CPU, gloo).

Run as ``python aftermath_job.py host --state-dir DIR``; it answers JSON-line commands on stdin (the pytest side
is ``test_aftermath.py``). One verl worker group ``af`` (two ranks, ``WorkerDict`` from
``create_colocated_worker_cls``) whose gloo groups time out after ``TIMEOUT_S``, and ``TaskRunner``, the
controller. Commands (each ``tag`` names a release file ``{state_dir}/release-{tag}``):

- ``straggle`` ``{"tag", "then": "wait"|"give_up", "group"}``: rank 0 enters ``all_reduce`` (of the gloo group
  ``group``, by default ``then``'s), rank 1 sits in ``_slow_reward_fn`` until released; rank 0's call FAILS with
  gloo's timeout. The controller catches the RayTaskError and then waits on rank 1's result (``wait``) or gives
  the batch up and returns (``give_up``);
- ``go_on`` ``{"tag"}``: after a ``give_up``, the controller's next call goes to rank 0 alone (it computes, in a
  loop, until released): the peer that failed waiting is at work again, no witness any more;
- ``reward`` ``{"tag"}``: the controller submits ``act`` to both ranks (they compute, in a loop, until released)
  and goes into ``my_reward_fn``, code of its own, until released; the driver (this process) waits on it in
  ``ray.get`` (the reply comes once released);
- ``wait`` ``{"tag"}``: the controller call's result.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register

from verltop.demo.rendezvous import join_gloo

TIMEOUT_S = 3.0
_GROUPS: dict[str, Any] = {}


def _released(state_dir: str, tag: str) -> bool:
    return Path(state_dir, f"release-{tag}").exists()


def _slow_reward_fn(state_dir: str, tag: str) -> None:
    while not _released(state_dir, tag):
        time.sleep(0.1)


class AftermathWorker(Worker):
    def __init__(self, state_dir: str) -> None:
        super().__init__()
        self.state_dir = state_dir

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def setup(self) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        addr, port = self.get_master_addr_port()
        note = Path(self.state_dir, "rendezvous", f"{os.environ.get('WG_PREFIX', 'wg')}-{port}")
        join_gloo(self.rank, self.world_size, addr, note, timedelta(seconds=TIMEOUT_S))
        for tag in ("wait", "give_up", "watch"):  # a fresh group per hang: a gloo group that timed out is spent
            _GROUPS[tag] = dist.new_group(backend="gloo", timeout=timedelta(seconds=TIMEOUT_S))
        ctx = ray.get_runtime_context()
        return {"rank": self.rank, "pid": os.getpid(), "actor_id": ctx.get_actor_id()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def act(self, plan: dict[str, str], tag: str, group: str) -> int:
        import torch
        import torch.distributed as dist

        op = plan[str(self.rank)]
        if op == "all_reduce":
            dist.all_reduce(torch.ones(16), group=_GROUPS[group])
        elif op == "straggle":
            _slow_reward_fn(self.state_dir, tag)
        elif op == "compute":
            n = 0
            while not _released(self.state_dir, tag):
                n += 1  # moves: a rank at work, not a hang
                time.sleep(0.01 + (n % 3) * 0.001)
        return self.rank


def my_reward_fn(state_dir: str, tag: str) -> float:
    """The user's reward function, called by the controller: stuck until released."""
    while not _released(state_dir, tag):
        time.sleep(0.1)
    return 1.0


@ray.remote(num_cpus=0)
class TaskRunner:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.wg: Any = None

    def setup(self) -> dict[str, Any]:
        from verl.single_controller.ray import (
            RayClassWithInitArgs,
            RayResourcePool,
            RayWorkerGroup,
            create_colocated_worker_cls,
        )

        pool = RayResourcePool([2], use_gpu=False, name_prefix="pool_af", max_colocate_count=1)
        cls = {"actor_rollout": RayClassWithInitArgs(cls=ray.remote(AftermathWorker), state_dir=self.state_dir)}
        wg_dict = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(cls))
        self.wg = wg_dict.spawn(prefix_set=cls.keys())["actor_rollout"]
        ranks = self.wg.setup()
        return {"prefix": wg_dict.name_prefix, "ranks": ranks, "runner_pid": os.getpid()}

    def straggle(self, tag: str, then: str, group: str | None = None) -> dict[str, Any]:
        refs = self.wg.execute_all_async("actor_rollout_act", {"0": "all_reduce", "1": "straggle"}, tag,
                                         group or then)
        try:
            ray.get(refs)
            return {"error": None}
        except ray.exceptions.RayTaskError as e:  # verl's debugging guide: catch it and recover
            err = str(e).strip().splitlines()[-1]
        if then == "give_up":
            return {"error": err}
        ray.get(refs[1])  # the straggler's result is still owed
        return {"error": err, "waited": True}

    def go_on(self, tag: str) -> None:
        self.next = self.wg.workers[0].actor_rollout_act.remote({"0": "compute"}, tag, "wait")

    def reward(self, tag: str) -> float:
        refs = self.wg.execute_all_async("actor_rollout_act", {"0": "compute", "1": "compute"}, tag, "wait")
        score = my_reward_fn(self.state_dir, tag)
        ray.get(refs)
        return score


class Host:
    def __init__(self, state_dir: str) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for net
        from net import free_port

        port = free_port()
        ray.init(num_cpus=3, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=port,
                 logging_level="WARNING", log_to_driver=False)
        self.state_dir = state_dir
        self.dashboard = f"http://127.0.0.1:{port}"
        self.runner = TaskRunner.remote(state_dir)
        self.setup = ray.get(self.runner.setup.remote(), timeout=240)
        self.info = {"dashboard": self.dashboard, **self.setup}
        self.pending: dict[str, Any] = {}

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op, tag = cmd["cmd"], cmd.get("tag", "")
        if op == "straggle":
            self.pending[tag] = self.runner.straggle.remote(tag, cmd["then"], cmd.get("group"))
            return {}
        if op == "go_on":
            ray.get(self.runner.go_on.remote(tag))
            return {}
        if op == "reward":
            return {"score": ray.get(self.runner.reward.remote(tag))}  # the driver waits in ray.get
        if op == "wait":
            ready, _ = ray.wait([self.pending[tag]], timeout=cmd.get("wait_s", 60))
            return {"done": bool(ready), "result": ray.get(ready[0]) if ready else None}
        raise ValueError(f"unknown command {op!r}")

    def close(self) -> None:
        ray.shutdown()


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        from job_host import serve

        sys.exit(serve(lambda state_dir, say: Host(state_dir), sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} host --state-dir DIR")
