"""The verl-shaped Ray job that ``scripts/gpu_check.py`` hangs on purpose (needs ray and torch with CUDA).

Shaped as verl's single controller builds it: a ``TaskRunner`` actor (the controller) makes a placement
group and one ``create_colocated_worker_cls.<locals>.WorkerDict`` actor per rank, named
``{prefix}WorkerDict_0:{rank}``, with ``RANK``, ``WORLD_SIZE``, ``WG_PREFIX`` and ``RAY_LOCAL_WORLD_SIZE`` in its
runtime env (as ``RayWorkerGroup`` does) plus the Flight Recorder variables; it calls
``actor_rollout_init_model`` on every rank, then ``actor_rollout_update_actor``, and waits in ``ray.get``.

Each rank holds one GPU (``num_gpus=1``), joins an NCCL process group with a short timeout and the Flight
Recorder on, runs four ``all_reduce``s (collectives #1-4), then collective #5 hangs in one of three shapes:

- ``straggler``: the last rank sleeps in ``generate_sequences`` and never reaches #5; the others enter
  ``all_reduce`` and block at the ``.item()`` after it (NCCL returns at once; the host waits on its GPU);
- ``mismatch``: rank 1 calls ``all_gather`` where every other rank calls ``all_reduce``; all block at ``.item()``;
- ``single`` (one GPU): rank 0 is an NCCL group of one that keeps its GPU busy and blocks at ``.item()``;
  rank 1 holds no GPU and sleeps in ``generate_sequences`` (the straggler).

Every rank reports to a ``Marks`` actor when it is about to hang (pid, GPU ids, what it does), so the checker
knows when to look, on any node.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray

# The check needs no NVLink SHARP or multicast; off, it also runs in VMs that lack multicast support.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@ray.remote(num_cpus=0)
class Marks:
    """Where the ranks say what they are about to do (rank → facts)."""

    def __init__(self) -> None:
        self.marks: dict[str, dict[str, Any]] = {}

    def put(self, key: str, facts: dict[str, Any]) -> None:
        self.marks[key] = facts

    def get(self) -> dict[str, dict[str, Any]]:
        return dict(self.marks)


def create_colocated_worker_cls() -> type:
    """Named as verl names it: the class is ``create_colocated_worker_cls.<locals>.WorkerDict``."""

    class WorkerDict:
        def __init__(self, shape: str, hold_s: float, nccl_timeout_s: float, port: int, marks: Any) -> None:
            self.rank = int(os.environ["RANK"])
            self.world = int(os.environ["WORLD_SIZE"])
            self.shape, self.hold_s, self.nccl_timeout_s, self.port = shape, hold_s, nccl_timeout_s, port
            self.marks = marks
            self.gpu = shape != "single" or self.rank == 0
            self.cycles_per_s: float | None = None

        def _mark(self, what: str, **kw: Any) -> None:
            ctx = ray.get_runtime_context()
            facts = {"rank": self.rank, "pid": os.getpid(), "t": time.time(), "actor_id": ctx.get_actor_id(),
                     "actor_name": ctx.get_actor_name(), "node_id": ctx.get_node_id(),
                     "gpu_ids": [str(g) for g in ray.get_gpu_ids()], **kw}
            ray.get(self.marks.put.remote(f"{what}:{self.rank}", facts))

        def actor_rollout_init_model(self) -> dict[str, Any]:
            from datetime import timedelta

            import torch
            import torch.distributed as dist

            if not self.gpu:  # the single-GPU shape's CPU peer
                self._mark("init")
                return {"rank": self.rank}
            torch.cuda.set_device(0)  # Ray's CUDA_VISIBLE_DEVICES leaves each rank its one GPU
            dev = torch.device("cuda", 0)
            world = 1 if self.shape == "single" else self.world
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{self.port}", rank=self.rank,
                                    world_size=world, timeout=timedelta(seconds=self.nccl_timeout_s), device_id=dev)
            self.ballast = torch.empty((1 + self.rank) << 30, dtype=torch.uint8, device=dev)  # a visible footprint
            x = torch.ones(1 << 20, device=dev)
            for _ in range(4):  # collectives #1-4
                dist.all_reduce(x)
            info = {"rank": self.rank, "x0": float(x[0].item()), "mem_allocated": torch.cuda.memory_allocated()}
            if self.shape == "single":
                # the GPU's clock in cycles/s, for torch.cuda._sleep (a kernel that spins N cycles)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                torch.cuda._sleep(200_000_000)
                b.record()
                b.synchronize()
                self.cycles_per_s = 200_000_000 / (a.elapsed_time(b) / 1000.0)
            self._mark("init", **info)
            return info

        def generate_sequences(self, seconds: float) -> None:
            time.sleep(seconds)

        def actor_rollout_update_actor(self) -> float | None:
            import torch
            import torch.distributed as dist

            if not self.gpu or (self.shape == "straggler" and self.rank == self.world - 1):
                self._mark("hang", does="generate_sequences")
                self.generate_sequences(self.hold_s)  # the straggler: never reaches collective #5
                return None
            y = torch.ones(1 << 24, device="cuda")
            if self.shape == "mismatch" and self.rank == 1:
                out = [torch.empty(1 << 10, device="cuda") for _ in range(self.world)]
                self._mark("hang", does="all_gather")
                dist.all_gather(out, y[: 1 << 10].contiguous())  # collective #5 here: all_gather
                return float(sum(o.sum() for o in out).item())  # waits here on the GPU
            self._mark("hang", does="all_reduce")
            dist.all_reduce(y)  # collective #5: all_reduce (returns at once for a group of one)
            if self.shape == "single":
                n = 64
                cycles = int(self.hold_s * (self.cycles_per_s or 1.5e9) / n)
                for _ in range(n):  # the GPU stays busy for hold_s
                    torch.cuda._sleep(cycles)
            return float(y.sum().item())  # waits here on the GPU

    return WorkerDict


@ray.remote(num_cpus=0)
class TaskRunner:
    """The controller: one placement group, one worker per rank, init, then the step that hangs."""

    def run(self, cfg: dict[str, Any]) -> list[Any]:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        world, shape = cfg["world"], cfg["shape"]
        gpus = [0 if shape == "single" and r > 0 else 1 for r in range(world)]
        pg = placement_group([{"CPU": 1, "GPU": g} if g else {"CPU": 1} for g in gpus], strategy="PACK",
                             name=f"{cfg['prefix']}_pool_0")
        ray.get(pg.ready(), timeout=120)
        worker_cls = ray.remote(create_colocated_worker_cls())
        workers = []
        for r in range(world):
            env = {"RANK": str(r), "WORLD_SIZE": str(world), "WG_PREFIX": cfg["prefix"],
                   "RAY_LOCAL_WORLD_SIZE": str(world), **SAFE_ENV, **cfg["fr_env"]}
            w = worker_cls.options(
                name=f"{cfg['prefix']}WorkerDict_0:{r}", num_cpus=1, num_gpus=gpus[r],
                runtime_env={"env_vars": env},
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r),
            ).remote(shape, cfg["hold_s"], cfg["nccl_timeout_s"], cfg["port"], cfg["marks"])
            workers.append(w)
        ray.get([w.actor_rollout_init_model.remote() for w in workers], timeout=300)
        return ray.get([w.actor_rollout_update_actor.remote() for w in workers])
