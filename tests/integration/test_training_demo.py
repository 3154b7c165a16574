"""verl's own metrics on the demo's real verl job (local Ray cluster, gloo), whose controller logs each step
through verl's ``Tracking`` (console backend into the TaskRunner's log, file backend into a JSONL beside it):
the metrics verltop reads from the log equal what was logged, step by step; a NaN grad norm planted with the
demo's N request is flagged at its step and nothing else on the logged training metrics; the agent-loop worker
that is always late is named with its lag; ``verltop watch``'s engine writes an ``anomaly`` and a ``slow``
incident; the recording keeps the metrics and a replay shows them.

One test, on the session's demo cluster (no cluster of its own): the steps it waits for serve every check.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import pytest

from tests.wait import wait_until, wait_until_async
from verltop.analysis.stalls import StallSettings
from verltop.demo.rollout import LATE_WORKER, LATE_WORKER_S
from verltop.engine import oneshot
from verltop.engine.monitor import Intervals, Monitor
from verltop.engine.recording_format import SEGMENTS
from verltop.engine.recording_reader import Recording
from verltop.engine.watch import Watcher, WatchSettings
from verltop.sources.config import Endpoint
from verltop.text.contract import snapshot_json
from verltop.text.training import slow_tag

pytestmark = pytest.mark.ray

IV = Intervals(actors_s=1.0, tasks_s=1.0, nodes_s=5.0, node_detail_s=5.0, timeout_s=10.0)
LATE = f"agent_loop_worker_{LATE_WORKER}"


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b):
        return (a is None or not math.isfinite(a)) and (b is None or not math.isfinite(b))
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def _incidents(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "incidents").glob("*/incident.json"))]


async def test_metrics_anomaly_slow_rank_and_incidents(demo, tmp_path):
    if demo.hung():
        demo.release_hang()
    wait_until(lambda: not demo.hung(), 60, "the demo healthy", step=0.5, detail=demo.progress)
    endpoint = Endpoint(demo.address, "--address", demo.token, "demo")
    mon = Monitor(endpoint, IV, use_local=True)
    w = Watcher(mon, WatchSettings(dir=tmp_path / "w", clear_after_s=600, before_s=30), say=lambda _l: None)
    stop = asyncio.Event()
    run = asyncio.create_task(w.run(stop))
    try:
        first = await wait_until_async(lambda: (s := mon.latest) is not None and s.training is not None and s,
                                       60, "verl's metrics read from the TaskRunner's log", step=0.5)
        seen_from = first.training.last_step
        assert first.training.source == "actor_log" and first.training.actor_name
        demo.request_nan()
        snap = await wait_until_async(
            lambda: (s := mon.latest) is not None and s.training is not None
            and any(a.kind == "nan" for a in s.training.anomalies if a.step > seen_from)
            and any(r.actor_name == LATE for r in s.slow_ranks) and s, 120,
            "the planted NaN flagged and the late agent-loop worker named", step=0.5,
            detail=lambda: (mon.latest.training.last_step if mon.latest and mon.latest.training else None,
                            mon.latest.slow_ranks if mon.latest else None))
        t = snap.training
        logged = demo.logged_metrics()
        nan_steps = [s for s, d in logged.items() if s > seen_from and d.get("actor/grad_norm") is None]
        nan = [a for a in t.anomalies if a.kind == "nan" and a.step > seen_from]
        assert [(a.step, a.metric) for a in nan] == [(nan_steps[0], "actor/grad_norm")]
        # every metric of every step read equals what was logged (NaN/inf as null in the JSONL)
        checked = 0
        for name, pts in t.metrics.items():
            for step, v in pts:
                assert _same(v, logged[step][name]), (name, step, v, logged[step][name])
                checked += 1
        assert checked >= 2 * len(logged[t.last_step]) and set(logged[t.last_step]) == {k for k, p in t.metrics.items() if p[-1][0] == t.last_step}
        # healthy noise raises nothing: no anomaly on the logged training statistics besides the NaN (the
        # demo's timings are its real ones, on a shared machine: they are not asserted on)
        others = [a for a in t.anomalies if a.step > seen_from and a.kind != "nan"
                  and not a.metric.startswith(("timing_s/", "perf/"))]
        assert others == []
        js = snapshot_json(snap)["training"]
        assert dict(js["metrics"]["actor/grad_norm"])[nan[0].step] is None
        assert any(a["kind"] == "nan" and "actor/grad_norm" in a["detail"] for a in js["anomalies"])
        # the late worker: last in gen, by about its planted delay
        late = next(r for r in snap.slow_ranks if r.actor_name == LATE)
        print(f"\nslow rank: {late}")
        assert late.phase == "gen" and late.steps >= 3 and 0.6 * LATE_WORKER_S <= late.lag_s <= 3 * LATE_WORKER_S
        assert slow_tag(late).endswith(" gen") and slow_tag(late).startswith("+")
        # watch: one anomaly incident naming the metric and its step, one slow incident
        # (another metric's anomaly may open an incident of its own first: the demo's timings on a busy machine)
        incs = await wait_until_async(
            lambda: (d := _incidents(tmp_path / "w")) and "slow" in {x["kind"] for x in d}
            and any(x["kind"] == "anomaly" and (x["anomaly"] or {}).get("metric") == "actor/grad_norm" for x in d)
            and d, 30, "the grad norm's anomaly incident and the slow incident", step=0.5,
            detail=lambda: [(x["kind"], (x["anomaly"] or {}).get("metric")) for x in _incidents(tmp_path / "w") or []])
        anomaly = next(x for x in incs if x["kind"] == "anomaly" and x["anomaly"]["metric"] == "actor/grad_norm")
        assert "actor/grad_norm" in anomaly["summary"] and f"step {nan[0].step}" in anomaly["summary"]
        assert anomaly["anomaly"]["step"] == nan[0].step and anomaly["recording"] == "recording.vtr"
        slow = next(x for x in incs if x["kind"] == "slow")
        assert LATE in slow["summary"] and slow["slow_rank"]["phase"] == "gen"
        # `verltop snapshot --json` reads them once too
        one = await oneshot.snapshot(oneshot.monitor(endpoint, IV, StallSettings(), use_local=False))
        doc = snapshot_json(one)
        assert doc["training"]["last_step"] >= nan[0].step and doc["training"]["source"] == "actor_log"
        assert any(a["kind"] == "nan" and a["step"] == nan[0].step for a in doc["training"]["anomalies"])
    finally:
        stop.set()
        await asyncio.wait_for(run, 60)
    # the recording keeps the metrics; a replay shows them
    rec = Recording.open(tmp_path / "w" / SEGMENTS)
    try:
        replayed = rec.cursor().goto_time(time.time())
    finally:
        rec.close()
    assert replayed is not None and replayed.training is not None
    assert any(a.kind == "nan" and a.step == nan[0].step for a in replayed.training.anomalies)
    assert any(r.actor_name == LATE for r in replayed.slow_ranks)
