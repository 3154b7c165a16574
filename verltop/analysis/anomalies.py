"""Anomaly rules over verl's step metrics (docs/training.md says each rule in words). Pure: a new step's
values and each metric's earlier values in, ``Anomaly`` values out.

Baselines are robust: medians of the steps before (and the median absolute deviation for spikes), never
means, so one bad step does not move them, and each rule wants several earlier steps before it speaks.
Healthy noise stays quiet: a reward that rises, a loss that wanders, a grad norm that varies by 2x, an
entropy that declines slowly, a validation or checkpoint step that takes longer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import median

from verltop.model import Anomaly

SPIKE_BASE = 20  # steps in a spike's and a collapse's baseline
MIN_BASE = 8  # fewer earlier steps: the rule does not speak yet
SPIKE_MADS = 10.0  # a spike is this many robust standard deviations (1.4826 x MAD) past the median ...
SPIKE_RATIO = 3.0  # ... and past 3x the median and twice the widest swing of the baseline
COLLAPSE_RATIO = 0.25  # entropy below this fraction of its median
CLIP_LIMIT = 0.5  # share of responses cut at the length limit
STEP_BASE = 10  # slow_step and throughput_drop: median of the last 10 steps
MIN_STEP_BASE = 5
SLOW_RATIO = 2.0
THROUGHPUT_RATIO = 0.5
GROW_THIRD = 10  # growing: three blocks of 10 steps, each median 5 % above the one before, the last 1.25x the
GROW_STEP = 1.05  # first and at least 1 s longer
GROW_TOTAL = 1.25
GROW_MIN_S = 1.0
EXTRA_TIME = ("timing_s/testing", "timing_s/save_checkpoint")  # planned work that makes a step longer

# Previous finite values of a metric, newest last (at most ``n``).
Earlier = Callable[[str, int], Sequence[float]]


def nan_watched(name: str) -> bool:
    """Metrics whose NaN or inf is an anomaly: losses, grad norms, KL, scores, rewards, entropy."""
    n = name.lower()
    return any(w in n for w in ("loss", "grad_norm", "kl", "score", "reward", "entropy", "advantages"))


def spike_watched(name: str) -> bool:
    """grad norm, losses and KL: a single step far past its recent median is an anomaly."""
    last = name.rsplit("/", 1)[-1].lower()
    return last.endswith("grad_norm") or "loss" in last or "kl" in last


def _upward(name: str) -> bool:
    """Grad norms and KL only spike upwards (a drop is not an alarm); losses either way."""
    last = name.rsplit("/", 1)[-1].lower()
    return last.endswith("grad_norm") or "kl" in last


def check_step(step: int, values: dict[str, float], earlier: Earlier,
               grown_at: dict[str, int] | None = None) -> list[Anomaly]:
    """The anomalies of one new step. ``earlier(name, n)``: that metric's last ``n`` finite values before this
    step. ``grown_at`` (updated): the step each metric was last called ``growing`` (said once per 30 steps)."""
    out: list[Anomaly] = []
    extra = sum(v for k in EXTRA_TIME if math.isfinite(v := values.get(k, 0.0)))
    for name, v in values.items():
        if not math.isfinite(v):
            if nan_watched(name):
                out.append(Anomaly(step, name, "nan", v, None, _spell(v)))
            continue
        if spike_watched(name):
            a = _spike(step, name, v, earlier(name, SPIKE_BASE))
            if a:
                out.append(a)
        if "entropy" in name.lower():
            base = earlier(name, SPIKE_BASE)
            if len(base) >= MIN_BASE:
                med = median(base)
                if med > 0 and v < COLLAPSE_RATIO * med:
                    out.append(Anomaly(step, name, "collapse", v, med, window=len(base)))
        if name.endswith("clip_ratio") and "response_length" in name and v >= CLIP_LIMIT:
            out.append(Anomaly(step, name, "clipped", v, CLIP_LIMIT))
    step_key = "timing_s/step" if "timing_s/step" in values else "perf/time_per_step"
    v = values.get(step_key)
    if v is not None and math.isfinite(v):
        base = earlier(step_key, STEP_BASE)
        if len(base) >= MIN_STEP_BASE:
            med = median(base)
            if med > 0 and v - extra >= SLOW_RATIO * med and v - med >= 1.0:
                out.append(Anomaly(step, step_key, "slow_step", v, med, window=len(base)))
    v = values.get("perf/throughput")
    if v is not None and math.isfinite(v) and not extra:
        base = earlier("perf/throughput", STEP_BASE)
        if len(base) >= MIN_STEP_BASE:
            med = median(base)
            if med > 0 and v <= THROUGHPUT_RATIO * med:
                out.append(Anomaly(step, "perf/throughput", "throughput_drop", v, med, window=len(base)))
    grown = grown_at if grown_at is not None else {}
    for name, v in values.items():
        if name.startswith("timing_s/") and name not in EXTRA_TIME and math.isfinite(v):
            last = grown.get(name)
            if last is not None and step - last < 3 * GROW_THIRD:
                continue
            a = _growing(step, name, [*earlier(name, 3 * GROW_THIRD - 1), v])
            if a:
                grown[name] = step
                out.append(a)
    return out


def _spike(step: int, name: str, v: float, base: Sequence[float]) -> Anomaly | None:
    if len(base) < MIN_BASE:
        return None
    med = median(base)
    scale = 1.4826 * median(abs(x - med) for x in base)
    dev = v - med if _upward(name) else abs(v - med)
    # a loss that wanders moves its window's median; twice the window's widest swing is never healthy noise
    widest = max(abs(x - med) for x in base)
    limit = max(SPIKE_MADS * scale, (SPIKE_RATIO - 1) * abs(med), 2 * widest, 1e-12)
    if dev > limit:
        return Anomaly(step, name, "spike", v, med, window=len(base))
    return None


def _growing(step: int, name: str, vals: Sequence[float]) -> Anomaly | None:
    if len(vals) < 3 * GROW_THIRD:
        return None
    a, b, c = (median(vals[i * GROW_THIRD:(i + 1) * GROW_THIRD]) for i in range(3))
    if a > 0 and b >= GROW_STEP * a and c >= GROW_STEP * b and c >= GROW_TOTAL * a and c - a >= GROW_MIN_S:
        return Anomaly(step, name, "growing", c, a, window=2 * GROW_THIRD)
    return None


def _spell(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
