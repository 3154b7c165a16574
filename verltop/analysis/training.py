"""The history of verl's step metrics: bounded per metric, fed step by step, with the anomalies found as each
step arrives (the rules look at the new step only, so a poll costs the same at step 10 and step 10,000)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from verltop.analysis.anomalies import check_step
from verltop.model import Anomaly, TrainingView

KEEP_STEPS = 1000  # values kept per metric
SHOW_STEPS = 120  # of them in a snapshot (the health screen's sparklines, snapshot --json)
MAX_METRICS = 512  # keys beyond these are ignored (a job that logs per-sample keys)
KEEP_ANOMALIES = 200


class MetricHistory:
    """Every numeric key per step, NaN and inf as they were logged; steps in increasing order (a step at or
    before the last one means the job restarted from a checkpoint: later values are dropped first)."""

    def __init__(self, keep: int = KEEP_STEPS, show: int = SHOW_STEPS, max_metrics: int = MAX_METRICS) -> None:
        self.keep, self.show, self.max_metrics = keep, show, max_metrics
        self.series: dict[str, list[tuple[int, float]]] = {}
        self.last_step: int | None = None
        self.anomalies: list[Anomaly] = []
        self.grown_at: dict[str, int] = {}
        self.version = 0
        self._view: tuple[int, str, str | None, TrainingView] | None = None

    def add_many(self, steps: Iterable[tuple[int, dict[str, float]]]) -> list[Anomaly]:
        """Add logged steps in order; returns the anomalies they brought."""
        found: list[Anomaly] = []
        for step, values in steps:
            found += self.add(step, values)
        return found

    def add(self, step: int, values: dict[str, float]) -> list[Anomaly]:
        """One logged step (a second log call for the same step adds its keys to it)."""
        if self.last_step is not None and step < self.last_step:
            self._rewind(step)
        if step == self.last_step:
            values = {k: v for k, v in values.items() if not self._has(k, step)}
            if not values:
                return []
        found = check_step(step, values, self._earlier, self.grown_at)
        for k, v in values.items():
            pts = self.series.get(k)
            if pts is None:
                if len(self.series) >= self.max_metrics:
                    continue
                pts = self.series[k] = []
            pts.append((step, v))
            if len(pts) > self.keep + self.keep // 4:
                del pts[: len(pts) - self.keep]
        self.last_step = step
        if found:
            self.anomalies += found
            if len(self.anomalies) > KEEP_ANOMALIES:
                del self.anomalies[: len(self.anomalies) - KEEP_ANOMALIES]
        self.version += 1
        return found

    def _has(self, k: str, step: int) -> bool:
        pts = self.series.get(k)
        return bool(pts) and pts[-1][0] == step

    def _earlier(self, name: str, n: int) -> Sequence[float]:
        pts = self.series.get(name)
        if not pts:
            return ()
        out: list[float] = []
        for _, v in reversed(pts[-2 * n:]):
            if math.isfinite(v):
                out.append(v)
                if len(out) == n:
                    break
        out.reverse()
        return out

    def _rewind(self, step: int) -> None:
        for pts in self.series.values():
            i = len(pts)
            while i and pts[i - 1][0] >= step:
                i -= 1
            del pts[i:]
        self.anomalies = [a for a in self.anomalies if a.step < step]
        self.grown_at = {k: s for k, s in self.grown_at.items() if s < step}
        self.last_step = None

    def view(self, source: str, actor_name: str | None, path: str | None = None) -> TrainingView:
        """The last ``show`` steps of every metric (rebuilt only after a new step)."""
        c = self._view
        if c is not None and c[0] == self.version and c[1] == source and c[2] == actor_name:
            return c[3]
        t = TrainingView(source, actor_name, self.last_step,
                         {k: tuple(pts[-self.show:]) for k, pts in self.series.items() if pts},
                         tuple(self.anomalies), path)
        self._view = (self.version, source, actor_name, t)
        return t
