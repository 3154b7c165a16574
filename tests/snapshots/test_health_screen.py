"""SVG snapshot of the health screen (``h``) at 80x24: verl's metrics of 60 steps of a realistic run with a NaN
grad norm planted at step 52 and a pg_loss spike at step 45, and a slow agent-loop worker. Also the main
screen's parts of it: the header's latest metrics and anomaly tag, the slow rank's mark in the table.
Update only after looking at the new picture (``pytest tests/snapshots --snapshot-update``)."""

from __future__ import annotations

import math
from dataclasses import replace

from tests.snapshots.test_more_screens import settle, tree_snapshot
from tests.ui.test_process_rows import OneSnapshot
from verltop.analysis.training import MetricHistory
from verltop.demo.metrics import RunMetrics
from verltop.model import SlowRank, Snapshot
from verltop.text.snapshot import snapshot_text
from verltop.text.training import slow_tag
from verltop.ui.app import VerltopApp
from verltop.ui.widgets.header_bar import header_text
from verltop.ui.widgets.table_rows import layout_rows


def health_snapshot() -> Snapshot:
    h, run = MetricHistory(), RunMetrics(7)
    for s in range(1, 61):
        vals = run.step(s, nan_grad=s == 52)
        if s == 45:
            vals["actor/pg_loss"] = 2.5
        h.add(s, vals)
    snap = tree_snapshot()
    server = snap.actors[0]
    slow = SlowRank(server.actor_id, "agent_loop_worker_3", "agent_loop", 3, "gen", "generate_sequences", 9, 41.2, 10)
    return replace(snap, training=h.view("actor_log", "TaskRunner"), slow_ranks=(slow,))


def test_health_screen(snap_compare):
    """Key metrics first, then the phases' times, each a sparkline with its latest value; red at the spike
    (step 45) and the NaN (✗, step 52); under them the anomalies and the slow rank in words."""
    snap = health_snapshot()
    assert {(a.step, a.metric, a.kind) for a in snap.training.anomalies} == {
        (45, "actor/pg_loss", "spike"), (52, "actor/grad_norm", "nan")}

    async def run(pilot):
        await settle(pilot, lambda: pilot.app.snapshot is not None, "the snapshot shown")
        await pilot.press("h")
        await settle(pilot, lambda: pilot.app.screen.__class__.__name__ == "HealthScreen", "the health screen")
        await pilot.pause()

    assert snap_compare(VerltopApp(OneSnapshot(snap)), terminal_size=(80, 24), run_before=run)


def test_header_and_table_marks():
    snap = health_snapshot()
    text = header_text(snap, False, 80).plain
    assert "step 60 score" in text and "gnorm" in text and "⚠ spike actor/pg_loss@45" not in text
    assert "⚠ NaN actor/grad_norm@52" in text
    rows = layout_rows(snap, "group", "rank")
    marked = [r for r in rows if r.note]
    assert [(r.actor_id, r.note) for r in marked] == [(snap.actors[0].actor_id, "+41s gen")]
    assert slow_tag(snap.slow_ranks[0]) == "+41s gen"
    assert math.isnan(snap.training.latest("actor/grad_norm") or 0.0) is False  # step 60 is finite again
    lines = snapshot_text(snap).splitlines()
    assert lines[1].startswith("verl step 60 score ") and "ANOMALY: actor/grad_norm is nan at step 52" in lines
    assert "SLOW: agent_loop_worker_3 ends gen 41 s after its peers in 9 of the last 10 steps" in lines
