"""Soak: start and stop the engine against the synthetic dashboard again and again, each stop at a random moment
of its polls; a stop that takes more than 10 s is a hang, named with the loops still running.

    python -m scripts.stop_soak                 # 120 s (from the repository root)
    python -m scripts.stop_soak --seconds 600

A cancel lost by ``asyncio.wait_for`` before Python 3.12 (it returns the call's result when the cancel comes as
the call finishes) made about one stop in fifty hang here, the running-task loop polling on; ``sources/aio``
keeps every cancel. Exits 1 where any stop hung.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

from tests.fakeray import FakeCluster, FakeDashboard
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.config import Endpoint

# polls as often as the engine allows: many requests in flight when the stop comes
IV = Intervals(actors_s=0.05, tasks_s=0.05, nodes_s=0.5, node_detail_s=0.05, waiting_s=0.5, timeout_s=5.0)


async def soak(seconds: float, seed: int) -> tuple[int, int]:
    """Stops made and stops hung in ``seconds``."""
    rnd = random.Random(seed)
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=2, speed=10.0, history_s=15.0, report_interval_s=0.2, tick_s=0.1)
    stops = hung = 0
    async with FakeDashboard(c) as fd:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            mon = Monitor(Endpoint(fd.url, "--address", None, None), IV, use_local=False)
            mon.start()
            await asyncio.sleep(rnd.uniform(0.2, 1.0))
            stopping = asyncio.ensure_future(mon.stop())
            done, _ = await asyncio.wait((stopping,), timeout=10.0)
            if not done:
                hung += 1
                running = [t.get_name() for t in mon._tasks if not t.done()]
                print(f"stop {stops}: still stopping after 10 s; running: {', '.join(running) or '?'}", flush=True)
            stops += 1
    return stops, hung


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    stops, hung = asyncio.run(soak(args.seconds, args.seed))
    print(f"{stops} stops, {hung} hung")
    sys.exit(1 if hung else 0)


if __name__ == "__main__":
    main()
