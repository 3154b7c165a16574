"""Real py-spy on real processes: a gloo group where one rank never joins the collective."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.analysis.helpers import row
from tests.net import free_port
from verltop.analysis.dump import analyse
from verltop.sources.pyspy import DumpOptions, explain_error, no_pyspy_problem, ptrace_problem
from verltop.sources.stacks import StackCapture
from verltop.text.suspects import suspect_reason

N = 4


@pytest.fixture(scope="module")
def gloo_group():
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.sources.gloo_ranks", str(N), "2", str(port), str(r)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True) for r in range(N)]
    for p in procs:
        assert p.stdout.readline().startswith("ready"), "rank did not start"
    time.sleep(0.5)  # let ranks 0,1,3 enter the second all_reduce
    yield [p.pid for p in procs]
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_real_gloo_straggler(gloo_group):
    actors = [row(f"a{r}", "wg", r, pid=pid) for r, pid in enumerate(gloo_group)]
    cap = StackCapture(None, frozenset(), DumpOptions(samples=2, interval_s=0.3, via="local"))
    seen = []
    samples = asyncio.run(cap.capture(actors, lambda a, d, k, n: seen.append((k, n))))
    assert seen[-1] == (2 * N, 2 * N)
    report = analyse(actors, samples, time.time())
    ops = {x.actor.rank: (x.blocked_on.op if x.blocked_on else None) for x in report.ranks}
    assert ops == {0: "all_reduce", 1: "all_reduce", 2: None, 3: "all_reduce"}
    assert [s.rank for s in report.suspects] == [2]
    assert "straggler_work" in suspect_reason(report.suspects[0]) and "did not move" in suspect_reason(report.suspects[0])
    assert all(x.stuck is True for x in report.ranks)
    frame = next(x for x in report.ranks if x.actor.rank == 0).blocked_on.frame
    assert frame.startswith("gloo_ranks.py:") and "rank_main" in frame


def test_gone_pid_and_missing_pyspy(gloo_group):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    actors = [row("gone", "wg", 0, pid=p.pid), row("a0", "wg", 1, pid=gloo_group[0])]
    cap = StackCapture(None, frozenset(), DumpOptions(via="local"))
    s = asyncio.run(cap.capture(actors))
    assert s["gone"][0].error.text == "process exited before it could be dumped"
    assert s["a0"][0].error is None
    cap.pyspy = None
    s = asyncio.run(cap.capture(actors[1:]))
    assert s["a0"][0].error == no_pyspy_problem()


def test_hung_pyspy_is_killed_at_its_timeout(gloo_group, tmp_path):
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    cap = StackCapture(None, frozenset(), DumpOptions(via="local", timeout_s=0.5))
    cap.pyspy = str(fake)
    t0 = time.monotonic()
    s = asyncio.run(cap.capture([row("a0", "wg", 0, pid=gloo_group[0])]))
    assert "did not finish within 0.5 s" in s["a0"][0].error.text and time.monotonic() - t0 < 3


def test_permission_errors_say_how_to_fix():
    msg = explain_error("Error: Permission denied (os error 13)", 1)
    assert msg == ptrace_problem()
    assert "CAP_SYS_PTRACE" in msg.text and "ptrace_scope" in msg.text and "root" in msg.text
