from __future__ import annotations

from verltop.analysis.history import TaskHistory
from verltop.analysis.stalls import StallSettings, TaskView, stalls_for
from verltop.text.contract import stall_json
from verltop.text.stalls import stall_reason, stall_tag


def view(**kw) -> TaskView:
    base = dict(actor_id="a0", group="g", method="m", task_id="t0", running_s=10.0, start_s=990.0, has_gpu=False,
                gpu_util_percent=None, state="ALIVE", death_cause=None)
    base.update(kw)
    return TaskView(**base)


def rules(v, h, now=1000.0, cfg=None):
    return [s.rule for s in stalls_for(v, h, now, cfg or StallSettings())]


def test_absolute_age():
    h = TaskHistory()
    assert rules(view(running_s=301, start_s=699), h) == ["age"]
    assert rules(view(running_s=299), h) == []


def test_k_times_median_needs_three_samples():
    h = TaskHistory()
    for i in range(2):
        h.seed([(f"t{i}", "x", "g", "m", 100.0 * i, 100.0 * i + 5)])
    assert rules(view(running_s=60, start_s=940), h) == []
    h.seed([("t2", "x", "g", "m", 300.0, 305.0)])
    st = stalls_for(view(running_s=60, start_s=940), h, 1000.0, StallSettings())
    assert [s.rule for s in st] == ["median"] and "12× longer than usual" in stall_reason(st[0])


def test_peers_finished_long_ago():
    h = TaskHistory()
    h.observe([("t0", "a0", "g", "m", 900.0), ("t1", "a1", "g", "m", 900.0), ("t2", "a2", "g", "m", 900.0)], 900.0)
    h.observe([("t0", "a0", "g", "m", 900.0)], 950.0)  # a1 and a2 finished at 950
    st = stalls_for(view(start_s=900.0, running_s=100.0), h, 1000.0, StallSettings())
    assert [s.rule for s in st] == ["peers"] and "2 peers finished m 50s ago" in stall_reason(st[0])
    # within the window: no stall yet
    assert rules(view(start_s=900.0, running_s=70.0), h, now=970.0) == []


def test_dead_actor_with_cause():
    st = stalls_for(view(state="DEAD", death_cause="OOM"), TaskHistory(), 1000.0, StallSettings())
    assert st[0].rule == "dead" and "OOM" in stall_reason(st[0])


def test_busy_gpu_is_named_a_wait_not_progress():
    h = TaskHistory()
    st = stalls_for(view(running_s=400, start_s=600, has_gpu=True, gpu_util_percent=100.0), h, 1000.0,
                    StallSettings())
    assert [s.rule for s in st] == ["age", "gpu_spin"]
    # a busy GPU never clears a stall, nor makes one by itself
    assert rules(view(running_s=5, has_gpu=True, gpu_util_percent=100.0), h) == []


def test_gpu_idle_for_the_whole_task():
    h = TaskHistory()
    h.observe([("t0", "a0", "g", "m", 900.0)], 900.0)
    for _ in range(3):
        h.note_gpu("t0", 0.0)
    assert "gpu_idle" in rules(view(start_s=900.0, running_s=100.0, has_gpu=True, gpu_util_percent=0.0), h)


def test_history_is_bounded():
    h = TaskHistory()
    for i in range(2000):
        h.seed([(f"t{i}", f"a{i}", f"g{i % 900}", "m", float(i), float(i) + 1)])
    assert len(h.durations) <= 512 and all(len(d) <= 64 for d in h.durations.values())


# ---------------------------------------------------------------- the texts rendered from the numbers


def test_peers_tag_is_rendered_from_seconds_not_split_from_the_sentence():
    """Peers done 30–90 s ago once read `peers done ss` (the sentence was re-split); every age reads right."""
    h = TaskHistory()
    h.observe([("t0", "a0", "g", "m", 900.0), ("t1", "a1", "g", "m", 900.0)], 900.0)
    h.observe([("t0", "a0", "g", "m", 900.0)], 910.0)  # a1 finished at 910
    for now, tag, ago in ((955.0, "peers done 45s ago", "45s ago"), (1000.0, "peers done 1m30s ago", "1m30s ago"),
                          (4610.0, "peers done 1h01m ago", "1h01m ago")):
        (st,) = stalls_for(view(start_s=900.0, running_s=now - 900.0), h, now, StallSettings(stall_after_s=1e9))
        assert st.rule == "peers" and st.peers == 1 and st.peers_done_s == now - 910.0
        assert stall_tag(st) == tag and stall_reason(st) == f"1 peer finished m {ago}"


def test_sub_second_median_reads_as_a_ratio_not_infinity():
    """On an H200 run a 21 s task against a sub-second median read `running ≫ longer than usual (21 s vs
    median 0 s)`: the numbers are kept, and the texts say what they are."""
    h = TaskHistory()
    for i in range(3):
        h.seed([(f"t{i}", "x", "g", "m", 100.0 * i, 100.0 * i + 0.2)])
    (st,) = stalls_for(view(running_s=21.0, start_s=979.0), h, 1000.0, StallSettings())
    assert st.rule == "median" and st.median_s == 0.2 and round(st.ratio) == 105
    assert stall_tag(st) == "105× median"
    assert stall_reason(st) == "running 105× longer than usual (21s vs median 0.2s)"
    # a median of nothing at all (tasks that finish within a poll): no division, no "0 s"
    h0 = TaskHistory()
    for i in range(3):
        h0.seed([(f"t{i}", "x", "g", "m", 100.0 * i, 100.0 * i)])
    (st0,) = stalls_for(view(running_s=21.0, start_s=979.0), h0, 1000.0, StallSettings())
    assert st0.ratio is None and stall_tag(st0) == "far over median"
    assert stall_reason(st0) == "running far longer than usual (21s; it usually takes under 0.1s)"
    assert stall_json(st)["ratio"] == 105.0 and stall_json(st0)["ratio"] is None


