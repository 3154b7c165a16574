"""Per-actor trends: a bounded ring of GPU utilisation, GPU memory, host RSS and GPU power, with memory
high-water marks and growth rates. Pure (the caller passes the time); fed once per snapshot.

Samples land in fixed buckets (``BUCKET_S``); a bucket nobody wrote between two samples takes the value
before it (snapshots are built only when something changed, so a gap means "as before"). Growth is the
least-squares slope over the ring, kept as running sums so a sample costs the same at any ring size.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from verltop.model import ActorRow

BUCKET_S = 5.0
BUCKETS = 120  # ten minutes
SPARK_CELLS = 10  # the table's trend column: one cell per minute
METRICS = ("gpu_util", "gpu_mem", "rss", "power")
MIB = 1024 * 1024
NAN = float("nan")
MIN_GROWTH_BUCKETS = 12  # a minute of samples before a growth rate means anything
BARS = "▁▂▃▄▅▆▇█"


class _Fit:
    """Running least-squares sums over (bucket, value) pairs."""

    __slots__ = ("n", "sx", "sxx", "sxy", "sy")

    def __init__(self) -> None:
        self.n, self.sx, self.sy, self.sxy, self.sxx = 0, 0.0, 0.0, 0.0, 0.0

    def add(self, x: float, y: float, sign: int = 1) -> None:
        self.n += sign
        self.sx += sign * x
        self.sy += sign * y
        self.sxy += sign * x * y
        self.sxx += sign * x * x

    def slope(self) -> float | None:
        d = self.n * self.sxx - self.sx * self.sx
        if self.n < 2 or d <= 0:
            return None
        return (self.n * self.sxy - self.sx * self.sy) / d


class ActorTrend:
    """One actor's rings (values: percent, MiB, MiB, watts; NaN = unknown) and marks."""

    __slots__ = ("first", "fits", "last", "minute", "peak_gpu", "peak_rss", "rings", "spark")

    def __init__(self, bucket: int) -> None:
        self.first = bucket  # x origin of the fits (keeps the sums small)
        self.last = bucket - 1  # the newest bucket written
        self.rings = {m: array("f", [NAN]) * BUCKETS for m in METRICS}
        self.fits = {"gpu_mem": _Fit(), "rss": _Fit()}
        self.peak_gpu: int | None = None
        self.peak_rss: int | None = None
        self.spark: str | None = None
        self.minute = -1

    def series(self, metric: str, now_bucket: int | None = None) -> list[float | None]:
        """Oldest first, one value per bucket of the ring ending at ``now_bucket`` (the newest value holds
        past the newest write; None: unknown)."""
        ring = self.rings[metric]
        end = self.last if now_bucket is None else max(self.last, now_bucket)
        hold = ring[self.last % BUCKETS]
        out: list[float | None] = []
        for x in range(end - BUCKETS + 1, end + 1):
            if x > self.last:
                v = hold
            elif x > self.last - BUCKETS and x >= self.first:
                v = ring[x % BUCKETS]
            else:
                v = NAN
            out.append(None if math.isnan(v) else float(v))
        return out


@dataclass(frozen=True, slots=True)
class Trend:
    """What the details screen draws: each metric's ring, oldest first (None = unknown)."""

    bucket_s: float
    gpu_util: tuple[float | None, ...]
    gpu_mem_mib: tuple[float | None, ...]
    rss_mib: tuple[float | None, ...]
    power_w: tuple[float | None, ...]


