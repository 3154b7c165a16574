"""Freed heap back to the OS, now and then, for the long-running views (the TUI and ``verltop watch``), large
blocks kept off the heap, and the garbage collector kept off what start-up made."""

from __future__ import annotations

import gc
import time

TRIM_EVERY_S = 60.0
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_FROM_BYTES = 128 * 1024  # glibc's starting threshold, kept fixed
# allocations between young collections (Python's default: 700), by the job's size. Each young collection walks
# what survived since the last (a build's rows, Textual's strips: ~11 ms at 1,024 actors, 17 ms at 10,000); up
# to ``GC_SMALL_JOB`` actors one ran every ~3 s at 10,000 and runs every ~15 s at 30,000 (a tenth of the TUI's
# CPU less). At 10,000 actors the larger one was within the noise (0.97 of the cycle) and the long run's peak
# RSS is already over its budget, so it stays 10,000 there
GC_YOUNG = 10_000
GC_YOUNG_SMALL = 30_000
GC_SMALL_JOB = 2_500
_SETTLED: list[bool] = []


class HeapTrim:
    """``tick()`` often; at most every ``every_s`` it hands freed heap back to the OS. Parsing multi-MB
    answers every few seconds, from several threads, fragments glibc's arenas: without it RSS crept
    ~0.1–1.5 MiB a minute over soaks with a constant number of live objects."""

    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self.every_s = every_s
        fix_mmap_threshold()
        self._last = time.monotonic()

    def tick(self) -> None:
        if time.monotonic() - self._last > self.every_s:
            self._last = time.monotonic()
            trim_heap()


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``; nothing elsewhere."""
    _glibc("malloc_trim", 0)


def fix_mmap_threshold() -> None:
    """Keep glibc's mmap threshold at 128 KiB. By default it rises to the size of each large block freed (up to
    32 MiB), so once a multi-MB answer has been parsed and freed, the next ones are carved out of the heap, where
    the small objects made meanwhile pin them: at 10,000 actors that held ~20 MB more (RSS over 130 s, 198 MB
    against 176 MB). Kept fixed, each large buffer is its own mapping, unmapped when freed."""
    _glibc("mallopt", M_MMAP_THRESHOLD, MMAP_FROM_BYTES)


def _glibc(name: str, *args: int) -> None:
    try:
        import ctypes

        getattr(ctypes.CDLL("libc.so.6"), name)(*args)
    except (OSError, AttributeError):
        pass  # not glibc


def young_threshold(actors: int) -> int:
    """The young generation's threshold for a job of ``actors`` actors."""
    return GC_YOUNG_SMALL if actors <= GC_SMALL_JOB else GC_YOUNG


def fit_gc(actors: int) -> None:
    """Once settled (``settle_gc``), the young threshold for the job's size now (after each snapshot shown: a job
    may grow while shown)."""
    if _SETTLED:
        young = young_threshold(actors)
        thresholds = gc.get_threshold()
        if thresholds[0] != young:
            gc.set_threshold(young, *thresholds[1:])


def settle_gc() -> None:
    """Once per process, once the first view is up: move what start-up made (modules, classes, the app's
    widgets: ~120,000 objects) out of the collector's reach (``gc.freeze``), and collect the young generation
    less often. At 10,000 actors each full collection walked them all again (70 ms, every few polls) and the
    collector took a quarter of the view's CPU; the data itself is freed by reference counting as before.
    The young threshold is the larger job's until ``fit_gc`` fits it to the job's size."""
    if _SETTLED:
        return
    _SETTLED.append(True)
    gc.collect()
    gc.freeze()
    _, mid, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, mid, old)
