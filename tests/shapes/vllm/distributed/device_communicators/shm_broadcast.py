"""vLLM's MessageQueue, by its waiter frames: ``dequeue → acquire_read`` spinning until a message is there
(vllm 0.12 spins with sched_yield; here the spin sleeps 10 ms so the test machine stays usable). Messages
are files ``{reader}.{n}`` in a directory."""

from __future__ import annotations

import time
from pathlib import Path


class MessageQueue:
    def __init__(self, directory: Path, reader: str) -> None:
        self.dir = Path(directory)
        self.reader = reader
        self.n = 0

    def dequeue(self) -> str:
        path = self.dir / f"{self.reader}.{self.n}"
        self.acquire_read(path)
        self.n += 1
        return path.read_text()

    def acquire_read(self, path: Path) -> None:
        while not path.exists():
            time.sleep(0.01)
