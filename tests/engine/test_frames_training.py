"""Recordings keep verl's metrics: a delta frame holds only what a step added, and decodes to the same view."""

from __future__ import annotations

import math

import orjson

from verltop.analysis.training import MetricHistory
from verltop.demo.metrics import RunMetrics
from verltop.engine.frames import DeltaEncoder, SnapshotState
from verltop.model import Snapshot


def _same_view(a, b) -> bool:
    def norm(t):
        return ({k: [(s, None if v is None or not math.isfinite(v) else v) for s, v in p] for k, p in t.metrics.items()},
                [(x.step, x.metric, x.kind) for x in t.anomalies], t.last_step, t.source)
    return norm(a) == norm(b)


def test_deltas_carry_new_points_only_and_decode_to_the_same_view():
    h, run = MetricHistory(show=50), RunMetrics(1)
    enc, dec = DeltaEncoder(), SnapshotState()
    sizes = []
    for s in range(1, 80):
        h.add(s, run.step(s, nan_grad=s == 60))
        snap = Snapshot(float(s), "x", (), (), None, training=h.view("actor_log", "TaskRunner"))
        key, frame = enc.encode(snap, key=s in (1, 70))
        frame = orjson.loads(orjson.dumps(frame))  # as a recording stores it: NaN becomes null
        dec.apply(key, frame)
        got = dec.snapshot().training
        assert _same_view(got, snap.training), s
        if not key:
            assert "tr" in frame and "training" not in frame.get("s", {})
            sizes.append(len(orjson.dumps(frame)))
    assert max(sizes) < 3000  # one step's ~33 points, not 33 x 50
    # a new job: stored whole
    h2 = MetricHistory()
    h2.add(1, run.step(1))
    snap = Snapshot(100.0, "x", (), (), None, training=h2.view("actor_log", "OtherRunner"))
    key, frame = enc.encode(snap, key=False)
    assert "training" in frame["s"] and "tr" not in frame
    dec.apply(key, orjson.loads(orjson.dumps(frame)))
    assert dec.snapshot().training.actor_name == "OtherRunner" and dec.snapshot().training.last_step == 1
