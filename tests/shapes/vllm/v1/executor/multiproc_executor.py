"""vLLM's MultiprocExecutor worker (``VLLM::Worker_TP<k>``) and the engine side's ``collective_rpc``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from shapes import die_with_parent, set_title, touch
from shapes.vllm.distributed.device_communicators.shm_broadcast import MessageQueue


def worker_main(tp: int, world: int, port: int, directory: str, hang_tp: int) -> None:
    set_title(f"VLLM::Worker_TP{tp}" if world > 1 else "VLLM::Worker")
    die_with_parent()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=tp, world_size=world,
                            timeout=timedelta(hours=1))
    WorkerProc(tp, Path(directory), hang_tp).worker_busy_loop()


class WorkerProc:
    def __init__(self, tp: int, directory: Path, hang_tp: int) -> None:
        self.tp = tp
        self.dir = directory
        self.hang = tp == hang_tp
        self.rpc_broadcast_mq = MessageQueue(directory, f"w{tp}")
        touch(directory / f"ready.w{tp}")

    def worker_busy_loop(self) -> None:
        while True:
            method = self.rpc_broadcast_mq.dequeue()
            getattr(self, method)()
            touch(self.dir / f"resp{self.tp}.{self.rpc_broadcast_mq.n - 1}")

    def update_weights(self) -> None:
        import torch
        import torch.distributed as dist
        from shapes.vllm.model_executor.model_loader.default_loader import load_weights

        load_weights(self.hang)
        dist.all_reduce(torch.ones(1024))  # the TP group syncs after the load


class MultiprocExecutor:
    def __init__(self, directory: Path, world: int) -> None:
        self.dir = directory
        self.world = world
        self.seq = 0
        self.response_mq = [MessageQueue(directory, f"resp{tp}") for tp in range(world)]

    def collective_rpc(self, method: str) -> None:
        for tp in range(self.world):
            touch(self.dir / f"w{tp}.{self.seq}", method)
        self.seq += 1
        self.get_response()

    def get_response(self) -> list[str]:
        # every worker's answer in one comprehension: its frame is the innermost Python frame under the wait
        # (vLLM's reads through such frames too), and it belongs to the wait, not to code of its own
        return [mq.dequeue() for mq in self.response_mq]
