"""A verl-shaped training loop whose memory tells a story, on a real one-node Ray cluster (CPU, gloo).

Run as ``python memory_job.py host --state-dir DIR`` (the pytest side is ``test_memory_oom.py``; the protocol is
``job_host.py``). A ``ray.cluster_utils`` head whose dashboard agent takes a free port (it runs beside the demo's
cluster), one verl worker group of two ranks (``WorkerDict`` from ``create_colocated_worker_cls``, role
``actor_rollout``) and ``TaskRunner``, the controller. Each step the controller calls, on both ranks:

- ``generate_sequences`` (phase ``gen``, ``GEN_S``): rank 0 takes ``PEAK_MIB`` more host memory ``AFTER_S`` into
  the call, holds it ``HOLD_S`` from when it is resident and gives it back ``TAIL_S`` before the call ends (a
  transient peak, not a leak);
- ``update_actor`` (phase ``update_actor``, ``UPDATE_S``): rank 1 keeps ``LEAK_MIB`` more ``AFTER_S`` into every
  call (a leak of that phase on that rank alone); both ranks then ``all_reduce`` (gloo). At step ``oom_at`` rank 1
  raises torch's OutOfMemoryError instead ("CUDA out of memory. Tried to allocate …") and writes the time into
  ``{state_dir}/oom-at``, while rank 0 waits in its ``all_reduce`` (the group's timeout is long) and the
  controller in ``ray.get``.

The memory moves well inside each call: a running call shows in Ray's State API only once its worker reports
the task's events (every 100 ms here: RAY_task_events_report_interval_ms, set by the test; 1 s by default) and
the watch has polled it, and verltop books each sample under the calls listed as running then.

The first reply carries the dashboard's address before the worker group is made (so a watch can start while it
is), the second the ranks. Commands: ``run`` ``{"steps", "oom_at"}`` (answered at once; the loop runs on).
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

MIB = 1 << 20
PEAK_MIB = 300
LEAK_MIB = 48
# Each move of memory comes AFTER_S into its call and lasts (or is followed by the rest of the call) over a
# second: verltop samples this machine's processes every second. The peak is held HOLD_S from when it is
# resident (writing 300 MiB takes a loaded 2-core machine a fifth of a second or more: a hold of one sampling
# period to a fixed time often saw it half-written), and the call goes on TAIL_S after it is given back (what a
# phase keeps is its last sample's: one taken before the peak went is no transient)
GEN_S = 3.0
AFTER_S = 0.5
HOLD_S = 1.4
TAIL_S = 1.3
UPDATE_S = 1.7
GROUP_TIMEOUT_S = 120.0
OOM_TEXT = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which "
            "1.20 GiB is free. Of the allocated memory 74.90 GiB is allocated by PyTorch.")
_KEPT: list[bytes] = []  # what update_actor keeps on rank 1


def _until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


class MemoryWorker(Worker):
    def __init__(self, state_dir: str) -> None:
        super().__init__()
        self.state_dir = state_dir

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def setup(self) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        addr, port = self.get_master_addr_port()
        dist.init_process_group(backend="gloo", init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                world_size=self.world_size, timeout=timedelta(seconds=GROUP_TIMEOUT_S))
        return {"rank": self.rank, "pid": os.getpid(), "actor_id": ray.get_runtime_context().get_actor_id()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def generate_sequences(self, step: int) -> int:
        t0 = time.time()
        if self.rank == 0:
            _until(t0 + AFTER_S)
            peak = b"\x01" * (PEAK_MIB * MIB)  # written: resident at once
            time.sleep(HOLD_S)
            del peak
            _until(max(t0 + GEN_S, time.time() + TAIL_S))
        _until(t0 + GEN_S)
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_actor(self, step: int, oom_at: int) -> int:
        import torch
        import torch.distributed as dist

        t0 = time.time()
        if self.rank == 1:
            _until(t0 + AFTER_S)
            if step == oom_at:
                Path(self.state_dir, "oom-at").write_text(f"{time.time()} {step}")
                raise torch.OutOfMemoryError(OOM_TEXT)
            _KEPT.append(b"\x01" * (LEAK_MIB * MIB))
        dist.all_reduce(torch.ones(4))  # rank 0 waits here for a rank that ran out
        _until(t0 + UPDATE_S)
        return self.rank


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

        pool = RayResourcePool([2], use_gpu=False, name_prefix="pool_mem", max_colocate_count=1)
        cls = {"actor_rollout": RayClassWithInitArgs(cls=ray.remote(MemoryWorker), state_dir=self.state_dir)}
        wg_dict = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(cls))
        self.wg = wg_dict.spawn(prefix_set=cls.keys())["actor_rollout"]
        ranks = self.wg.setup()
        return {"prefix": wg_dict.name_prefix, "ranks": ranks, "runner_pid": os.getpid()}

    def run(self, steps: int, oom_at: int) -> dict[str, Any]:
        for step in range(1, steps + 1):
            Path(self.state_dir, "step").write_text(str(step))
            self.wg.actor_rollout_generate_sequences(step)
            try:
                self.wg.actor_rollout_update_actor(step, oom_at)
            except ray.exceptions.RayTaskError as e:
                return {"step": step, "error": str(e).strip().splitlines()[-1]}
        return {"step": steps, "error": None}


class Host:
    def __init__(self, state_dir: str, say: Any) -> None:
        from ray.cluster_utils import Cluster

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for net
        from net import AGENT_PORT, free_port

        port = free_port()
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 3, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port,
            **AGENT_PORT})
        ray.init(address=self.cluster.address, logging_level="WARNING", log_to_driver=False)
        self.dashboard = f"http://127.0.0.1:{port}"
        say({"dashboard": self.dashboard})
        self.runner = TaskRunner.remote(state_dir)
        self.info = {"dashboard": self.dashboard, **ray.get(self.runner.setup.remote(), timeout=240)}
        self.pending: Any = None

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["cmd"] == "run":
            self.pending = self.runner.run.remote(cmd["steps"], cmd["oom_at"])
            return {}
        raise ValueError(f"unknown command {cmd['cmd']!r}")

    def close(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        from job_host import serve

        sys.exit(serve(Host, sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} host --state-dir DIR")
