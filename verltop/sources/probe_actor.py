"""The probe actor: one per node, pinned there, taking no CPU. It runs py-spy with arguments built by the
caller, reads the process trees below given pids (``procfs.ProcReader``), lists an actor's descendants
(``children.local_descendants``), and runs a plain function it is given (``verltop doctor``).

What it runs must not need verltop on that node: the modules it uses there (stdlib only: ``procfs``,
``children``, ``proc_stat``, ``node_check``) travel with it, pickled by value (``ship_by_value``).
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

from verltop.sources import children, procfs


def ship_by_value(*objs: Any) -> None:
    """Pickle verltop's modules of ``objs`` (functions, classes or modules) by value, not by name, and with them
    every verltop module they use: the node may have no verltop to import them from."""
    from ray import cloudpickle

    todo = [o if isinstance(o, types.ModuleType) else sys.modules.get(getattr(o, "__module__", "") or "")
            for o in objs]
    while todo:
        mod = todo.pop()
        if mod is None or not mod.__name__.startswith("verltop.") or mod.__name__ in _SHIPPED:
            continue
        _SHIPPED.add(mod.__name__)
        cloudpickle.register_pickle_by_value(mod)
        for v in vars(mod).values():
            if isinstance(v, types.ModuleType):
                todo.append(v)
            elif isinstance(v, (types.FunctionType, type)):
                todo.append(sys.modules.get(getattr(v, "__module__", "") or ""))


_SHIPPED: set[str] = set()


def probe_class() -> Any:
    """The probe's Ray actor class (ray is imported here, on first use)."""
    import ray

    ship_by_value(procfs, children)
    reader_cls = procfs.ProcReader
    descendants_of = children.local_descendants

    @ray.remote(num_cpus=0, max_concurrency=64)
    class VerltopProbe:
        """Runs py-spy on its node, reads process trees there, and runs a function it is given."""

        def __init__(self) -> None:
            self._reader: Any = None
            self._lock = threading.Lock()

        def tree(self, roots: list[int], extra: list[int]) -> dict[str, Any]:
            """``ProcReader.read`` on this node; the reader is kept, so CPU % covers the time between calls."""
            with self._lock:
                if self._reader is None:
                    self._reader = reader_cls()
                return self._reader.read(roots, extra)

        def dump(self, args: list[str], timeout_s: float) -> tuple[int, str, str, float]:
            """py-spy with ``args`` (built by the caller: verltop need not be installed on this node)."""
            import os
            import shutil
            import subprocess
            import sys

            exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
            if not os.access(exe, os.X_OK):
                return (-2, "", "py-spy not found", 0.0)
            t0 = time.monotonic()
            try:
                p = subprocess.run([exe, *args], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return (-1, "", f"py-spy did not finish within {timeout_s:g} s (killed)", time.monotonic() - t0)
            return (p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"),
                    time.monotonic() - t0)

        def descendants(self, pids: list[int], limit: int) -> dict[int, list[tuple[int, int, str | None]]]:
            """``pid → [(child, its parent, title)]`` on this node (``children.local_descendants``)."""
            return descendants_of(pids, limit)

        def call(self, fn: Any, *args: Any) -> Any:
            """``fn(*args)`` here; ``fn`` is a plain function shipped by value (``NodeRunner``)."""
            return fn(*args)

    return VerltopProbe


def kill_all(actors: dict[str, Any]) -> None:
    """Kill the probes and forget them (ray is imported only when there are some)."""
    if not actors:
        return
    import ray

    for a in actors.values():
        try:
            ray.kill(a)
        except Exception:  # noqa: BLE001 - already gone
            pass
    actors.clear()
