#!/usr/bin/env python3
"""A verl-shaped Ray job for a one-GPU machine: one rank waits on its GPU, its peer straggles.

usage: device_gpu_job.py OUTDIR HOLD_S [--cpu]

- ``TaskRunner`` (the controller) creates two ``create_colocated_worker_cls.<locals>.WorkerDict`` actors named
  ``gpu1WorkerDict_0:{r}`` with RANK / WORLD_SIZE / WG_PREFIX in their runtime env (as verl's RayWorkerGroup
  does) and waits for them in ``ray.get``;
- rank 0 holds GPU 0 (``num_gpus=1``), runs an NCCL process group of world size 1 with Flight Recorder on
  (``TORCH_FR_*`` and ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` in its runtime env), does a few all_reduces, then
  queues a long GPU kernel loop and blocks at ``.item()``: the host waits on the GPU with util 100 %, the
  Python signature an NCCL wait has;
- rank 1 is a CPU-only peer that sleeps in ``generate_sequences`` (the straggler).

The Flight Recorder variables are set twice, as a verl user would (``ray_init.runtime_env.env_vars``, the
job's runtime env) and in rank 0's own actor runtime env, so the capture shows which of them reach the
dashboard's ``serialized_runtime_env`` of each rank. ``--cpu``: gloo and a busy loop instead of the GPU
(a dry run of the harness on a machine without one).
"""

from __future__ import annotations

import json
import os
import sys
import time

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

OUT = os.path.abspath(sys.argv[1])
HOLD_S = float(sys.argv[2])
CPU = "--cpu" in sys.argv
PREFIX = "gpu1"
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
FR_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "/tmp/fr_rank_",
          "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/tmp/fr_pipe_"}


def create_colocated_worker_cls():
    class WorkerDict:
        def __init__(self, outdir: str, hold_s: float, cpu: bool) -> None:
            self.rank = int(os.environ["RANK"])
            self.world = int(os.environ["WORLD_SIZE"])
            self.outdir, self.hold_s, self.cpu = outdir, hold_s, cpu
            self.cycles_per_s = None

        def _mark(self, what: str, **kw) -> None:
            ctx = ray.get_runtime_context()
            with open(os.path.join(self.outdir, f"{what}_rank{self.rank}.json"), "w") as fh:
                json.dump({"rank": self.rank, "pid": os.getpid(), "t": time.time(), "task_id": ctx.get_task_id(),
                           "actor_id": ctx.get_actor_id(), "actor_name": ctx.get_actor_name(),
                           "node_id": ctx.get_node_id(), "gpu_ids": ray.get_gpu_ids(),
                           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                           "fr_env": {k: os.environ.get(k) for k in FR_ENV}, **kw}, fh, indent=1)

        def actor_rollout_init_model(self) -> dict:
            info: dict = {"rank": self.rank, "pid": os.getpid()}
            if self.rank != 0:
                self._mark("init")
                return info
            from datetime import timedelta

            import torch
            import torch.distributed as dist

            if self.cpu:
                dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29541", rank=0, world_size=1,
                                        timeout=timedelta(seconds=120))
                x = torch.ones(1 << 16)
            else:
                torch.cuda.set_device(0)
                dev = torch.device("cuda", 0)
                dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29541", rank=0, world_size=1,
                                        timeout=timedelta(seconds=600), device_id=dev)
                self.ballast = torch.empty(3 << 30, dtype=torch.uint8, device=dev)  # 3 GiB: a visible footprint
                x = torch.ones(1 << 20, device=dev)
            for _ in range(4):
                dist.all_reduce(x)
            if not self.cpu:
                torch.cuda.synchronize()
                # GPU clock in cycles/s for torch.cuda._sleep (a spin kernel that runs N cycles)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                torch.cuda._sleep(200_000_000)
                b.record()
                b.synchronize()
                self.cycles_per_s = 200_000_000 / (a.elapsed_time(b) / 1000.0)
                info["cycles_per_s"] = self.cycles_per_s
                info["mem_allocated"] = torch.cuda.memory_allocated()
                try:  # an in-process Flight Recorder dump, in case the debug-info pipe does not answer
                    with open("/tmp/fr_inproc_rank_0", "wb") as fh:
                        fh.write(torch._C._distributed_c10d._dump_nccl_trace())
                except Exception as e:  # noqa: BLE001
                    info["inproc_dump_error"] = repr(e)
            self._mark("init", **info)
            return info

        def generate_sequences(self, seconds: float) -> None:
            time.sleep(seconds)

        def actor_rollout_update_actor(self) -> float | None:
            if self.rank != 0:
                self._mark("hang")
                self.generate_sequences(self.hold_s)  # the straggler: a slow rollout
                return None
            import torch
            import torch.distributed as dist

            if self.cpu:
                y = torch.ones(1 << 16)
                dist.all_reduce(y)
                self._mark("hang")
                end = time.time() + self.hold_s
                while time.time() < end:  # busy, like a host spinning on the GPU
                    pass
                return float(y.sum().item())
            y = torch.ones(1 << 24, device="cuda")
            dist.all_reduce(y)  # collective #5: completes at once (world size 1)
            n = 64
            cycles = int(self.hold_s * (self.cycles_per_s or 1.98e9) / n)
            for _ in range(n):  # a long kernel loop: the GPU is busy for HOLD_S
                torch.cuda._sleep(cycles)
            self._mark("hang", kernels=n, cycles_each=cycles)
            return y.sum().item()  # the host waits here on the GPU

    return WorkerDict


@ray.remote(num_cpus=1)
class TaskRunner:
    def run(self, config: dict) -> list:
        gpu = 0 if config["cpu"] else 1
        pg = placement_group([{"CPU": 1, "GPU": gpu} if gpu else {"CPU": 1}, {"CPU": 1}],
                             strategy="STRICT_PACK", name="global_pool_0")
        ray.get(pg.ready(), timeout=60)
        WorkerDict = ray.remote(create_colocated_worker_cls())
        workers = []
        for r in range(2):
            env = {"RANK": str(r), "WORLD_SIZE": "2", "WG_PREFIX": PREFIX, **SAFE}
            if r == 0:
                env.update(FR_ENV)
            w = WorkerDict.options(
                name=f"{PREFIX}WorkerDict_0:{r}", num_cpus=1, num_gpus=gpu if r == 0 else 0,
                runtime_env={"env_vars": env},
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r),
            ).remote(config["outdir"], config["hold_s"], config["cpu"])
            workers.append(w)
        info = ray.get([w.actor_rollout_init_model.remote() for w in workers], timeout=180)
        with open(os.path.join(config["outdir"], "workers_info.json"), "w") as fh:
            json.dump(info, fh, indent=1)
        return ray.get([w.actor_rollout_update_actor.remote() for w in workers])


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    t = time.time()
    # the three Flight Recorder variables as a verl user sets them: +ray_kwargs.ray_init.runtime_env.env_vars.*
    ray.init(address="auto", runtime_env={"env_vars": {**FR_ENV, **SAFE}})
    print(f"ray.init took {time.time() - t:.2f}s", flush=True)
    runner = TaskRunner.options(name="TaskRunner").remote()
    ref = runner.run.remote({"outdir": OUT, "hold_s": HOLD_S, "cpu": CPU})
    try:
        print("result:", ray.get(ref, timeout=HOLD_S + 300), flush=True)
    except Exception as e:  # noqa: BLE001 - the harness kills the cluster under it
        print(f"driver got {type(e).__name__} after {time.time() - t:.1f}s: {e}", flush=True)


if __name__ == "__main__":
    main()
