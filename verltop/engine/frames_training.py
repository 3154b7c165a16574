"""A delta frame's form of verl's metrics (``Snapshot.training``): only the points and anomalies a new step
added, ``"tr": {"last_step", "keep", "add": {name: [[step, value]...]}, "an": [anomalies]}``, instead of every
metric's window again (~36 KB zlib'd per step for 33 keys). A decoder appends them and keeps the last
``keep`` points of each metric, which is what the view holds. Anything else (a new job, a restart, a metric
gone, anomalies dropped from the front) is stored whole, as any scalar."""

from __future__ import annotations

from typing import Any

from verltop.codec import to_data
from verltop.model import TrainingView


def training_delta(prev: TrainingView | None, cur: TrainingView | None) -> dict[str, Any] | None:
    """The ``"tr"`` of a delta from ``prev`` to ``cur``, or None when ``cur`` must be stored whole."""
    if prev is None or cur is None or (prev.source, prev.actor_name, prev.path) != (cur.source, cur.actor_name,
                                                                                    cur.path):
        return None
    if prev.last_step is None or cur.last_step is None or cur.last_step < prev.last_step:
        return None
    if not set(prev.metrics) <= set(cur.metrics) or cur.anomalies[: len(prev.anomalies)] != prev.anomalies:
        return None
    keep = max((len(p) for p in cur.metrics.values()), default=0)
    add: dict[str, list] = {}
    for k, pts in cur.metrics.items():
        old = prev.metrics.get(k, ())
        last = old[-1][0] if old else None
        new = [p for p in pts if last is None or p[0] > last]
        if (tuple(old) + tuple(new))[-keep:] != pts:
            return None
        if new:
            add[k] = to_data(tuple(new))
    return {"last_step": cur.last_step, "keep": keep, "add": add,
            "an": [to_data(a) for a in cur.anomalies[len(prev.anomalies):]]}


def apply_training(stored: dict[str, Any] | None, tr: dict[str, Any]) -> dict[str, Any] | None:
    """The stored form of the training view (``to_data``) after a delta's ``"tr"``."""
    if stored is None:
        return None
    keep = tr.get("keep") or 0
    metrics = dict(stored.get("metrics") or {})
    for k, add in (tr.get("add") or {}).items():
        metrics[k] = (list(metrics.get(k) or []) + list(add))[-keep:] if keep else list(metrics.get(k) or []) + add
    return {**stored, "last_step": tr.get("last_step"), "metrics": metrics,
            "anomalies": list(stored.get("anomalies") or []) + list(tr.get("an") or [])}
