"""Freed heap back to the OS, now and then, for the long-running views (the TUI and ``verltop watch``)."""

from __future__ import annotations

import time

TRIM_EVERY_S = 60.0


class HeapTrim:
    """``tick()`` often; at most every ``every_s`` it hands freed heap back to the OS. Parsing multi-MB
    answers every few seconds, from several threads, fragments glibc's arenas: without it RSS crept
    ~0.1–1.5 MiB a minute over soaks with a constant number of live objects."""

    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self.every_s = every_s
        self._last = time.monotonic()

    def tick(self) -> None:
        if time.monotonic() - self._last > self.every_s:
            self._last = time.monotonic()
            trim_heap()


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``; nothing elsewhere."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc
