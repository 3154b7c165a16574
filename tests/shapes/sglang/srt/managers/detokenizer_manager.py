"""SGLang's detokenizer process (``sglang::detokenizer``), idle in ``event_loop → recv_pyobj``."""

from __future__ import annotations

import os

from shapes import die_with_parent, set_title


def run_detokenizer_process() -> None:
    set_title("sglang::detokenizer")
    die_with_parent()
    DetokenizerManager().event_loop()


class DetokenizerManager:
    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def event_loop(self) -> None:
        while True:
            self.recv_pyobj()

    def recv_pyobj(self) -> bytes:
        return os.read(self.r, 1)  # zmq's blocking recv; nothing ever comes
