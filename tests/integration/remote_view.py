"""A view of the scenario cluster that reads another node's processes only when asked, in its own process
(it connects to the cluster through a probe: the pytest process must never become a Ray driver).

    python remote_view.py DASHBOARD NODE_ID ACTOR_ID     → one JSON line of what it saw, step by step
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for tests.wait
from tests.wait import wait_until_async
from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.config import resolve
from verltop.text.contract import actor_json, snapshot_json


async def until(mon: Monitor, ok, timeout: float, what: str):
    """The latest snapshot once ``ok`` holds for it; None when it did not in time (the caller reports it)."""
    try:
        return await wait_until_async(lambda: mon.latest is not None and ok(mon.latest) and mon.latest, timeout,
                                      what, step=0.3)
    except AssertionError:
        return None


async def main(address: str, node_id: str, actor_id: str) -> dict:
    iv = Intervals(actors_s=0.5, tasks_s=1.0, nodes_s=2.0, node_detail_s=2.0, timeout_s=10.0, trees_s=2.0)
    mon = Monitor(resolve(address), iv, StallSettings(), use_local=False)
    shown: list = []
    mon.subscribe(shown.append)
    mon.start()
    out: dict = {}

    def row(s):
        return next((a for a in s.actors if a.actor_id == actor_id), None)

    try:
        s = await until(mon, lambda s: row(s) is not None, 30, "the actor's row")
        n = len(shown)  # a few polls with nothing asked: nothing of the other node is read
        await wait_until_async(lambda: len(shown) >= n + 4, 30, "four more snapshots")
        s = mon.latest
        out["before"] = {"processes": actor_json(row(s))["processes"], "orphans": snapshot_json(s)["orphans"],
                         "ray_imported": "ray" in sys.modules}
        mon.set_focus([node_id])
        out["asked"] = [mon.want_processes([node_id]), mon.want_processes([node_id])]
        s = await until(mon, lambda s: bool(row(s).processes), 90, "the node's tree")
        if s is None:
            out["error"] = str(mon.remote.error)
            return out
        first = row(s).processes_read_at
        out["tree"] = [[p.pid, p.ppid, p.title] for p in row(s).processes]
        out["others_read"] = sorted({a.node_id for a in s.actors if a.processes_read_at is not None})
        s = await until(mon, lambda s: (row(s).processes_read_at or 0) > first, 30, "the tree read again")
        out["reread_after_s"] = None if s is None else round(row(s).processes_read_at - first, 1)
        out["orphans"] = None if s is None else snapshot_json(s)["orphans"]
    finally:
        await mon.stop()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))), flush=True)