def test_peers_that_failed_in_a_collective_keep_the_straggler_stalled():
    """Its peers' calls failed (a gloo timeout waiting for it): at once, whatever the window, and said so."""
    h = TaskHistory()
    err = "RuntimeError: [gloo] Timed out waiting 3000ms for recv operation to complete"
    assert h.note_failed([("f1", "a1", "g", "m", 900.0, 970.0, err), ("f2", "a2", "g", "m", 900.0, 960.0,
                                                                        "ValueError: unrelated")]) == ["f1"]
    assert h.note_failed([("f1", "a1", "g", "m", 900.0, 970.0, err)]) == []  # seen already
    (st,) = stalls_for(view(start_s=900.0, running_s=100.0), h, 1000.0, StallSettings())
    assert (st.rule, st.state, st.peers) == ("peers", "failed", 1)
    assert stall_tag(st) == "peers failed 30s ago"
    assert stall_reason(st) == f"1 peer failed in m 30s ago waiting for it ({err})"
    # a failure before this call began is not about it
    assert stalls_for(view(start_s=980.0, running_s=20.0), h, 1000.0, StallSettings()) == ()


def test_runs_read_after_they_ended_feed_the_medians_once():
    """A call shorter than a poll is never seen running: the finished runs read later (the timeline's reads)
    feed the medians, so a long-running view knows what a fresh start knows; a run seen ending counts once."""
    h = TaskHistory()
    h.observe([("t0", "a0", "g", "m", 100.0)], 100.0)
    h.observe([], 105.0)  # t0 seen ending: 5 s
    rows = [("t0", "a0", "g", "m", 100.0, 104.0)] + [(f"s{i}", "a0", "g", "m", 200.0 + i, 200.2 + i) for i in range(3)]
    assert h.add_finished(rows) == 3 and h.add_finished(rows) == 0
    assert sorted(h.durations[("g", "m")]) == [0.2, 0.2, 0.2, 5.0] or len(h.durations[("g", "m")]) == 4
    st = stalls_for(view(running_s=60, start_s=940), h, 1000.0, StallSettings())
    assert [s.rule for s in st] == ["median"]


def test_the_seed_and_the_timelines_later_reads_count_a_run_once():
    """The start-up seed's runs, read again by the timeline's refinement, and a run a poll saw running that
    the seed also read finished: each counts once (by task id), so the medians do not drift with reads."""
    h = TaskHistory()
    h.observe([("r0", "a0", "g", "m", 90.0)], 95.0)  # a poll saw r0 running before the seed answered
    seed = [(f"s{i}", "a0", "g", "m", 100.0 + i, 100.2 + i) for i in range(3)] + [("r0", "a0", "g", "m", 90.0, 96.0)]
    h.seed(seed)
    assert len(h.durations[("g", "m")]) == 3 and h.methods_by_actor["a0"]
    assert h.add_finished(seed) == 0  # the timeline reads the same runs again
    h.observe([], 97.0)  # r0 seen ending: counted here, once
    assert len(h.durations[("g", "m")]) == 4 and h.add_finished([("r0", "a0", "g", "m", 90.0, 96.0)]) == 0


def test_peers_finished_by_bisection_equals_a_scan():
    """Each rank's peers that finished after it began, from the method's index shared by one build, equal a
    plain count over the runs (ties, ranks that ran twice, the asking rank's own runs, none after)."""
    import random
    from types import SimpleNamespace

    from verltop.analysis.stalls import _peers_finished

    rnd = random.Random(3)
    for _ in range(200):
        runs = [SimpleNamespace(actor_id=f"a{rnd.randrange(12)}", end_s=float(rnd.randrange(30)))
                for _ in range(rnd.randrange(1, 40))]
        memo: dict = {}
        for _ in range(10):
            me, start = f"a{rnd.randrange(14)}", rnd.randrange(-1, 31) + rnd.choice((0.0, 0.5))
            last_of: dict[str, float] = {}
            for r in runs:
                last_of[r.actor_id] = max(last_of.get(r.actor_id, -1.0), r.end_s)
            after = [e for a, e in last_of.items() if a != me and e > start]
            want = (len(after), max(after)) if after else None
            assert _peers_finished(runs, me, start, memo, ("wg", "m")) == want


def test_peers_failed_by_bisection_equals_a_scan():
    """The peers whose call failed since a rank began (a second of slack), from the method's index shared by
    one build, equal a plain scan of the failures: how many actors, the last failure's time and error (ranks
    that failed twice, the asking rank's own failures, ties, none since)."""
    import random
    from collections import deque
    from types import SimpleNamespace

    from verltop.analysis.history import FinishedRun
    from verltop.analysis.stalls import _peers_failed

    rnd = random.Random(5)
    key = ("wg", "m")
    for _ in range(200):
        fs = deque(FinishedRun(f"a{rnd.randrange(12)}", 0.0, float(rnd.randrange(30)), f"e{i}")
                   for i in range(rnd.randrange(1, 40)))
        hist = SimpleNamespace(failures={key: fs})
        memo: dict = {}
        for _ in range(10):
            me, start = f"a{rnd.randrange(14)}", rnd.randrange(-1, 31) + rnd.choice((0.0, 0.5))
            mine = [f for f in fs if f.actor_id != me and f.end_s >= start - 1.0]
            want = None
            if mine:
                last = max(mine, key=lambda f: f.end_s)
                want = (len({f.actor_id for f in mine}), last.end_s, last.error)
            v = SimpleNamespace(actor_id=me, start_s=start)
            assert _peers_failed(hist, key, v, memo) == want
