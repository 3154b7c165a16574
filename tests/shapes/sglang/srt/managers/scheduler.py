"""SGLang's scheduler process (``sglang::scheduler_TP<k>``): ``event_loop_normal → recv_requests``; TP0 polls
its input and broadcasts it to the others, which block in ``broadcast_pyobj`` between batches."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from shapes import die_with_parent, set_title, touch
from shapes.sglang.srt.utils.common import broadcast_pyobj


def run_scheduler_process(tp: int, world: int, port: int, directory: str, hang: bool) -> None:
    set_title(f"sglang::scheduler_TP{tp}" if world > 1 else "sglang::scheduler")
    die_with_parent()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=tp, world_size=world,
                            timeout=timedelta(hours=1))
    Scheduler(tp, Path(directory), hang).event_loop_normal()


class Scheduler:
    def __init__(self, tp: int, directory: Path, hang: bool) -> None:
        self.tp = tp
        self.dir = directory
        self.hang = hang
        self.n = 0
        touch(directory / f"ready.s{tp}")

    def event_loop_normal(self) -> None:
        while True:
            for req in self.recv_requests():
                getattr(self, req)()
                if self.tp == 0:
                    touch(self.dir / f"out.{self.n - 1}")

    def recv_requests(self) -> list:
        reqs: list = []
        if self.tp == 0:
            path = self.dir / f"in.{self.n}"
            if path.exists():
                reqs = [path.read_text()]
                self.n += 1
            else:
                time.sleep(0.05)  # recv_pyobj(zmq.NOBLOCK) found nothing
        return broadcast_pyobj(reqs, self.tp)

    def update_weights_from_tensor(self) -> None:
        # TP0 takes the request from the tokenizer manager; the other ranks go back to broadcast_pyobj
        if self.tp == 0:
            while self.hang:
                time.sleep(0.5)
