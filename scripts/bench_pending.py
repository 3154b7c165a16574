"""What watching for pending work costs per poll, on a real local Ray cluster (tests/integration/pending_job.py).

    python -m scripts.bench_pending [--reads 30]     # from the repository root; starts a Ray cluster

Two moments of one cluster: healthy (a placed 2-worker verl group, nothing pending) and stuck (plus a verl
pool that cannot be placed and a second job's pool waiting for resources). For each: the reads the engine
makes (request count, answer bytes, median wall ms per read, on the aiohttp transport the TUI uses), how
often it makes them (``slow_s`` when nothing is pending, every actor poll otherwise) and what that adds per
2 s actor poll; plus the analysis (``build_pending``) time per snapshot. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "tests" / "integration" / "pending_job.py"


class Host:
    def __init__(self) -> None:
        self.token = secrets.token_hex(32)
        env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token,
                   PYTHONPATH=os.pathsep.join(p for p in (str(HOST.parent), os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen([sys.executable, str(HOST), "host"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True, start_new_session=True)
        self.address = self._reply()["dashboard"]

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        r = json.loads(self.proc.stdout.readline())
        assert r.get("ok"), r
        return r

    def cmd(self, cmd: str, **kw: object) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.write('{"cmd": "stop"}\n')
            self.proc.stdin.close()
        self.proc.wait(timeout=90)


async def measure(address: str, token: str, reads: int) -> dict[str, float]:
    from verltop.analysis.pending import build_pending
    from verltop.engine.monitor import Monitor, SourceState
    from verltop.engine.pending import PendingWatch
    from verltop.sources import dashboard as D
    from verltop.sources.config import Endpoint

    mon = Monitor(Endpoint(address, "--address", token, "RAY_AUTH_TOKEN"), use_local=False)
    await mon.poll_once(seed=False, node_details=False)
    actors = mon.src.actors.value or []
    w = PendingWatch(mon.client, SourceState("pending"))
    sizes: dict[str, int] = {}
    times: list[float] = []
    busy = False
    for _ in range(reads):
        t0 = time.perf_counter()
        pgs, tasks = await asyncio.gather(D.fetch_unplaced_placement_groups(mon.client),
                                          D.fetch_pending_tasks(mon.client))
        busy = bool(pgs.value or tasks.value or w.busy(actors))
        if busy:
            await D.fetch_cluster_load(mon.client)
        times.append((time.perf_counter() - t0) * 1000)
    # answer sizes, raw
    for name, path, params in (
        ("pgs", "/api/v0/placement_groups", [("detail", "1"), ("limit", "1000"), ("filter_keys", "state"),
                                             ("filter_predicates", "!="), ("filter_values", "CREATED"),
                                             ("filter_keys", "state"), ("filter_predicates", "!="),
                                             ("filter_values", "REMOVED")]),
        ("tasks", "/api/v0/tasks", [("detail", "1"), ("limit", "500"), ("filter_keys", "state"),
                                    ("filter_predicates", "="), ("filter_values", "PENDING_NODE_ASSIGNMENT")]),
        ("cluster_status", "/api/cluster_status", None),
    ):
        r = await mon.client.get(path, params)
        sizes[name] = len(r.body or b"")
    await w.poll(actors, mon._record, force=True)
    pd = w.data()
    nodes = mon.src.nodes.value or []
    t0 = time.perf_counter()
    for _ in range(200):
        items = build_pending(pd, actors, nodes, time.time())
    analysis_ms = (time.perf_counter() - t0) / 200 * 1000
    await mon.stop()
    read_bytes = sizes["pgs"] + sizes["tasks"] + (sizes["cluster_status"] if busy else 0)
    return {"busy": busy, "requests": 3 if busy else 2, "bytes": read_bytes, "ms": statistics.median(times),
            "p95_ms": sorted(times)[int(len(times) * 0.95) - 1], "analysis_ms": analysis_ms, "items": len(items),
            **{f"bytes_{k}": v for k, v in sizes.items()}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=30)
    args = ap.parse_args()
    h = Host()
    try:
        h.cmd("hold")
        time.sleep(3)
        idle = asyncio.run(measure(h.address, h.token, args.reads))
        h.cmd("infeasible")
        h.cmd("job2")
        time.sleep(12)  # the autoscaler's status (strategy, use per node) is written every few seconds
        stuck = asyncio.run(measure(h.address, h.token, args.reads))
    finally:
        h.stop()
    slow_s, poll_s = 15.0, 2.0
    print("| moment | reads per 2 s poll | requests per read | bytes per read | median ms per read (p95) | "
          "added per 2 s poll | build_pending |")
    print("|---|---|---|---|---|---|---|")
    for name, m, per_poll in (("nothing pending", idle, poll_s / slow_s), ("pool infeasible + pool waiting", stuck, 1.0)):
        print(f"| {name} | {per_poll:.2f} | {m['requests']} | {m['bytes']:.0f} | {m['ms']:.1f} ({m['p95_ms']:.1f}) | "
              f"{m['ms'] * per_poll:.1f} ms, {m['bytes'] * per_poll:.0f} B | {m['analysis_ms']:.3f} ms "
              f"({m['items']} items) |")
    print(f"\nanswer sizes: healthy {idle['bytes_pgs']} B (placement groups), {idle['bytes_tasks']} B (tasks); "
          f"stuck {stuck['bytes_pgs']} B, {stuck['bytes_tasks']} B, cluster status {stuck['bytes_cluster_status']} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
