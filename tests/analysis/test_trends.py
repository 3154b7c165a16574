"""Trend rings, memory high-water marks and growth rates."""

from __future__ import annotations

import pytest

from tests.analysis.helpers import row
from verltop.analysis.trends import BUCKET_S, BUCKETS, MIB, Trends, spark

T0 = 1_800_000_000.0


def sample(aid: str = "a1", rss: int | None = None, gpu: int | None = None, util: float | None = None,
           power: float | None = None, state: str = "ALIVE"):
    r = row(aid, state=state)
    r.rss_bytes, r.gpu_mem_bytes, r.gpu_util_percent, r.gpu_power_w = rss, gpu, util, power
    return r


def test_growth_rate_is_the_slope_over_the_ring():
    tr = Trends()
    for i in range(300):  # 10 min at 2 s, RSS +4 MiB every 2 s = 120 MiB/min, GPU memory flat
        r = sample(rss=(2000 + 4 * i) * MIB, gpu=30000 * MIB, util=90.0)
        tr.record([r], T0 + 2.0 * i)
    assert r.rss_growth_bytes_per_min == pytest.approx(120 * MIB, rel=0.02)
    assert r.gpu_mem_growth_bytes_per_min == pytest.approx(0.0, abs=1.0)
    assert r.rss_peak_bytes == (2000 + 4 * 299) * MIB and r.gpu_mem_peak_bytes == 30000 * MIB
    assert r.trend is not None and len(r.trend) == 10


def test_no_growth_rate_before_a_minute_of_samples():
    tr = Trends()
    for i in range(5):
        r = sample(rss=(1000 + i) * MIB)
        tr.record([r], T0 + 2.0 * i)
    assert r.rss_growth_bytes_per_min is None and r.rss_peak_bytes == 1004 * MIB


def test_a_gap_holds_the_value_before_it_and_the_ring_stays_bounded():
    tr = Trends()
    tr.record([sample(rss=100 * MIB, util=50.0)], T0)
    r = sample(rss=200 * MIB, util=70.0)
    tr.record([r], T0 + 60.0)  # nothing changed for a minute: no snapshot was built
    t = tr.trend("a1", T0 + 60.0)
    assert len(t.rss_mib) == BUCKETS
    assert t.rss_mib[-1] == 200 and t.rss_mib[-2] == 100 and t.rss_mib[-12] == 100
    assert t.rss_mib[0] is None  # older than the actor
    assert t.gpu_util[-1] == 70 and t.gpu_mem_mib[-1] is None and t.power_w[-1] is None
    # a day later the ring is still 120 buckets, and only one actor's
    for i in range(2000):
        tr.record([sample(rss=300 * MIB)], T0 + 60 + BUCKET_S * i)
    assert len(tr.actors) == 1 and len(tr.actors["a1"].rings["rss"]) == BUCKETS
    assert tr.trend("a1", T0 + 60 + BUCKET_S * 2000).rss_mib == (300.0,) * BUCKETS


def test_a_dead_actor_keeps_its_marks_and_a_gone_one_is_forgotten():
    tr = Trends()
    tr.record([sample(rss=900 * MIB, gpu=70000 * MIB)], T0)
    dead = sample(state="DEAD")
    tr.record([dead], T0 + 5)
    assert dead.rss_peak_bytes == 900 * MIB and dead.gpu_mem_peak_bytes == 70000 * MIB
    tr.record([sample("a2", rss=1)], T0 + 10)
    assert set(tr.actors) == {"a2"} and tr.trend("a1", T0) is None


def test_power_is_kept_when_known():
    tr = Trends()
    tr.record([sample(util=100.0, power=612.5)], T0)
    assert tr.trend("a1", T0).power_w[-1] == pytest.approx(612.5)


