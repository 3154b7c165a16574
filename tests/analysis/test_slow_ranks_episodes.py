"""Slow ranks from the step timeline, and watch's training episodes (one incident per episode)."""

from __future__ import annotations

from verltop.analysis.episodes import EpisodeTracker
from verltop.analysis.slow_ranks import slow_ranks
from verltop.model import Anomaly, PhaseRun, SlowRank, Snapshot, Step, TrainingView


def _step(i: int, late: str, skew: float, length: float = 20.0, ranks: int = 4) -> Step:
    t0 = 100.0 * i
    runs = (PhaseRun("gen", "agent_loop", "generate_sequences", t0, t0 + length, ranks, skew_s=skew,
                     late_actor_id=late),
            PhaseRun("update_actor", "wg", "update_actor", t0 + 30, t0 + 40, 4, skew_s=0.05, late_actor_id="r2"))
    return Step(i, t0, 60.0, runs, (("gen", length), ("update_actor", 10.0)))


def test_the_worker_last_most_often_is_named_with_its_median_lag():
    steps = [_step(i, "w3" if i % 10 != 4 else "w1", 41.0 + i % 3) for i in range(10)]
    (r,) = slow_ranks(steps)
    assert (r.actor_id, r.phase, r.method, r.steps, r.of_steps) == ("w3", "gen", "generate_sequences", 9, 10)
    assert r.lag_s == 42.0
    assert r.worker_group == "agent_loop"


def test_no_slow_rank_from_noise_turns_or_a_closing_collective():
    rotating = [_step(i, f"w{i % 4}", 5.0) for i in range(10)]  # each worker last in turn
    assert slow_ranks(rotating) == ()
    tiny = [_step(i, "w3", 0.5) for i in range(10)]  # below 1 s: poll noise
    assert slow_ranks(tiny) == ()
    short = [_step(i, "w3", 1.5, length=60.0) for i in range(10)]  # under 10 % of the call
    assert slow_ranks(short) == ()
    assert slow_ranks([_step(i, "w3", 9.0) for i in range(2)]) == ()  # two steps are not a pattern
    running = [*[_step(i, "w3", 9.0) for i in range(3)], Step(3, 300.0, None, (), ())]
    assert len(slow_ranks(running)) == 1  # the running step does not count against it


def _snap(t: float, last: int | None, anomalies=(), slow=()) -> Snapshot:
    tv = None if last is None else TrainingView("actor_log", "TaskRunner", last, {}, tuple(anomalies))
    return Snapshot(t, "x", (), (), None, training=tv, slow_ranks=tuple(slow))


def test_one_incident_per_episode():
    tr = EpisodeTracker(quiet_steps=10, clear_after_s=60)
    old = Anomaly(3, "actor/grad_norm", "spike", 30.0, 0.4)
    opened, _ = tr.update(_snap(0, 40, [old]))
    assert opened == []  # yesterday's anomaly, already in the history when watching began
    nan = [Anomaly(s, "actor/grad_norm", "nan", float("nan"), None, "nan") for s in (41, 42, 43)]
    opened, _ = tr.update(_snap(1, 41, [old, nan[0]]))
    assert [(e.kind, e.anomaly.step) for e in opened] == [("anomaly", 41)]
    opened, closed = tr.update(_snap(2, 43, [old, *nan]))
    assert opened == [] and closed == [] and tr.open[("anomaly", "actor/grad_norm", "nan")].count == 3
    _, closed = tr.update(_snap(3, 53, [old, *nan]))
    assert [e.count for e in closed] == [3]
    again = Anomaly(60, "actor/grad_norm", "nan", float("nan"), None, "nan")
    opened, _ = tr.update(_snap(4, 60, [old, *nan, again]))
    assert [e.anomaly.step for e in opened] == [60]  # a new episode after it ended
    slow = SlowRank("w3", "agent_loop_worker_3", "agent_loop", 3, "gen", "generate_sequences", 9, 41.0, 10)
    opened, _ = tr.update(_snap(5, 60, slow=[slow]))
    assert [e.kind for e in opened] == ["slow"]
    assert tr.update(_snap(30, 60, slow=[slow]))[0] == []
    _, closed = tr.update(_snap(95, 61))
    assert [e.kind for e in closed] == ["slow"]
