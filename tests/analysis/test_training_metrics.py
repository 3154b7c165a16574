"""verl's step metrics: the console and file backends' formats, the bounded history and the anomaly rules."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from verl.utils.logger.aggregate_logger import concat_dict_to_str

from verltop.analysis.anomalies import check_step
from verltop.analysis.training import MetricHistory
from verltop.demo.metrics import RunMetrics
from verltop.sources import metrics_log as M


def test_console_line_as_verl_prints_it():
    data = {"actor/pg_loss": np.float64(-0.0123), "actor/grad_norm": float("nan"), "x/inf": float("inf"),
            "x/neg": -math.inf, "perf/total_num_tokens": np.int64(327680), "actor/lr": 1e-06, "flag": True,
            "not/a/number": "text", "np32": np.float32(0.5)}
    line = concat_dict_to_str(data, step=7)  # verl's own console formatting
    step, got = M.console_line(line)
    assert step == 7
    assert got["actor/pg_loss"] == -0.0123 and got["actor/lr"] == 1e-06 and got["np32"] == 0.5
    assert math.isnan(got["actor/grad_norm"]) and got["x/inf"] == math.inf and got["x/neg"] == -math.inf
    assert got["perf/total_num_tokens"] == 327680 and got["flag"] == 1.0 and "not/a/number" not in got
    assert "np.float64(-0.0123)" in line  # numpy 2 spells its scalars so


def test_console_lines_among_other_output():
    text = ("Creating file logger at /tmp/x.jsonl\n(TaskRunner pid=9) step:3 - a:1 - b:nan\n"
            "\x1b[36m(TaskRunner pid=9)\x1b[0m step:4 - a:2\nvalidation step:5 - a:3\nTraining Progress: 3%\n")
    steps = M.console_lines(text)
    assert [s for s, _ in steps] == [3, 4]
    assert M.file_logger_path(text) == "/tmp/x.jsonl"
    assert M.console_line("step:x - a:1") is None
    assert M.value("np.float64(2.5)") == 2.5 and M.value("abc") is None


def test_jsonl_follower_reads_only_what_was_appended(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"step": 1, "data": {"a": 1.0, "b": null, "s": "x"}}\n{"step": 2, "da')
    f = M.JsonlFollower(str(p))
    (step, vals), = f.read()
    assert step == 1 and vals["a"] == 1.0 and math.isnan(vals["b"]) and "s" not in vals
    with open(p, "ab") as fh:
        fh.write(b'ta": {"a": 2}}\nnot json\n')
    assert f.read() == [(2, {"a": 2.0})]
    assert f.read() == []
    assert f.offset == p.stat().st_size


def _healthy(steps: int, seed: int) -> MetricHistory:
    h, run = MetricHistory(), RunMetrics(seed)
    for s in range(1, steps + 1):
        vals = run.step(s)
        if s % 50 == 0:  # a validation step: longer, planned
            vals["timing_s/testing"] = 30.0
            vals["timing_s/step"] += 30.0
            vals["perf/time_per_step"] += 30.0
        h.add(s, vals)
    return h


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_anomaly_on_healthy_noise(seed):
    h = _healthy(400, seed)
    assert h.anomalies == [], [(a.step, a.metric, a.kind) for a in h.anomalies]
    assert len(h.series["actor/grad_norm"]) <= h.keep + h.keep // 4


def test_planted_anomalies_flagged_at_their_step():
    h, run = MetricHistory(), RunMetrics(5)
    plant = {40: ("actor/grad_norm", math.nan), 50: ("actor/grad_norm", 30.0), 60: ("actor/pg_loss", 4.0),
             70: ("actor/entropy", 0.01), 80: ("response_length/clip_ratio", 0.62), 90: ("timing_s/step", 120.0),
             100: ("perf/throughput", 10.0), 110: ("critic/score/mean", math.inf)}
    for s in range(1, 121):
        vals = run.step(s)
        if s in plant:
            k, v = plant[s]
            vals[k] = v
        h.add(s, vals)
    got = {(a.step, a.metric, a.kind) for a in h.anomalies}
    assert got == {(40, "actor/grad_norm", "nan"), (50, "actor/grad_norm", "spike"), (60, "actor/pg_loss", "spike"),
                   (70, "actor/entropy", "collapse"), (80, "response_length/clip_ratio", "clipped"),
                   (90, "timing_s/step", "slow_step"), (100, "perf/throughput", "throughput_drop"),
                   (110, "critic/score/mean", "nan")}
    nan = next(a for a in h.anomalies if a.step == 110)
    assert nan.detail == "inf"
    spike = next(a for a in h.anomalies if a.step == 50)
    assert 0.2 < spike.baseline < 0.6


def test_growing_phase_time_said_once():
    h, run = MetricHistory(), RunMetrics(3)
    for s in range(1, 101):
        vals = run.step(s)
        vals["timing_s/update_weights"] = 2.0 + 0.4 * s + run.rng.uniform(-0.5, 0.5)  # +40 s per 100 steps
        h.add(s, vals)
    grow = [a for a in h.anomalies if a.kind == "growing"]
    assert grow and all(a.metric == "timing_s/update_weights" for a in grow)
    assert grow[0].step == 30 and len(grow) >= 2  # once per 30 steps while it keeps growing
    assert all(b.step - a.step >= 30 for a, b in itertools.pairwise(grow))
    per100 = (grow[0].value - grow[0].baseline) * 100 / grow[0].window
    assert 30 < per100 < 50


def test_restart_from_an_earlier_step_drops_later_values():
    h = MetricHistory()
    for s in range(1, 11):
        h.add(s, {"a": float(s)})
    h.add(5, {"a": 50.0})
    assert h.series["a"][-1] == (5, 50.0) and len(h.series["a"]) == 5 and h.last_step == 5


def test_check_step_needs_a_baseline():
    assert check_step(3, {"actor/grad_norm": 100.0}, lambda n, k: [0.3, 0.4]) == []


def test_reading_costs_under_2ms_per_poll_at_1000_steps():
    """One poll's work with 1,000 steps of history: parse a 20-line tail holding one new step, add it (the
    rules), build the view for the snapshot."""
    h, run = MetricHistory(), RunMetrics(0)
    lines = [concat_dict_to_str(run.step(s), step=s) for s in range(1, 1101)]
    h.add_many(M.console_lines("\n".join(lines[:1000])))
    costs = []
    for s in range(1000, 1100):
        t0 = time.perf_counter()
        new = [(st, v) for st, v in M.console_lines("\n".join(lines[s - 19:s + 1]), h.last_step - 1)
               if st > h.last_step]
        h.add_many(new)
        h.view("actor_log", "TaskRunner")
        costs.append(time.perf_counter() - t0)
    costs.sort()
    assert h.last_step == 1100
    assert costs[len(costs) // 2] < 0.002, f"median {costs[len(costs) // 2] * 1000:.2f} ms"
