"""What ``verltop demo`` costs on this machine: start-up time, memory of the whole job, CPU, step time.

    python -m scripts.demo_cost [--steps N]     # from the repository root

Starts the demo (no TUI, no hang), measures ``start_demo`` (cluster up, job at step 1), then over the next
N steps: the job's step time, the CPU of every process of the cluster (Ray's own and the job's), and their
memory (RSS summed, and PSS, which counts shared pages once). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time


def _tree_stats() -> tuple[int, int, float, int, dict[str, int]]:
    """RSS and PSS of this process's descendants (the cluster and its workers), their CPU seconds so far,
    how many there are, and the PSS by kind of process."""
    import psutil

    rss = pss = 0
    cpu = 0.0
    n = 0
    kinds: dict[str, int] = {}
    for p in psutil.Process().children(recursive=True):
        try:
            with p.oneshot():
                mem = p.memory_full_info()
                t = p.cpu_times()
                title = (p.cmdline() or [p.name()])[0]
        except psutil.Error:
            continue
        n += 1
        rss += mem.rss
        pss += getattr(mem, "pss", mem.rss)
        cpu += t.user + t.system
        kind = title.split(".")[0].split(" ")[0].rsplit("/", 1)[-1][:40]
        kinds[kind] = kinds.get(kind, 0) + getattr(mem, "pss", mem.rss)
    return rss, pss, cpu, n, kinds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    from verltop.demo.cluster import start_demo

    t0 = time.monotonic()
    h = start_demo(hang_after=None)
    startup_s = time.monotonic() - t0
    try:
        step0 = h.progress().get("step", 0)
        _, _, cpu0, _, _ = _tree_stats()
        w0 = time.monotonic()
        starts: dict[int, float] = {}
        while h.progress().get("step", 0) < step0 + a.steps + 1:
            s = h.progress().get("step", 0)
            starts.setdefault(s, time.monotonic())
            time.sleep(0.2)
        starts.setdefault(h.progress()["step"], time.monotonic())
        rss, pss, cpu1, n, kinds = _tree_stats()
        wall = time.monotonic() - w0
        steps = sorted(starts)
        durations = [starts[b] - starts[a_] for a_, b in itertools.pairwise(steps) if a_ > step0]
        out = {"startup_s": round(startup_s, 1), "processes": n, "rss_mb": rss >> 20, "pss_mb": pss >> 20,
               "cpu_cores": round((cpu1 - cpu0) / wall, 2),
               "step_s": [round(d, 1) for d in durations],
               "pss_mb_by_kind": {k: v >> 20 for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:12]},
               "cores": os.cpu_count()}
    finally:
        h.stop()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
