"""vLLM's engine core process (``VLLM::EngineCore_DP0``): idle on its input queue, or in ``collective_rpc``
waiting on its TP workers, which are its own children."""

from __future__ import annotations

import time
from pathlib import Path

from shapes import die_with_parent, set_title, spawn, touch


def run_engine_core(directory: str, world: int, port: int, hang_tp: int) -> None:
    set_title("VLLM::EngineCore_DP0")
    die_with_parent()
    from shapes.vllm.v1.executor.multiproc_executor import MultiprocExecutor

    d = Path(directory)
    workers = [spawn("vllm.v1.executor.multiproc_executor.worker_main", tp, world, port, directory, hang_tp)
               for tp in range(world)]
    for tp in range(world):
        while not (d / f"ready.w{tp}").exists():
            time.sleep(0.05)
    EngineCore(d, MultiprocExecutor(d, world)).run_busy_loop()
    for w in workers:
        w.wait()


class EngineCore:
    def __init__(self, directory: Path, executor) -> None:
        self.dir = directory
        self.model_executor = executor
        self.n = 0
        touch(directory / "ready.engine")

    def run_busy_loop(self) -> None:
        while True:
            method = self._process_input_queue()
            self.model_executor.collective_rpc(method)
            touch(self.dir / f"out.{self.n - 1}")

    def _process_input_queue(self) -> str:
        path = self.dir / f"in.{self.n}"
        while not path.exists():
            time.sleep(0.01)  # EngineCore's input_queue.get()
        self.n += 1
        return path.read_text()