class Trends:
    """Every actor's ring, sampled from each snapshot's rows. Not thread-safe: the engine serialises calls."""

    def __init__(self) -> None:
        self.actors: dict[str, ActorTrend] = {}

    def record(self, rows: Iterable[ActorRow], now: float) -> None:
        """Sample every row at ``now`` and write its marks back onto it (the rows are not published yet)."""
        b = int(now // BUCKET_S)
        seen = set()
        for a in rows:
            seen.add(a.actor_id)
            t = self.actors.get(a.actor_id)
            if a.state != "ALIVE":
                if t is not None:  # a dead actor keeps its marks: they say what it reached
                    _marks(a, t)
                continue
            if t is None or b - t.last >= BUCKETS:
                old, t = t, ActorTrend(b)
                if old is not None:
                    t.peak_gpu, t.peak_rss = old.peak_gpu, old.peak_rss
                self.actors[a.actor_id] = t
            _sample(t, b, a)
            _marks(a, t)
        if len(seen) != len(self.actors):
            for aid in [k for k in self.actors if k not in seen]:
                del self.actors[aid]

    def trend(self, actor_id: str, now: float) -> Trend | None:
        t = self.actors.get(actor_id)
        if t is None:
            return None
        b = int(now // BUCKET_S)
        return Trend(BUCKET_S, *(tuple(t.series(m, b)) for m in METRICS))


def _val(v: float | int | None, scale: float = 1.0) -> float:
    return NAN if v is None else float(v) / scale


def _sample(t: ActorTrend, b: int, a: ActorRow) -> None:
    vals = {"gpu_util": _val(a.gpu_util_percent), "gpu_mem": _val(a.gpu_mem_bytes, MIB),
            "rss": _val(a.rss_bytes, MIB), "power": _val(a.gpu_power_w)}
    if b < t.last:  # a sample older than the ring's head (clock went back): ignore it
        return
    if b > t.last:
        # close the skipped buckets with the value before them, then open this one
        for gap in range(t.last + 1, b + 1):
            for m in METRICS:
                ring = t.rings[m]
                i = gap % BUCKETS
                old = ring[i]
                fit = t.fits.get(m)
                if fit is not None and not math.isnan(old) and gap - BUCKETS >= t.first:
                    fit.add(gap - BUCKETS - t.first, old, -1)  # evict the value this slot held
                new = vals[m] if gap == b else (ring[(gap - 1) % BUCKETS] if gap > t.first else NAN)
                ring[i] = new
                if fit is not None and not math.isnan(new):
                    fit.add(gap - t.first, new)
        t.last = b
    else:  # the same bucket again: the newest value wins
        for m in METRICS:
            ring = t.rings[m]
            i = b % BUCKETS
            old, new = ring[i], vals[m]
            fit = t.fits.get(m)
            if fit is not None:
                if not math.isnan(old):
                    fit.add(b - t.first, old, -1)
                if not math.isnan(new):
                    fit.add(b - t.first, new)
            ring[i] = new
    if a.gpu_mem_bytes is not None and (t.peak_gpu is None or a.gpu_mem_bytes > t.peak_gpu):
        t.peak_gpu = a.gpu_mem_bytes
    if a.rss_bytes is not None and (t.peak_rss is None or a.rss_bytes > t.peak_rss):
        t.peak_rss = a.rss_bytes
    minute = b // (BUCKETS // SPARK_CELLS)
    if minute != t.minute or t.spark is None:
        t.minute = minute
        t.spark = _spark_of(t, b)


def _marks(a: ActorRow, t: ActorTrend) -> None:
    a.gpu_mem_peak_bytes = t.peak_gpu
    a.rss_peak_bytes = t.peak_rss
    a.gpu_mem_growth_bytes_per_min = _growth(t, "gpu_mem")
    a.rss_growth_bytes_per_min = _growth(t, "rss")
    a.trend = t.spark


def _growth(t: ActorTrend, metric: str) -> float | None:
    fit = t.fits[metric]
    if fit.n < MIN_GROWTH_BUCKETS:
        return None
    s = fit.slope()
    return None if s is None else s * MIB * (60.0 / BUCKET_S)


def _spark_of(t: ActorTrend, b: int) -> str | None:
    """The memory sparkline of the table: GPU memory when the actor has some, else RSS; one cell per
    minute (its highest value), scaled to the window's own range."""
    metric = "gpu_mem" if any(not math.isnan(v) for v in t.rings["gpu_mem"]) else "rss"
    s = t.series(metric, b)
    per = BUCKETS // SPARK_CELLS
    cells = []
    for i in range(SPARK_CELLS):
        chunk = [v for v in s[i * per:(i + 1) * per] if v is not None]
        cells.append(max(chunk) if chunk else None)
    return spark(cells)


def spark(values: Iterable[float | None], lo: float | None = None, hi: float | None = None) -> str | None:
    """A sparkline (``▁▂▃▄▅▆▇█``, a space for unknown), scaled to ``[lo, hi]`` or the values' own range
    (at least 5 % of the top, so noise on a flat line stays flat). None when nothing is known."""
    vs = list(values)
    known = [v for v in vs if v is not None]
    if not known:
        return None
    top = max(known) if hi is None else hi
    bottom = min(known) if lo is None else lo
    span = max(top - bottom, abs(top) * 0.05, 1e-9)
    if hi is None:
        bottom = top - span
    out = []
    for v in vs:
        if v is None:
            out.append(" ")
            continue
        k = int((v - bottom) / span * (len(BARS) - 1) + 0.5)
        out.append(BARS[max(0, min(len(BARS) - 1, k))])
    return "".join(out)
