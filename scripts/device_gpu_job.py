#!/usr/bin/env python3
"""A verl-shaped Ray job for a one-GPU machine: one rank waits on its GPU, its peer straggles.
With ``--world 2`` (two GPUs), an NCCL process group of world size 2 hung for real (see the end).

usage: device_gpu_job.py OUTDIR HOLD_S [--cpu] [--world 2 --shape straggler|mismatch --timeout S --port P]

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

``--world 2`` (the ``nvidia-h200-x2`` run): actors ``x2sWorkerDict_0:{0,1}`` (straggler) or ``x2mWorkerDict_0:{0,1}``
(mismatch), ``num_gpus=1`` each, runtime env ``RANK``/``WORLD_SIZE``/``WG_PREFIX`` plus ``TORCH_FR_BUFFER_SIZE``,
``TORCH_FR_DUMP_TEMP_FILE``, ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``; an NCCL
group of world size 2 with a ``--timeout`` s watchdog, (2 + rank) GiB of ballast per GPU, 4 all_reduces, then
collective #5 hung in one of two shapes:

- straggler: rank 1 sleeps in ``generate_sequences`` and never reaches #5; rank 0 enters ``all_reduce`` and
  blocks at the ``.item()`` after it (GPU 100 %);
- mismatch: rank 0 ``all_reduce`` (16777216 floats), rank 1 ``all_gather`` (1024 floats each); both block at
  their ``.item()``.
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


def _opt(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


WORLD = int(_opt("--world", "1"))
SHAPE = _opt("--shape", "straggler")
PG_TIMEOUT_S = float(_opt("--timeout", "45"))
PORT = int(_opt("--port", "29542"))
PREFIX = "gpu1" if WORLD == 1 else {"straggler": "x2s", "mismatch": "x2m"}[SHAPE]
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
FR_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "/tmp/fr_rank_",
          "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/tmp/fr_pipe_"}
if WORLD == 2:
    FR_ENV["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"


def create_colocated_worker_cls():
    class WorkerDict:
        def __init__(self, outdir: str, hold_s: float, cpu: bool, x2: dict | None = None) -> None:
            self.rank = int(os.environ["RANK"])
            self.world = int(os.environ["WORLD_SIZE"])
            self.outdir, self.hold_s, self.cpu = outdir, hold_s, cpu
            self.cycles_per_s = None
            self.x2 = x2  # {"shape", "timeout_s", "port"} in the world-size-2 run

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
            if self.x2:
                return self._init_x2(info)
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

        def _init_x2(self, info: dict) -> dict:
            from datetime import timedelta

            import torch
            import torch.distributed as dist

            kw = {"init_method": f"tcp://127.0.0.1:{self.x2['port']}", "rank": self.rank, "world_size": 2,
                  "timeout": timedelta(seconds=self.x2["timeout_s"])}
            if self.cpu:
                dist.init_process_group("gloo", **kw)
                x = torch.ones(1 << 16)
            else:
                torch.cuda.set_device(0)  # Ray's CUDA_VISIBLE_DEVICES leaves each actor one GPU
                dev = torch.device("cuda", 0)
                dist.init_process_group("nccl", device_id=dev, **kw)
                self.ballast = torch.empty((2 + self.rank) << 30, dtype=torch.uint8, device=dev)  # 2 / 3 GiB
                x = torch.ones(1 << 20, device=dev)
            for _ in range(4):
                dist.all_reduce(x)
            info["x0"] = float(x[0].item())  # 2.0 ** 4 * 1: the warm-up collectives completed
            if not self.cpu:
                info["mem_allocated"] = torch.cuda.memory_allocated()
            self._mark("init", **info)
            return info

        def generate_sequences(self, seconds: float) -> None:
            time.sleep(seconds)

        def _update_x2(self) -> float | None:
            import torch
            import torch.distributed as dist

            dev = "cpu" if self.cpu else "cuda"
            y = torch.ones(1 << 24, device=dev)
            if self.x2["shape"] == "straggler" and self.rank == 1:
                self._mark("hang", shape="straggler")
                self.generate_sequences(self.hold_s)  # the straggler: never reaches collective #5
                return None
            if self.x2["shape"] == "mismatch" and self.rank == 1:
                out = [torch.empty(1 << 10, device=dev) for _ in range(2)]
                self._mark("hang", shape="mismatch", op="all_gather")
                dist.all_gather(out, y[: 1 << 10].contiguous())  # collective #5 here: all_gather
                return float(sum(o.sum() for o in out).item())  # rank 1 waits here on the GPU
            self._mark("hang", shape=self.x2["shape"], op="all_reduce")
            dist.all_reduce(y)  # collective #5 on rank 0: all_reduce
            return float(y.sum().item())  # rank 0 waits here on the GPU

        def actor_rollout_update_actor(self) -> float | None:
            if self.x2:
                return self._update_x2()
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
        if config.get("x2"):
            return self.run_x2(config)
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

    def run_x2(self, config: dict) -> list:
        gpu = 0 if config["cpu"] else 1
        pg = placement_group([{"CPU": 1, "GPU": gpu} if gpu else {"CPU": 1}] * 2, strategy="STRICT_PACK",
                             name="global_pool_0")
        ray.get(pg.ready(), timeout=60)
        WorkerDict = ray.remote(create_colocated_worker_cls())
        workers = []
        for r in range(2):
            env = {"RANK": str(r), "WORLD_SIZE": "2", "WG_PREFIX": PREFIX, **SAFE, **FR_ENV}
            w = WorkerDict.options(
                name=f"{PREFIX}WorkerDict_0:{r}", num_cpus=1, num_gpus=gpu, runtime_env={"env_vars": env},
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r),
            ).remote(config["outdir"], config["hold_s"], config["cpu"], config["x2"])
            workers.append(w)
        info = ray.get([w.actor_rollout_init_model.remote() for w in workers], timeout=180)
        with open(os.path.join(config["outdir"], "workers_info.json"), "w") as fh:
            json.dump(info, fh, indent=1)
        return ray.get([w.actor_rollout_update_actor.remote() for w in workers])


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    t = time.time()
    # the three Flight Recorder variables as a verl user sets them: +ray_kwargs.ray_init.runtime_env.env_vars.*
    # (the world-size-2 run gives them to each rank's own runtime env only, as the brief of that run asks)
    ray.init(address="auto", runtime_env={"env_vars": {**SAFE} if WORLD == 2 else {**FR_ENV, **SAFE}})
    print(f"ray.init took {time.time() - t:.2f}s", flush=True)
    runner = TaskRunner.options(name="TaskRunner").remote()
    x2 = {"shape": SHAPE, "timeout_s": PG_TIMEOUT_S, "port": PORT} if WORLD == 2 else None
    ref = runner.run.remote({"outdir": OUT, "hold_s": HOLD_S, "cpu": CPU, "x2": x2})
    try:
        print("result:", ray.get(ref, timeout=HOLD_S + 300), flush=True)
    except Exception as e:  # noqa: BLE001 - the harness kills the cluster under it
        print(f"driver got {type(e).__name__} after {time.time() - t:.1f}s: {e}", flush=True)
        with open(os.path.join(OUT, "driver_error.txt"), "w") as fh:
            fh.write(f"{type(e).__name__} after {time.time() - t:.1f}s: {e}\n")
        # gloo (the CPU dry run) raises at its timeout where NCCL hangs on: keep the job (and its actors)
        # alive for the capture's after-timeout phase, as NCCL's would be
        if WORLD == 2 and all(os.path.exists(os.path.join(OUT, f"hang_rank{r}.json")) for r in range(2)):
            time.sleep(HOLD_S)


if __name__ == "__main__":
    main()
