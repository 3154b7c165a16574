"""Snapshots to record: from the synthetic Ray dashboard (real HTTP, real Monitor, a manual clock) and built
by hand to cover what a long recording meets (actors coming and going, deaths, stalls, outages)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

from tests.analysis.helpers import row
from verltop import codec
from verltop.model import Gpu, Node, Problem, ProcRow, ProcStat, Snapshot, SourceStatus, Stall


async def fake_snapshots(nodes: int = 2, steps: int = 20, dt: float = 2.0, hang_at: int | None = None,
                         seed: int = 1) -> list[Snapshot]:
    """``steps`` snapshots of a fake verl job ``dt`` seconds apart (a hang from step ``hang_at``)."""
    from tests.fakeray.cluster import ClusterConfig, FakeClock, FakeCluster
    from tests.fakeray.server import FakeDashboard
    from verltop.analysis.stalls import StallSettings
    from verltop.engine.monitor import Intervals, Monitor
    from verltop.sources.config import Endpoint

    clk = FakeClock()
    cluster = FakeCluster(ClusterConfig(nodes=nodes, gpus_per_node=8, seed=seed), clock=clk)
    out = []
    with FakeDashboard(cluster) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), Intervals(timeout_s=5), StallSettings(stall_after_s=20),
                      use_local=False, clock=clk)
        try:
            for i in range(steps):
                if hang_at is not None and i == hang_at:
                    cluster.set_hang(rank=1)
                await mon.poll_once(seed=i == 0)
                out.append(mon.snapshot(clk()))
                clk.advance(dt)
                await asyncio.sleep(0)
        finally:
            await mon.stop()
    return out


def _node(i: int, util: float, t: float) -> Node:
    gpus = tuple(Gpu(g, "NVIDIA H200", util + g, 10 << 30, 140 << 30, f"GPU-{i}-{g}", ((1000 + g, 9 << 30, util),))
                 for g in range(2))
    return Node(f"node{i:02d}" * 7, f"10.0.0.{i}", f"host{i}", "ALIVE", i == 0, 20.0 + util / 10, 100 << 30,
                512 << 30, gpus, 1.5, (ProcStat(1000 + i, 50.0 + util, 3 << 30, 1.7e9, "ray::WorkerDict"),))


def synthetic_snapshots(n: int = 60, t0: float = 1.79e9, dt: float = 2.0) -> list[Snapshot]:
    """A job of 2 nodes, a controller and 4 ranks over ``n`` polls: tasks start and end, a hang stalls the
    ranks (peers/median/age/gpu_spin), rank 3 dies, an actor comes and one goes, the dashboard fails."""
    out = []
    for k in range(n):
        t = t0 + k * dt
        step_start = t0 + (k // 10) * 10 * dt
        hung = 20 <= k < 45
        actors = [replace(row("ctl", group=None, rank=None, role="controller", task="run"), task_start_s=t0 - 100,
                          task_running_s=t - (t0 - 100))]
        for r in range(4):
            start = t0 + 20 * dt if hung else step_start
            a = row(f"a{r}", rank=r, gpu=95.0 if hung else 40.0 + r + math.sin(k), pid=2000 + r)
            a = replace(a, task_start_s=start, task_running_s=max(0.0, t - start), cpu_percent=float(k % 7 + r),
                        rss_bytes=(1 << 30) + k * 4096, task_id=f"task-{k // 10}-{r}")
            if hung and k >= 25:
                st = [Stall("peers", running_s=a.task_running_s, method="update_actor", peers=3,
                            peers_done_s=t - (t0 + 21 * dt))]
                if k >= 30:
                    st.append(Stall("median", running_s=a.task_running_s, method="update_actor", median_s=7.5,
                                    ratio=a.task_running_s / 7.5, limit_s=22.5))
                st.append(Stall("gpu_spin", running_s=a.task_running_s, method="update_actor"))
                a = replace(a, stalls=tuple(st))
            if r == 0:  # its inference engine below it, read now and then
                a = replace(a, processes=(ProcRow(3000, 2000, "VLLM::Worker_TP0", float(k % 3), 2 << 30, 0, 30 << 30),),
                            processes_read_at=t0 + (k // 5) * 5 * dt)
            if r == 3 and k >= 40:
                a = replace(a, state="DEAD", task=None, task_id=None, task_start_s=None, task_running_s=None,
                            death_cause="The actor is dead because its worker process has died. SYSTEM_ERROR",
                            stalls=(Stall("dead", state="DEAD", cause="worker died"),))
            actors.append(a)
        if 10 <= k < 50:
            actors.append(row("late", group="ref", rank=0, role="ref", task=None))
        err = Problem("unreachable", "dashboard not reachable at http://x: connection refused",
                      "is Ray running?") if 50 <= k < 55 else None
        sources = (SourceStatus("actors", float(k - 49) * dt if err else 0.4, err, 7.0),
                   SourceStatus("tasks", 0.3, None, 7.0), SourceStatus("nodes", 5.0 + k % 3, None, 33.0))
        nodes = tuple(_node(i, 30.0 + (k % 5) * 10 if i == 0 or k % 2 else 50.0, t) for i in range(2 if k < 55 else 1))
        out.append(Snapshot(t, "http://127.0.0.1:8265", nodes, tuple(actors), "update_actor" if hung else "gen",
                            sources, progress_s=(t - (t0 + 20 * dt)) if hung else 1.0,
                            truncated="actors: 10000 rows only" if k == 33 else None,
                            gpu_note=None if k < 5 else "no NVML: libnvidia-ml.so not found",
                            orphans=(ProcRow(3999, 1, "VLLM::EngineCore", 0.0, 1 << 30, 1, 20 << 30, node_id="n1",
                                             node_ip="10.0.0.1", actor_id="gone"),) if k >= 45 else None))
    return out


def same(a: object, b: object, tol: float = 2e-3) -> bool:
    """Equal as data, floats within ``tol`` (relative times are stored to the millisecond)."""
    return _close(codec.to_data(a), codec.to_data(b), tol)


def _close(x: object, y: object, tol: float) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return isinstance(x, (int, float)) and isinstance(y, (int, float)) and abs(x - y) <= tol
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k], tol) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_close(a, b, tol) for a, b in zip(x, y, strict=True))
    return x == y


def recorded_report(snap: Snapshot):
    """A dump of the synthetic job's hang: ranks 0, 1 wait in all_reduce, rank 2 sleeps (the straggler)."""
    from tests.analysis.helpers import controller_in_get, in_collective, sleeping
    from verltop.analysis.dump import analyse

    targets = [a for a in snap.actors if a.worker_group == "wg" or a.role == "controller"]
    samples = {a.actor_id: [in_collective("all_reduce")] * 3 for a in targets if a.rank in (0, 1, 3)}
    samples["a2"] = [sleeping("_stuck_rollout")] * 3
    samples["ctl"] = [controller_in_get()] * 3
    return analyse(targets, samples, snap.taken_at + 3)


def write_replay_recording(path) -> list[Snapshot]:
    """The synthetic job with what a watch records besides snapshots: an incident when the ranks stall
    (poll 25), the dump taken then, and a dashboard outage (polls 50-54)."""
    from verltop.engine import recording_format as rf
    from verltop.engine.recording_writer import Limits, RecordingWriter

    snaps = synthetic_snapshots(60)
    w = RecordingWriter(path, {"address": "http://127.0.0.1:8265", "source": "test"}, Limits(keyframe_s=20))
    for i, s in enumerate(snaps):
        w.snapshot(s)
        if i == 25:
            w.event(s.taken_at, rf.INCIDENT, {"id": "20260101T000050Z-wg", "stage": "opened",
                                              "started_at": snaps[20].taken_at, "detected_at": s.taken_at,
                                              "groups": ["wg"], "summary": "Stall in phase update_actor of wg."})
        if i == 27:
            w.event(s.taken_at, rf.DUMP, {"group": None, "incident": "20260101T000050Z-wg",
                                          "report": codec.to_data(recorded_report(s))})
        if i == 50:
            w.event(s.taken_at, rf.STATUS, {"problem": codec.to_data(s.sources[0].error), "text": "down"})
    w.close()
    return snaps
