"""How often pending work is read (real HTTP to replayed Ray 2.60 answers): once per ``slow_s`` on a healthy
job, every actor poll while something waits; and the last cause of an actor in a restart loop."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from aiohttp import web

from tests.replay_server import ReplayDashboard
from verltop.engine.monitor import Intervals, Monitor
from verltop.model import RawActor
from verltop.sources.config import Endpoint
from verltop.text.stalls import stall_reason

FIX = Path(__file__).parent.parent / "fixtures" / "pending"
IV = Intervals(actors_s=0.2, tasks_s=0.2, nodes_s=5.0, node_detail_s=5.0, timeout_s=2.0)


def pg_reads(d: ReplayDashboard) -> int:
    return sum(1 for _, p in d.requests if p.startswith("/api/v0/placement_groups"))


async def run_for(mon: Monitor, seconds: float) -> None:
    mon.start()
    try:
        await asyncio.sleep(seconds)
    finally:
        await mon.stop()


async def test_healthy_job_reads_pending_work_slowly():
    with ReplayDashboard() as d:  # a real 2-GPU verl job, every placement group placed
        mon = Monitor(Endpoint(d.url, "--address", None, None), IV, use_local=False)
        await run_for(mon, 1.5)
        assert pg_reads(d) == 1 and not any(p.startswith("/api/cluster_status") for _, p in d.requests)
        assert mon.snapshot().pending == ()


async def test_pending_work_is_read_on_the_actor_cadence():
    with ReplayDashboard(case=FIX / "infeasible", phase="hung") as d:
        mon = Monitor(Endpoint(d.url, "--address", None, None), IV, use_local=False)
        await run_for(mon, 1.5)
        assert pg_reads(d) >= 4
        snap = mon.snapshot()
        assert [p.kind for p in snap.pending][:1] == ["placement_group"]
        assert snap.pending[0].strategy == "STRICT_PACK"  # the cluster status was read too
        assert not [s for s in snap.sources if s.error]


async def test_restart_loop_reads_the_ended_incarnations_stderr_once():
    seen: list[dict[str, str]] = []

    def logs(req: web.Request) -> web.Response | None:
        if "pid" not in req.query:
            return None
        seen.append(dict(req.query))
        return web.Response(text="Traceback (most recent call last):\n  File \"w.py\", line 9, in step\n"
                                 "RuntimeError: CUDA error: an illegal memory access was encountered\n")

    with ReplayDashboard(case=FIX / "failures", phase="final") as d:
        d.hooks["/api/v0/logs/file"] = logs
        mon = Monitor(Endpoint(d.url, "--address", None, None), IV, use_local=False)
        w = mon.pending
        a = RawActor("a1", "Worker", "ALIVE", "w", "n" * 56, 100, num_restarts=1)
        await w.poll([a], mon._record, force=True)
        assert seen == []
        again = replace(a, pid=200, num_restarts=2)
        await w.poll([again], mon._record)  # a restart verltop saw: pid 100 ended
        assert [(q["pid"], q["node_id"], q["suffix"]) for q in seen] == [("100", "n" * 56, "err")]
        assert w.last_cause["a1"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
        assert w.restarted_at["a1"] <= time.time()
        await w.poll([again], mon._record, force=True)
        assert len(seen) == 1  # once per ended incarnation
        from verltop.analysis.pending import startup_stall

        st = startup_stall(again, None, w.data(), time.time(), 10, 60, 600)
        assert stall_reason(st) == "restarted 2 times; last cause: RuntimeError: CUDA error: an illegal memory access was " \
                            "encountered"
        await mon.stop()
