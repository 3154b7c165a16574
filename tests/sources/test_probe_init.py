"""The probe's ray.init runs where it cannot hold the process: a dump gives up at its timeout and exits."""

from __future__ import annotations

import subprocess
import sys
import time

SCRIPT = r"""
import asyncio, threading, time
from verltop.sources.probe import ProbePool
from verltop.sources.pyspy import DumpOptions

def _init(self, node_id):  # as ray.init to a GCS that never answers: it retries for minutes
    threading.Event().wait()

ProbePool._init = _init
pool = ProbePool(DumpOptions(timeout_s=1), schedule_timeout_s=0.5)
t0 = time.monotonic()
d = asyncio.run(pool.dump("node", 1234))
print(round(time.monotonic() - t0, 1), d.error, flush=True)
"""


def test_unreachable_cluster_neither_blocks_the_dump_nor_the_exit():
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    took, err = p.stdout.split(" ", 1)
    assert float(took) < 3 and "connecting to the Ray cluster timed out" in err, p.stdout
    assert wall < 15, f"the process took {wall:.0f} s to exit after the dump gave up"
