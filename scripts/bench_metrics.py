"""What ``verltop watch --metrics-port`` costs at 1,024 ranks: a scrape's time and the endpoint's memory.

    python -m scripts.bench_metrics            # from the repository root (about a minute on 2 cores)

The synthetic Ray 2.60 dashboard (tests/fakeray: 128 nodes × 8 GPUs, 1,024 ranks and their controller and
rollout actors) runs in its own process; a real ``Monitor`` polls it as ``verltop watch`` does. Measured:
the collector's time on each new snapshot (its families are built afresh), the same on a snapshot already
scraped, a whole HTTP scrape from another process (``curl``-like: connect, GET, read), the exposition's
size, and the process's RSS before the endpoint started and after the scrapes.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time

from scripts.bench import FakeServer
from scripts.net import free_port

CLIENT = """
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
out = []
for _ in range(n):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read()
    out.append((time.perf_counter() - t0) * 1000)
    time.sleep(0.05)
print(len(body), *out)
"""


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def run(url: str) -> dict:
    from verltop.engine.monitor import Monitor
    from verltop.sources.config import resolve

    mon = Monitor(resolve(url), use_local=False)
    mon.start()
    while mon.snapshots_built < 5:
        await asyncio.sleep(0.5)
    rss0 = rss_mib()
    from verltop.engine.exporter import Exporter, exposition, registry, serve

    exp = Exporter(lambda: mon.latest)
    mon.subscribe(exp.observe)
    reg = registry(exp)
    port = free_port()
    runner = await serve(reg, "127.0.0.1", port)
    rss_up = rss_mib()
    fresh, cached, fresh_cpu = [], [], []
    from dataclasses import replace

    for _ in range(200):
        fresh_snap = replace(mon.latest)  # a new object each time: nothing reused
        exp._snapshot = lambda s=fresh_snap: s
        t0, c0 = time.perf_counter(), time.thread_time()
        exposition(reg)
        fresh.append((time.perf_counter() - t0) * 1000)
        fresh_cpu.append((time.thread_time() - c0) * 1000)
        t0 = time.perf_counter()
        exposition(reg)
        cached.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0)
    exp._snapshot = lambda: mon.latest
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port}/metrics",
                                                "100", stdout=subprocess.PIPE)
    out, _ = await proc.communicate()
    size, *http = out.split()
    rss1 = rss_mib()
    actors = len(mon.latest.actors) if mon.latest else 0
    await runner.cleanup()
    await mon.stop()
    return {"actors": actors, "fresh_ms_median": statistics.median(fresh), "fresh_ms_p95": sorted(fresh)[189],
            "fresh_cpu_ms_median": statistics.median(fresh_cpu), "fresh_cpu_ms_p95": sorted(fresh_cpu)[189],
            "cached_ms_median": statistics.median(cached), "http_ms_median": statistics.median(map(float, http)),
            "http_ms_p95": sorted(map(float, http))[94], "bytes": int(size), "rss_before_mib": rss0, "rss_serving_mib": rss_up,
            "rss_after_mib": rss1}


def main() -> int:
    srv = FakeServer(128, 8)
    try:
        r = asyncio.run(run(srv.url))
    finally:
        srv.stop()
    print(json.dumps(r, indent=1))
    print(f"\n| scrape at {r['actors']:,} actors (1,024 ranks) | measured | target |\n| --- | --- | --- |\n"
          f"| collector on a new snapshot, CPU median / p95 | {r['fresh_cpu_ms_median']:.2f} / {r['fresh_cpu_ms_p95']:.2f} ms | ≤ 5 ms |\n"
          f"| the same, wall clock median / p95 (the engine's threads run meanwhile) | {r['fresh_ms_median']:.2f} / {r['fresh_ms_p95']:.2f} ms | - |\n"
          f"| collector on a snapshot already scraped | {r['cached_ms_median']:.2f} ms | - |\n"
          f"| whole HTTP scrape from another process, median / p95 | {r['http_ms_median']:.2f} / {r['http_ms_p95']:.2f} ms | - |\n"
          f"| exposition size | {r['bytes'] / 1024:.1f} KiB | - |\n"
          f"| engine RSS: before the endpoint / serving / after 500 scrapes | {r['rss_before_mib']:.0f} / "
          f"{r['rss_serving_mib']:.0f} / {r['rss_after_mib']:.0f} MiB | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