def test_sparkline():
    assert spark([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert spark([None, 5.0, 5.0]) == " ▅▅"  # flat: mid-height, not a wall
    assert spark([100.0, 100.5]) is not None and spark([None]) is None
    assert spark([0.0, 50.0], lo=0.0, hi=100.0) == "▁▅"


def test_no_ring_until_something_is_known_and_gone_ones_are_forgotten():
    tr = Trends()
    tr.record([sample("a1"), sample("a2", rss=100 * MIB)], T0)
    assert set(tr.actors) == {"a2"} and tr.trend("a1", T0) is None
    known = sample("a1", rss=200 * MIB)
    tr.record([known, sample("a2", rss=100 * MIB)], T0 + BUCKET_S)
    assert set(tr.actors) == {"a1", "a2"} and known.rss_peak_bytes == 200 * MIB
    tr.record([sample("a1"), sample("a3")], T0 + 2 * BUCKET_S)  # a2 left; a3 has nothing known
    assert set(tr.actors) == {"a1"}


def test_rows_recorded_again_in_a_bucket_keep_their_marks_and_new_rows_move_them():
    """A build reuses most row objects of the last one: the same object again in the same bucket is taken as
    recorded; a new row of the actor in that bucket still raises its high-water mark, and an actor that left
    is forgotten though it was recorded in this bucket."""
    tr = Trends()
    a, b = sample("a1", rss=100 * MIB), sample("b1", rss=50 * MIB)
    tr.record([a, b], T0)
    assert a.rss_peak_bytes == 100 * MIB
    tr.record([a, b], T0 + 1.0)  # the same objects, the same bucket
    assert a.rss_peak_bytes == 100 * MIB and b.rss_peak_bytes == 50 * MIB
    a2 = sample("a1", rss=300 * MIB)
    tr.record([a2, b], T0 + 2.0)  # a new row of a1 in the same bucket: a new high-water mark
    assert a2.rss_peak_bytes == 300 * MIB
    tr.record([a2], T0 + 3.0)  # b1 left
    assert set(tr.actors) == {"a1"}
    tr.record([a2, b], T0 + 4.0)  # b1 is back, the same row object: a new ring, its mark written again
    assert set(tr.actors) == {"a1", "b1"} and b.rss_peak_bytes == 50 * MIB
    a3 = sample("a1", rss=200 * MIB)
    tr.record([a3, b], T0 + BUCKET_S * 2)  # the next bucket: every row is sampled, the mark stays the highest
    assert a3.rss_peak_bytes == 300 * MIB and tr.trend("a1", T0 + BUCKET_S * 2) is not None


def test_a_metric_gets_its_ring_at_its_first_value_and_reads_unknown_before():
    """A helper actor with RSS alone holds one ring, not four (10,000 actors: ~20 MB); a GPU that shows up
    later starts its ring then, with the buckets before it unknown, and its growth is fitted from then on."""
    tr = Trends()
    for i in range(60):
        gpu = (1000 + 10 * (i - 20)) * MIB if i >= 20 else None  # a GPU from the 20th sample (bucket 10) on
        r = sample(rss=2000 * MIB, gpu=gpu)
        tr.record([r], T0 + BUCKET_S / 2 * i)
    t = tr.actors["a1"]
    assert sorted(t.rings) == ["gpu_mem", "rss"]  # no util or power was ever known
    got = tr.trend("a1", T0 + BUCKET_S / 2 * 59)
    assert got.gpu_util == (None,) * BUCKETS and got.power_w == (None,) * BUCKETS
    known = [v for v in got.gpu_mem_mib if v is not None]
    assert len(known) == 20 and got.gpu_mem_mib[-21] is None and got.rss_mib[-30:] == (2000.0,) * 30
    assert r.gpu_mem_growth_bytes_per_min == pytest.approx(240 * MIB, rel=0.05)  # +20 MiB a 5-s bucket
    only_rss = Trends()
    only_rss.record([sample("h", rss=100 * MIB)], T0)
    assert list(only_rss.actors["h"].rings) == ["rss"]


def test_the_fit_and_the_series_hold_exactly_the_samples_of_the_window():
    """Random gaps, some longer than the ring: the growth fit sums and the drawn series are those of the
    samples of the last ``BUCKETS`` buckets, worked out from scratch after every sample."""
    import random
    from array import array

    rnd = random.Random(7)
    tr = Trends()
    taken: list[tuple[int, float]] = []  # (bucket, MiB)
    b = int(T0 // BUCKET_S)
    for _ in range(600):
        b += rnd.choice((1, 1, 1, 2, 3, 7)) if rnd.random() > 0.01 else BUCKETS + rnd.randrange(40)
        rss = rnd.randrange(100 * MIB, 5000 * MIB)  # not whole MiB: a ring holds 32-bit floats
        tr.record([sample(rss=rss)], b * BUCKET_S)
        taken.append((b, float(array("f", [rss / MIB])[0])))
        t = tr.actors["a1"]
        first = taken[0][0]
        window = [(x, y) for x, y in taken if x > b - BUCKETS]
        assert t.fit_rss.n == len(window)
        assert t.fit_rss.sy == pytest.approx(sum(y for _, y in window), rel=0, abs=1e-6)  # no drift
        assert t.fit_rss.sx == pytest.approx(sum(x - first for x, _ in window))
        at = dict(window)
        want, hold = [], None
        for x in range(b - BUCKETS + 1, b + 1):
            hold = at.get(x, hold)
            want.append(hold)
        assert t.series("rss", b) == want


def test_the_same_reading_again_is_not_a_new_sample_but_the_window_moves_on():
    """A row that is the very object sampled before carries no new reading (a helper's RSS arrives with its
    node's report, minutes apart on a large job): it adds nothing to the fit, the buckets after it read as its
    value, samples still leave the fit as the window moves, and it is counted again every ``RESAMPLE_AFTER``
    buckets so that the ring and the sparkline never run dry."""
    from verltop.analysis.trends import RESAMPLE_AFTER

    tr = Trends()
    b0 = int(T0 // BUCKET_S)
    for k in range(6):  # six readings climbing 10 MiB a bucket
        tr.record([sample(rss=(1000 + 10 * k) * MIB)], (b0 + k) * BUCKET_S)
    same = sample(rss=1100 * MIB)
    tr.record([same], (b0 + 6) * BUCKET_S)
    t = tr.actors["a1"]
    for k in range(7, 7 + 30):  # the same row for 30 buckets: no new reading
        tr.record([same], (b0 + k) * BUCKET_S)
        assert t.fit_rss.n == 7
    assert tr.trend("a1", (b0 + 36) * BUCKET_S).rss_mib[-31:] == (1100.0,) * 31
    for k in range(37, BUCKETS + 10):  # the first readings leave the window, the same row stays
        tr.record([same], (b0 + k) * BUCKET_S)
        if k == BUCKETS + 3:  # between two samples of the same row: the oldest four left the fit all the same
            assert t.fit_rss.n == 8 - 4
    kept = [x for x in range(b0, b0 + BUCKETS + 10) if (t.sampled >> (x % BUCKETS)) & 1 and t.last - BUCKETS < x
            <= t.last]
    assert kept == [b0 + 6 + RESAMPLE_AFTER, b0 + 6 + 2 * RESAMPLE_AFTER] and t.fit_rss.n == 2  # the rest left
    assert same.rss_growth_bytes_per_min is None and same.trend is not None and same.trend.strip()


def test_rows_looked_at_only_when_due_match_rows_looked_at_every_build():
    """A row that stays the same object is looked at again only at the bucket where it changes something (a
    sample leaves the window, the sparkline moves on, the reading is counted again), not every bucket: random
    builds (rows kept, renewed, changed, dead, gone, unknown; gaps) give the same marks, fits, rings and
    sparklines as a store that looks at every row every build."""
    import random
    from dataclasses import replace

    rnd = random.Random(11)
    lazy, every = Trends(), Trends()
    twins: dict[int, object] = {}  # a row of the lazy store → its copy for the other (the same object: the same copy)

    def twin(r):
        if id(r) not in twins:
            twins[id(r)] = (r, replace(r))
        return twins[id(r)][1]

    ids = [f"a{i}" for i in range(8)]
    cur = {aid: sample(aid, rss=1000 * MIB) for aid in ids}
    t = T0
    for step in range(3000):
        t += rnd.choice((2.0, 2.0, 2.0, 0.5, 5.0, 11.0)) if rnd.random() > 0.003 else BUCKETS * BUCKET_S * 1.3
        for k, aid in enumerate(ids):
            move = rnd.random()
            r = cur[aid]
            if move < 0.75 or (k >= 4 and rnd.random() < 0.99):
                continue  # the same object (its node's report not read since; on half of them for minutes)
            if move < 0.85:
                cur[aid] = replace(r)  # a new object, the same reading
            elif move < 0.97:
                cur[aid] = sample(aid, rss=rnd.randrange(900, 1200) * MIB,
                                  gpu=rnd.choice((None, rnd.randrange(1, 80) * 1024 * MIB)), util=rnd.random() * 100)
            elif move < 0.98:
                cur[aid] = sample(aid, rss=r.rss_bytes, state="DEAD")
            elif move < 0.99:
                cur[aid] = sample(aid)  # nothing known of it
            else:
                cur[aid] = sample(aid, rss=500 * MIB)
        rows = [cur[aid] for aid in ids if not (step % 97 == 5 and aid == "a3")]  # a3 gone now and then
        lazy.record(rows, t)
        every._done.clear()
        every._wake.clear()
        every.record([twin(r) for r in rows], t)
        for r in rows:
            w = twin(r)
            marks = lambda x: (x.gpu_mem_peak_bytes, x.rss_peak_bytes, x.trend, x.gpu_mem_growth_bytes_per_min,  # noqa: E731
                               x.rss_growth_bytes_per_min)
            assert marks(r) == marks(w), f"step {step}: {r.actor_id}"
        assert lazy.actors.keys() == every.actors.keys()
        for aid, x in lazy.actors.items():
            y = every.actors[aid]
            assert (x.sampled, x.last, x.spark, x.fit_rss.n, x.fit_gpu.n) == (y.sampled, y.last, y.spark, y.fit_rss.n,
                                                                               y.fit_gpu.n), f"step {step}: {aid}"
            assert x.fit_rss.sy == pytest.approx(y.fit_rss.sy) and x.fit_gpu.sxy == pytest.approx(y.fit_gpu.sxy)
            assert lazy.trend(aid, t) == every.trend(aid, t)
        assert len(lazy._done) <= len(ids) and sum(map(len, lazy._wake.values())) <= 3 * len(ids)


def test_the_sparkline_from_the_samples_alone_is_the_one_of_every_bucket():
    """The sparkline is worked out from the samples in the window (a helper has a few, not 120 buckets): each
    cell the highest value its buckets read, a bucket without a sample holding the one before; random rings
    (gaps, unknown readings, GPU or host memory) draw as the series bucket by bucket does."""
    import random

    from verltop.analysis.trends import SPARK_CELLS, _spark_of, spark

    def reference(t, b):
        s = t.series("gpu_mem" if t.fit_gpu.n else "rss", b)
        per = BUCKETS // SPARK_CELLS
        cells = []
        for i in range(SPARK_CELLS):
            chunk = [v for v in s[i * per:(i + 1) * per] if v is not None]
            cells.append(max(chunk) if chunk else None)
        return spark(cells)

    rnd = random.Random(5)
    for run in range(60):
        tr = Trends()
        b = int(T0 // BUCKET_S)
        gpu = run % 3 == 0
        for _ in range(rnd.randrange(1, 300)):
            b += rnd.choice((1, 1, 2, 5, 13, 40)) if rnd.random() > 0.02 else BUCKETS + 3
            v = None if rnd.random() < 0.1 else rnd.randrange(100, 900) * MIB
            tr.record([sample(rss=None if gpu else v, gpu=v if gpu else None, util=1.0)], b * BUCKET_S)
            t = tr.actors.get("a1")
            if t is not None:
                for later in (b, b + rnd.randrange(0, 30)):
                    assert _spark_of(t, later) == reference(t, later), (run, b, later)
