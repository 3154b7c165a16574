"""The words for verl's training metrics: each anomaly's sentence, a slow rank's sentence and its cell tag,
the header's metrics and tag."""

from __future__ import annotations

import math

from verltop.model import Anomaly, SlowRank, TrainingView


def num(v: float | None) -> str:
    """A metric value, short: 4 significant digits, nan/inf spelled, "–" unknown."""
    if v is None:
        return "null"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.3g}"
    return f"{v:.4g}"


def secs(v: float) -> str:
    """Seconds as "41s", "2m05s", "1h02m"."""
    v = abs(v)
    if v < 10:
        return f"{v:.1f}s"
    if v < 60:
        return f"{v:.0f}s"
    if v < 3600:
        return f"{int(v // 60)}m{int(v % 60):02d}s"
    return f"{int(v // 3600)}h{int(v % 3600 // 60):02d}m"


def anomaly_sentence(a: Anomaly) -> str:
    """One line that names the metric, the step, the value and the baseline."""
    m, st = a.metric, a.step
    if a.kind == "nan":
        return f"{m} is {a.detail or num(a.value)} at step {st}"
    if a.kind == "spike":
        ratio = f" ({a.value / a.baseline:.1f}x)" if a.value is not None and a.baseline else ""
        return f"{m} spiked to {num(a.value)} at step {st}, baseline {num(a.baseline)}{ratio}"
    if a.kind == "collapse":
        return f"{m} collapsed to {num(a.value)} at step {st}, from a baseline of {num(a.baseline)}"
    if a.kind == "clipped":
        pct = "" if a.value is None else f"{a.value * 100:.0f}% of "
        return f"{pct}responses hit the length limit at step {st} ({m} {num(a.value)} ≥ {num(a.baseline)})"
    if a.kind == "slow_step":
        return f"step {st} took {_s(a.value)}, baseline {_s(a.baseline)} (median of the last 10; {m})"
    if a.kind == "throughput_drop":
        return f"{m} fell to {num(a.value)} at step {st}, baseline {num(a.baseline)}"
    if a.kind == "growing":
        per = "" if a.value is None or a.baseline is None or not a.window else \
            f" ({_signed(a.value - a.baseline, 100 / a.window)} per 100 steps)"
        return f"{m} keeps growing: {_s(a.value)} at step {st}, {_s(a.baseline)} {a.window} steps before{per}"
    return f"{m} {a.kind} at step {st}: {num(a.value)}, baseline {num(a.baseline)}"


def _s(v: float | None) -> str:
    return "–" if v is None or not math.isfinite(v) else secs(v)


def _signed(d: float, scale: float) -> str:
    return ("+" if d >= 0 else "-") + secs(d * scale)


def anomaly_tag(a: Anomaly) -> str:
    """The header's short tag: "NaN actor/grad_norm@12", "spike actor/pg_loss@40"."""
    kind = "NaN" if a.kind == "nan" else a.kind.replace("_", " ")
    return f"{kind} {a.metric}@{a.step}"


def slow_sentence(r: SlowRank) -> str:
    """ "agent_loop_worker_3 ends gen 41 s after its peers in 9 of the last 10 steps"."""
    who = r.actor_name or (f"{r.worker_group} rank {r.rank}" if r.worker_group else (r.actor_id or "a rank"))
    of = f" of the last {r.of_steps}" if r.of_steps else ""
    lag = secs(r.lag_s).replace("s", " s") if r.lag_s < 60 else secs(r.lag_s)
    extra = ""
    if r.detail == "gpu_idle":
        extra = "; its GPU is held but idle while it runs (waiting)"
    elif r.detail == "collective":
        extra = "; its peers wait for it in the collective that closes the phase"
    return f"{who} ends {r.phase} {lag} after its peers in {r.steps}{of} steps{extra}"


def slow_tag(r: SlowRank) -> str:
    """The table cell's mark: "+41s gen"."""
    return f"+{secs(r.lag_s)} {r.phase}"


# Metrics the header shows for the latest step, first found wins per slot.
HEADER_KEYS = (
    ("score", ("critic/score/mean", "critic/rewards/mean")),
    ("loss", ("actor/pg_loss",)),
    ("kl", ("actor/ppo_kl", "actor/kl_loss")),
    ("gnorm", ("actor/grad_norm",)),
    ("ent", ("actor/entropy",)),
    ("step_s", ("timing_s/step", "perf/time_per_step")),
)


def header_metrics(t: TrainingView) -> str:
    """ "step 41 score 0.62 loss -0.013 kl 0.002 gnorm 1.2 ent 0.41 step_s 52" for the latest step."""
    parts = [f"step {t.last_step}"] if t.last_step is not None else []
    for label, keys in HEADER_KEYS:
        for k in keys:
            pts = t.metrics.get(k)
            if pts and pts[-1][0] == t.last_step:
                parts.append(f"{label} {num(pts[-1][1])}")
                break
    return " ".join(parts)


def header_tag(t: TrainingView) -> str | None:
    """The newest anomaly's tag, "+2" when there are more at that step; None without one."""
    if not t.anomalies:
        return None
    last = max(t.anomalies, key=lambda a: a.step)
    more = sum(1 for a in t.anomalies if a.step == last.step) - 1
    return anomaly_tag(last) + (f" +{more}" if more > 0 else "")
