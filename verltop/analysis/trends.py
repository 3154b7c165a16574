"""Per-actor trends: a bounded ring of GPU utilisation, GPU memory, host RSS and GPU power, with memory
high-water marks and growth rates. Pure (the caller passes the time); fed with each snapshot's rows.

An actor is sampled once per bucket (``BUCKET_S``: the node agents report every 5 s anyway) when its row
carries a new reading: the very row object sampled before is the same reading (a helper's RSS comes with its
node's report, minutes apart at 10,000 actors), counted again only every ``RESAMPLE_AFTER`` buckets so that
the ring keeps it. A bucket with no sample reads as the value before it. Growth is the least-squares
slope over the samples in the ring, kept as running sums, so a sample costs the same at any ring size and a
snapshot between buckets only updates the high-water marks. At 1,000 actors: ~3 ms per bucket, ~1 ms per
snapshot; everything an actor's trend holds, 2.9 KB with a GPU and 1.5 KB without (a metric's ring is made
at its first value: at 10,000 actors most are helpers with RSS alone; which slots hold a sample is one int);
an actor of which nothing is known yet (no GPU, its node's workers not read) has no ring until something is.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress

from verltop.model import ActorRow

BUCKET_S = 5.0
BUCKETS = 120  # ten minutes
SPARK_CELLS = 10  # the table's trend column: one cell per minute
METRICS = ("gpu_util", "gpu_mem", "rss", "power")
MIB = 1024 * 1024
_IN_MIB = frozenset({"gpu_mem", "rss"})
NAN = float("nan")
MIN_GROWTH_SAMPLES = 6  # and a minute apart, before a growth rate means anything
RESAMPLE_AFTER = BUCKETS // 2  # buckets: the same reading is sampled again, so that the ring never runs dry
BARS = "▁▂▃▄▅▆▇█"
_ID = operator.attrgetter("actor_id")


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
        if self.n < 2 or d <= 1e-9:
            return None
        return (self.n * self.sxy - self.sx * self.sy) / d


class ActorTrend:
    """One actor's ring: slot ``x % BUCKETS`` holds bucket ``x``, the one of the last ``BUCKETS`` buckets with
    that remainder, when bit ``x % BUCKETS`` of ``sampled`` is set; and its values (percent, MiB, MiB, watts;
    NaN = unknown; a metric without a ring has had no value yet), and its marks."""

    __slots__ = ("due", "first", "fit_gpu", "fit_rss", "growth_gpu", "growth_rss", "last", "low", "minute",
                 "offset", "peak_gpu", "peak_rss", "rings", "row", "sampled", "spark")

    def __init__(self, bucket: int, offset: int = 0) -> None:
        self.first = bucket  # x origin of the fits (keeps the sums small)
        self.last = bucket - 1  # the newest sampled bucket
        self.low = bucket  # the buckets before it have left the fits
        self.row: ActorRow | None = None  # the row sampled last: the same object again is no new reading
        self.sampled = 0  # one bit per slot (not a bucket number per slot: 10,000 actors' rings, ~5 MB)
        self.rings: dict[str, array] = {}
        self.fit_gpu, self.fit_rss = _Fit(), _Fit()
        self.growth_gpu: float | None = None
        self.growth_rss: float | None = None
        self.peak_gpu: int | None = None
        self.peak_rss: int | None = None
        self.spark: str | None = None
        self.minute = -1
        self.offset = offset  # actors redraw their sparkline at different buckets, not all in one snapshot
        self.due = bucket  # the next bucket at which the same row changes anything (``_due``)

    def series(self, metric: str, now_bucket: int | None = None) -> list[float | None]:
        """Oldest first, one value per bucket of the ring ending at ``now_bucket``; a bucket without a sample
        holds the value before it (None: unknown)."""
        ring = self.rings.get(metric)
        if ring is None:
            return [None] * BUCKETS
        last, bits = self.last, self.sampled
        end = last if now_bucket is None else max(last, now_bucket)
        out: list[float | None] = []
        hold: float | None = None
        for x in range(end - BUCKETS + 1, end + 1):  # (all after last - BUCKETS: end >= last)
            if x <= last and bits >> (x % BUCKETS) & 1:
                v = ring[x % BUCKETS]
                hold = None if math.isnan(v) else float(v)
            out.append(hold)
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
    """Every actor's ring. Not thread-safe: the engine serialises calls."""

    def __init__(self) -> None:
        self.actors: dict[str, ActorTrend] = {}
        # the row objects recorded in bucket ``_bucket``: the same row again in the same bucket changes nothing
        # (most rows of a build are the last build's objects; builds come every 2 s, buckets every 5 s)
        self._bucket = -1
        self._done: dict[str, ActorRow] = {}
        # bucket → the actors whose same row changes something then (a sample leaves the window, the sparkline
        # moves on, the reading is counted again): only they are looked at again, not all 10,000 each bucket
        self._wake: dict[int, list[str]] = {}

    def record(self, rows: Iterable[ActorRow], now: float) -> None:
        """Sample the rows at ``now`` (once per bucket per actor) and write each actor's marks back onto its
        row (the rows are not published yet)."""
        b = int(now // BUCKET_S)
        rows = rows if isinstance(rows, (list, tuple)) else list(rows)
        ids = list(map(_ID, rows))
        done, wake = self._done, self._wake
        if b != self._bucket:
            self._bucket = b
            for k in [k for k in wake if k <= b]:
                for aid in wake.pop(k):
                    done.pop(aid, None)
        # in C: only the rows that are not the very objects recorded in this bucket
        for a in compress(rows, map(operator.is_not, map(done.get, ids), rows)):
            done[a.actor_id] = a
            t = self.actors.get(a.actor_id)
            if a.state == "ALIVE":
                if t is None:
                    if (a.gpu_util_percent is None and a.gpu_mem_bytes is None and a.rss_bytes is None
                            and a.gpu_power_w is None):
                        continue  # nothing known of it yet (its node's workers not read): no ring (3 KB)
                    t = self.actors[a.actor_id] = ActorTrend(b, hash(a.actor_id) % (BUCKETS // SPARK_CELLS))
                if b > t.last:
                    if a is t.row and b - t.last < RESAMPLE_AFTER:
                        _move(t, b)  # the same reading (its node's report not read since): the window moves on
                    else:
                        _sample(t, b, a)
                if a.gpu_mem_bytes is not None and (t.peak_gpu is None or a.gpu_mem_bytes > t.peak_gpu):
                    t.peak_gpu = a.gpu_mem_bytes
                if a.rss_bytes is not None and (t.peak_rss is None or a.rss_bytes > t.peak_rss):
                    t.peak_rss = a.rss_bytes
                due = _due(t, a, b)
                if due != t.due:  # (an entry left behind by an earlier due only wakes it once more)
                    t.due = due
                    wake.setdefault(due, []).append(a.actor_id)
            if t is not None:  # a dead actor keeps its marks: they say what it reached
                a.gpu_mem_peak_bytes, a.rss_peak_bytes, a.trend = t.peak_gpu, t.peak_rss, t.spark
                a.gpu_mem_growth_bytes_per_min, a.rss_growth_bytes_per_min = t.growth_gpu, t.growth_rss
        if len(self.actors) > len(ids) or not self.actors.keys() <= set(ids):
            seen = set(ids)
            for aid in [k for k in self.actors if k not in seen]:
                del self.actors[aid]
                done.pop(aid, None)
            if len(done) > len(seen):
                for aid in [k for k in done if k not in seen]:
                    del done[aid]

    def trend(self, actor_id: str, now: float) -> Trend | None:
        t = self.actors.get(actor_id)
        if t is None:
            return None
        b = int(now // BUCKET_S)
        return Trend(BUCKET_S, *(tuple(t.series(m, b)) for m in METRICS))


def _due(t: ActorTrend, a: ActorRow, b: int) -> int:
    """The next bucket after ``b`` at which the row ``a``, if it stays the same object, changes anything: the
    next bucket if it is a reading not sampled yet (its bucket had one); else the first of its oldest sample
    leaving the window, the sparkline's next minute and the reading counted again."""
    if a is not t.row:
        return b + 1
    step = BUCKETS // SPARK_CELLS
    due = min(t.last + RESAMPLE_AFTER, ((b + t.offset) // step + 1) * step - t.offset)
    m = t.sampled
    if m:
        lo = max(t.low, t.last - BUCKETS + 1)  # the window's slots from ``lo`` on: bit ``x % BUCKETS``
        r = lo % BUCKETS
        high = m >> r
        oldest = lo + (high & -high).bit_length() - 1 if high else lo + BUCKETS - r + (m & -m).bit_length() - 1
        due = min(due, oldest + BUCKETS)
    return max(due, b + 1)


def _evict(t: ActorTrend, b: int) -> bool:
    """Take the samples that leave the window at bucket ``b`` out of the fits (a gap of k buckets checks k
    slots); whether there were any."""
    rings, last, first = t.rings, t.last, t.first
    r_gpu, r_rss = rings.get("gpu_mem"), rings.get("rss")
    gone = False
    for x in range(max(t.low, last - BUCKETS + 1), min(b - BUCKETS, last) + 1):
        i = x % BUCKETS
        if t.sampled >> i & 1:
            if r_gpu is not None and not math.isnan(y := r_gpu[i]):
                t.fit_gpu.add(x - first, y, -1)
            if r_rss is not None and not math.isnan(y := r_rss[i]):
                t.fit_rss.add(x - first, y, -1)
            t.sampled &= ~(1 << i)
            gone = True
    t.low = max(t.low, b - BUCKETS + 1)
    return gone


def _move(t: ActorTrend, b: int) -> None:
    """A bucket with no new reading: samples leave the window, the sparkline moves on each minute."""
    if _evict(t, b):
        t.growth_gpu, t.growth_rss = _growth(t.fit_gpu), _growth(t.fit_rss)
    _redraw(t, b)


def _sample(t: ActorTrend, b: int, a: ActorRow) -> None:
    _evict(t, b)
    rings, first = t.rings, t.first
    i = b % BUCKETS
    t.sampled |= 1 << i  # its bucket left the window above (b > last: b - BUCKETS is older than the window)
    for m, v in (("gpu_util", a.gpu_util_percent), ("gpu_mem", a.gpu_mem_bytes), ("rss", a.rss_bytes),
                 ("power", a.gpu_power_w)):
        r = rings.get(m)
        if v is None:
            if r is not None:
                r[i] = NAN
            continue  # still nothing known of it: no ring
        if r is None:
            r = rings[m] = array("f", [NAN]) * BUCKETS
        r[i] = float(v) / MIB if m in _IN_MIB else float(v)
        y = r[i]  # as stored (32 bits): the fit takes out what it put in when the sample leaves
        if m == "gpu_mem":
            t.fit_gpu.add(b - first, y)
        elif m == "rss":
            t.fit_rss.add(b - first, y)
    t.last, t.row = b, a
    t.growth_gpu, t.growth_rss = _growth(t.fit_gpu), _growth(t.fit_rss)
    _redraw(t, b)


def _redraw(t: ActorTrend, b: int) -> None:
    """The sparkline, once a minute (actors at different buckets: ``offset``)."""
    minute = (b + t.offset) // (BUCKETS // SPARK_CELLS)
    if minute != t.minute:
        t.minute = minute
        t.spark = _spark_of(t, b)


def _growth(fit: _Fit) -> float | None:
    if fit.n < MIN_GROWTH_SAMPLES or fit.n * fit.sxx - fit.sx * fit.sx < fit.n * fit.n * 12:  # < ~a minute
        return None
    s = fit.slope()
    return None if s is None else s * MIB * (60.0 / BUCKET_S)


def _spark_of(t: ActorTrend, b: int) -> str | None:
    """The memory sparkline of the table: GPU memory when the actor has some, else RSS; one cell per
    minute (its highest value), scaled to the window's own range."""
    metric = "gpu_mem" if t.fit_gpu.n else "rss"  # a GPU memory sample in the window
    ring = t.rings.get(metric)
    if ring is None:
        return None
    # each cell's highest value, from the samples alone (a helper has a few in the window, not 120 buckets):
    # a bucket without a sample holds the value before it, so a cell also holds what the one before ended on
    last = t.last
    start = max(last, b) - BUCKETS + 1
    per = BUCKETS // SPARK_CELLS
    xs = []
    m = t.sampled
    while m:
        low = m & -m
        m ^= low
        x = start + (low.bit_length() - 1 - start) % BUCKETS
        if x <= last:
            xs.append(x)
    xs.sort()
    cells: list[float | None] = [None] * SPARK_CELLS
    hold: float | None = None
    at = 0  # the cell the held value reaches from
    for x in xs:
        c = (x - start) // per
        if hold is not None:
            for k in range(at, c + 1 if (x - start) % per else c):
                if cells[k] is None or hold > cells[k]:  # type: ignore[operator]
                    cells[k] = hold
        v = ring[x % BUCKETS]
        hold = None if math.isnan(v) else float(v)
        if hold is not None and (cells[c] is None or hold > cells[c]):  # type: ignore[operator]
            cells[c] = hold
        at = c
    if hold is not None:
        for k in range(at, SPARK_CELLS):
            if cells[k] is None or hold > cells[k]:  # type: ignore[operator]
                cells[k] = hold
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
    if hi is None and lo is None and top - bottom < span:  # (nearly) flat: draw it mid-height, not as a wall
        bottom = (top + bottom) / 2 - span / 2
    elif hi is None:
        bottom = top - span
    out = []
    for v in vs:
        if v is None:
            out.append(" ")
            continue
        k = int((v - bottom) / span * (len(BARS) - 1) + 0.5)
        out.append(BARS[max(0, min(len(BARS) - 1, k))])
    return "".join(out)
