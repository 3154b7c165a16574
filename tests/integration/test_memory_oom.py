"""Who ate the memory, on a real Ray cluster running a verl worker group (``memory_job.py``: two gloo ranks on CPU,
a TaskRunner controller), watched by ``verltop watch`` from the first step:

- rank 0 takes a +300 MiB transient peak in ``generate_sequences`` each step and gives it back: the peak shows in
  phase ``gen`` on rank 0, and rank 0 has no leak;
- rank 1 keeps +48 MiB after every ``update_actor``: the leak is named on rank 1 in ``update_actor`` at a rate
  within ±30 % of that, its peers flat; its forecast is its own arithmetic (headroom over its rate);
- then rank 1 raises torch's OutOfMemoryError in ``update_actor`` while rank 0 waits for it in a gloo
  ``all_reduce``: the watch writes an ``oom`` incident within 30 s of the failed call, naming rank 1 with its
  phase, step and lead-up, and rank 0 as waiting for it (the dump's suspect rule for it: tests/analysis/test_oom.py).

Host RSS is the memory here (no GPU); the OOM is CUDA's words, raised on CPU.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.engine.procs import Watch
from tests.integration.job_host import JobHost
from tests.wait import wait_until

pytestmark = pytest.mark.ray

MIB = 1 << 20
PEAK_MIB, LEAK_MIB = 300, 48  # memory_job.py's
OOM_AT = 7  # the step whose update_actor runs out: 2 warm-up steps and 4 to measure the leak come first
WRITTEN_WITHIN_S = 30


def _rank(rows: list[dict], rank: int, **kw: object) -> list[dict]:
    return [r for r in rows if r["rank"] == rank and all(r.get(k) == v for k, v in kw.items())]


def test_the_peak_the_leak_and_the_oom_verdict(tmp_path: Path):
    t0 = time.monotonic()
    job = JobHost(tmp_path, "memory_job.py", env={"RAY_task_events_report_interval_ms": "100"})
    w = None
    try:
        job.address = job.reply(180)["dashboard"]
        t_up = time.monotonic()
        # the watch starts while the worker group is made: its memory book has the job from its first step
        w = Watch(tmp_path / "w", job.address, "--clear-after", "10", "--before", "120",
                  env={"VERLTOP_INTERVAL": "0.5"})
        info = job.reply(240)
        print(f"\ncluster up at {t_up - t0:.0f} s, worker group at {time.monotonic() - t0:.0f} s")
        group = info["prefix"]
        job.cmd(cmd="run", steps=OOM_AT + 2, oom_at=OOM_AT)
        oom_at = job.state / "oom-at"
        wait_until(oom_at.exists, 120, "rank 1's OOM", step=0.25,
                   detail=lambda: (job.state / "step").read_text() if (job.state / "step").exists() else None)
        failed_at = float(oom_at.read_text().split()[0])
        print(f"OOM at {time.monotonic() - t0:.0f} s")
        w.wait(lambda: w.incidents(("oom",)), WRITTEN_WITHIN_S, "the oom incident")
        (inc,) = w.incidents(("oom",))
        written = (inc / "summary.txt").stat().st_mtime
        doc = json.loads((inc / "incident.json").read_text())
        summary = (inc / "summary.txt").read_text().strip()
        print(f"oom incident {written - failed_at:.1f} s after the failed call (test at "
              f"{time.monotonic() - t0:.0f} s): {summary}")
        assert written - failed_at < WRITTEN_WITHIN_S

        # the verdict: rank 1, update_actor, its step, the error's line, the lead-up
        v = doc["oom"]
        assert doc["kind"] == "oom" and (v["worker_group"], v["rank"], v["how"], v["kind"]) == (group, 1, "task_error",
                                                                                               "gpu"), v
        assert v["phase"] == "update_actor" and v["step"] is not None, v
        assert v["message"].startswith("CUDA out of memory. Tried to allocate 2.00 GiB"), v
        assert summary.startswith(f"OOM: rank 1 of {group} (pid {info['ranks'][1]['pid']}) ran out of GPU memory in "
                                  f"update_actor at step {v['step']} (CUDA out of memory. Tried to allocate 2.00 GiB"), \
            summary
        assert f"Rank 0 of {group} still runs actor_rollout_update_actor: waiting for it" in summary, summary
        assert [(s["rank"], s["worker_group"]) for s in doc["suspects"]] == [(1, group)]
        assert [(x["rank"], x["task"]) for x in doc["waiting"]] == [(0, "actor_rollout_update_actor")]
        steps = [p["step"] for p in v["lead_up"]]
        assert len(steps) >= 3 and steps == sorted(steps) and steps[-1] <= v["step"], v["lead_up"]
        assert "lead-up: its peak RSS in update_actor: " in summary and "it kept +" in summary, summary

        m = doc["memory"]
        # the transient peak: in gen, on rank 0, every step it was sampled; no leak of rank 0's
        gen0 = [p for p in _rank(m["by_phase"], 0, phase="gen") if p["samples"]]
        upd0 = [p for p in _rank(m["by_phase"], 0, phase="update_actor") if p["samples"]]
        assert len(gen0) >= 4 and upd0, m["by_phase"]
        base = min(p["peak_rss_bytes"] for p in upd0)
        lifted = [p["peak_rss_bytes"] - base for p in gen0]
        assert sum(x > 0.7 * PEAK_MIB * MIB for x in lifted) >= len(lifted) - 1, [x / MIB for x in lifted]
        assert not [g for g in m["growth"] if g["rank"] == 0], m["growth"]
        # the leak: rank 1, update_actor, +48 MiB per step (±30 %), peers flat
        (g,) = [g for g in m["growth"] if g["rank"] == 1]
        assert (g["phase"], g["kind"], g["worker_group"]) == ("update_actor", "host", group), g
        assert abs(g["bytes_per_step"] - LEAK_MIB * MIB) <= 0.3 * LEAK_MIB * MIB, g["bytes_per_step"] / MIB
        assert g["peers_bytes_per_step"] is not None and abs(g["peers_bytes_per_step"]) < 0.3 * LEAK_MIB * MIB, \
            (g, [(p["step"], p["peak_rss_bytes"] / MIB, p["samples"]) for p in upd0])
        assert v["growth"] is not None and v["growth"]["phase"] == "update_actor", v["growth"]
        # the forecast: its headroom over its rate
        (h,) = [h for h in m["headroom"] if h["rank"] == 1 and h["kind"] == "host"]
        assert h["limit_bytes"] and h["peak_bytes"] and h["steps_to_limit"] is not None, h
        expected = (h["limit_bytes"] - h["peak_bytes"]) / g["bytes_per_step"]
        assert abs(h["steps_to_limit"] - expected) <= max(0.1, 0.01 * expected), (h, expected)

        print(f"test done at {time.monotonic() - t0:.0f} s")
    finally:
        if w is not None and w.proc.poll() is None:
            os.killpg(w.proc.pid, signal.SIGKILL)
            w.proc.wait()
        job.stop()
