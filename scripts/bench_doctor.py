"""``verltop doctor`` end to end on real Ray clusters on this machine: one raylet, then three
(``tests/integration/doctor_cluster.py``, the clusters the doctor tests use). Wall time of the whole command
(process start to exit) and its CPU time (user + system of the process, from ``getrusage``), medians.

    flock /work/wt/ray.lock python -m scripts.bench --only doctor     # it starts Ray: hold the cluster lock
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _runs(c, env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "verltop", "doctor", "--json", "--address", c.address],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        report = json.loads(p.stdout) if p.stdout.startswith("{") else None
        if report is None or any(n["error"] is not None for n in report["nodes"]):
            raise RuntimeError(f"doctor failed: {p.stderr[-500:]}")
        walls.append(wall)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return walls, cpus


def bench_doctor(runs: int = 7) -> list[tuple]:
    sys.path[:0] = [str(ROOT / "tests" / "integration")]
    from doctor_host import DoctorCluster

    rows: list[tuple] = []
    for plain, label, target in ((True, "1 node", 2.0), (False, "3 raylets", None)):
        with tempfile.TemporaryDirectory() as d:
            c = DoctorCluster(Path(d), plain=plain)
            try:
                env = c.env()
                if plain:  # no token auth there: no token, no RAY_ variable
                    env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
                _runs(c, env, 1)  # the cluster's first probe workers: not what a user's second run sees
                walls, cpus = _runs(c, env, runs)
            finally:
                c.stop()
        w, cpu = statistics.median(walls), statistics.median(cpus)
        rows.append((f"`doctor --json`, {label} (wall; CPU time of the process)", f"{w:.2f} s; CPU {cpu:.2f} s",
                     f"≤ {target:g} s" if target else "(16 nodes: ≤ 4 s)", w <= target if target else None))
    return rows
