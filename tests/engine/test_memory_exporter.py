"""The memory view as Prometheus metrics: each rank's peak, limit and steps left, and a leak's bytes per step by
phase, with bounded labels; promtool accepts the exposition."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import pytest

from tests.analysis.test_memory import GIB, MIB, OTHERS, TOTAL, job
from tests.engine.helpers import synthetic_snapshots
from tests.engine.test_exporter import scrape, value
from verltop.analysis.memory_view import memory_view
from verltop.engine.exporter import Exporter, exposition, registry

PROMTOOL = shutil.which("promtool")


def snap():
    book, steps, rows = job()
    return replace(synthetic_snapshots(2)[-1], memory=memory_view(book, steps, rows))


def test_headroom_and_growth_per_rank():
    s = snap()
    f = scrape(Exporter(lambda: s))
    who = {"worker_group": "wg", "role": "actor_rollout", "rank": "1", "kind": "gpu"}
    g = s.memory.growth[0]
    assert value(f, "verltop_memory_growth_bytes_per_step", **who, phase="update_actor") == g.bytes_per_step
    assert abs(g.bytes_per_step - 150 * MIB) < 0.3 * 150 * MIB
    assert value(f, "verltop_memory_limit_bytes", **who) == TOTAL - OTHERS
    h = next(x for x in s.memory.headroom if x.actor_id == "a1" and x.kind == "gpu")
    assert value(f, "verltop_memory_peak_bytes", **who) == h.peak_bytes > 10 * GIB
    assert value(f, "verltop_memory_steps_to_limit", **who) == pytest.approx(h.steps_to_limit)
    flat = {**who, "rank": "0"}
    assert value(f, "verltop_memory_steps_to_limit", **flat) is None  # not growing: no forecast
    assert value(f, "verltop_memory_peak_bytes", **{**flat, "kind": "host"}) == 2 * GIB
    names = {smp.name for fam in f.values() for smp in fam if smp.name.startswith("verltop_memory_")}
    assert names == {"verltop_memory_peak_bytes", "verltop_memory_limit_bytes", "verltop_memory_steps_to_limit",
                     "verltop_memory_growth_bytes_per_step"}
    for fam in f.values():
        for smp in fam:
            if smp.name.startswith("verltop_memory_"):
                assert set(smp.labels) <= {"worker_group", "role", "rank", "kind", "phase"}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing")
def test_promtool_accepts_the_memory_metrics():
    body, _ = exposition(registry(Exporter(snap)))
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
