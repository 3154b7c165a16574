"""Real process trees with the titles inference engines give themselves, for the process-tree tests.

    python tests/proc_shapes.py '{"title": "VLLM::EngineCore_DP0", "children": [{"title": "VLLM::Worker_TP0"}]}'

Each process sets its title with setproctitle (as vLLM and SGLang do), starts its children (the same script),
prints one JSON line — the pids of its whole subtree, itself first — once they are all up, then stays:
sleeping, or burning ``busy`` of a core, until killed. ``pdeathsig``: die with the parent (verl sets it on
vLLM's workers, SGLang on its schedulers). Stdlib + setproctitle only.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    # vLLM under verl's vLLMHttpServer (distributed_executor_backend="mp", TP=2)
    "vllm": {"title": "VLLM::EngineCore_DP0", "children": [
        {"title": "VLLM::Worker_TP0", "pdeathsig": True, "busy": 0.05},
        {"title": "VLLM::Worker_TP1", "pdeathsig": True, "busy": 0.05}]},
    # SGLang under verl's SGLangHttpServer: schedulers and the detokenizer are the actor's own children
    "sglang": [{"title": "sglang::scheduler_TP0", "pdeathsig": True}, {"title": "sglang::scheduler_TP1", "pdeathsig": True},
               {"title": "sglang::detokenizer", "pdeathsig": True}],
}


def spawn(spec: dict[str, Any]) -> tuple[subprocess.Popen[str], list[int]]:
    """Start the tree of ``spec``; returns its root process and every pid in it, once all are up."""
    p = subprocess.Popen([sys.executable, __file__, json.dumps(spec)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"process tree {spec.get('title')} did not start (rc={p.poll()})")
    return p, json.loads(line)


def _main(spec: dict[str, Any]) -> None:
    if spec.get("pdeathsig"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    from setproctitle import setproctitle

    setproctitle(spec["title"])
    pids = [__import__("os").getpid()]
    kids = [spawn(c) for c in spec.get("children", ())]
    for _, sub in kids:
        pids += sub
    print(json.dumps(pids), flush=True)
    busy = float(spec.get("busy", 0.0))
    while True:
        if busy:
            t0 = time.monotonic()
            while time.monotonic() - t0 < busy * 0.1:
                pass
            time.sleep(0.1 * (1 - busy))
        else:
            select.select([], [], [], 3600)  # idle in C, as a worker waiting on a socket


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
