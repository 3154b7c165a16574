"""Where a TP worker loads (or receives) weights; ``_load_weights`` hangs on the worker told to."""

from __future__ import annotations

import time


def load_weights(hang: bool) -> None:
    _load_weights(hang)


def _load_weights(hang: bool) -> None:
    while hang:
        time.sleep(0.5)  # a weight bucket that never arrives
