"""``verltop watch`` as a daemon, against the synthetic Ray dashboard (tests/fakeray) in a real process:
one incident for a hang (its hooks run), the dashboard killed for real and started again while the watch
goes on, SIGTERM ending it cleanly; and two stalls in a row giving two incidents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.engine.procs import Dashboard, Hook, Watch
from tests.faults.helpers import ROOT, clean_env
from tests.net import free_port
from verltop.engine import recording_format as rf
from verltop.engine.recording_reader import Recording


@pytest.fixture
def cleanup():
    things: list = []
    yield things
    for t in things:
        if isinstance(t, Watch) and t.proc.poll() is None:
            os.killpg(t.proc.pid, signal.SIGKILL)
        elif isinstance(t, Dashboard):
            t.kill()
        elif isinstance(t, Hook):
            t.close()


RULE = ("--stall-after", "12", "--interval", "1", "--clear-after", "5")


def test_watch_catches_the_hang_and_lives_through_the_dashboard_killed(tmp_path, cleanup):
    port = free_port()
    dash = Dashboard(port, tmp_path / "dash.log", "--nodes", "2", "--gpus", "4", "--profiling", "--speed", "4",
                     "--hang-at", "8", "--hang-rank", "2").start()
    cleanup.append(dash)
    hook = Hook()
    cleanup.append(hook)
    w = Watch(tmp_path / "w", dash.url, *RULE, "--webhook", hook.url,
              "--on-incident", f'echo "$VERLTOP_INCIDENT_DIR" >> {tmp_path}/hooked; exit 7')
    cleanup.append(w)

    # 1. the hang: one incident, written within 10 s of the snapshot that showed the stall
    w.wait(lambda: w.incidents(), 120, "an incident")
    inc = w.incidents()[0]
    doc = json.loads((inc / "incident.json").read_text())
    written = (inc / "summary.txt").stat().st_mtime
    assert written - doc["detected_at"] < 10, written - doc["detected_at"]
    assert set(doc) >= {"started_at", "detected_at", "phase", "groups", "suspects", "chains", "evidence", "recording"}
    assert doc["phase"] == "update_actor" and doc["recording"] == "recording.vtr" and isinstance(doc["chains"], list)
    assert [s["rank"] for s in doc["suspects"]] == [2]
    summary = (inc / "summary.txt").read_text()
    group = doc["groups"][0]
    assert f"Suspect: rank 2 of {group}" in summary and "wait in cuda_sync" in summary, summary
    dump = json.loads((inc / "dump.json").read_text())
    assert {"taken_at", "ranks", "groups", "suspects", "notes"} <= set(dump)
    assert sum(1 for r in dump["ranks"] if r["stuck"]) >= 8  # 3 samples: the stacks did not move
    line = next(ln for ln in w.text().splitlines() if "INCIDENT" in ln)
    assert inc.name in line and "Suspect: rank 2" in line  # one line on stdout
    assert "INCIDENT" in w.log()  # and in the watch log
    w.wait(lambda: hook.posts and (tmp_path / "hooked").exists() and "--on-incident exited 7" in w.log(), 30,
           "the hooks")
    assert hook.posts[0][2] == {"text": f"verltop: {summary.strip()} ({inc})"}
    assert (tmp_path / "hooked").read_text().strip() == str(inc)
    assert "SECRETKEY" not in w.log() and "SECRETKEY" not in w.text()
    rec = Recording.open(inc)  # the recording around it: from before the hang, with the dump
    assert rec.snaps[0].t < doc["started_at"] and rec.events_of(rf.DUMP) and rec.events_of(rf.INCIDENT)

    # a second watch on the same directory is refused, in one line
    p = subprocess.run([sys.executable, "-m", "verltop", "watch", "--address", dash.url, "--dir", str(w.dir)],
                       cwd=ROOT, capture_output=True, text=True, env=clean_env(), timeout=30)
    assert p.returncode == 2 and p.stderr.strip() == (
        f"verltop: error: another verltop watch (pid {w.proc.pid}) writes to {w.dir}"), p.stderr
    assert p.stdout == "", p.stdout  # refused before its start banner

    # 2. the dashboard killed for real: the watch goes on and says so; started again: picks up
    dash.kill()
    killed_at = time.time()
    w.wait(lambda: "dashboard: dashboard not reachable" in w.log(), 30, "the outage in the log")
    w.wait(lambda: (r := w.recording()) and r.events_of(rf.STATUS), 15, "the outage in the recording")
    dash.start()
    w.wait(lambda: "dashboard answers again" in w.log(), 45, "the recovery in the log")
    back_at = time.time()
    w.wait(lambda: (r := w.recording()) and len(r.events_of(rf.STATUS)) >= 2 and r.times[-1] > back_at, 20,
           "the recovery and a snapshot after it in the recording")

    # 3. SIGTERM: a clean end, a whole recording
    assert w.stop() == 0
    assert w.text().rstrip().endswith("verltop watch: stopped")
    rec = Recording.open(w.dir)
    assert rec.damage == []
    assert len(rec.events_of(rf.STATUS)) >= 2
    assert any(t > back_at for t in rec.times) and any(t < killed_at for t in rec.times)
    assert rec.cursor().goto(len(rec.snaps) - 1) is not None


def test_two_stalls_in_a_row_give_two_incidents(tmp_path, cleanup):
    from tests.fakeray import FakeDashboard
    from tests.fakeray.cluster import ClusterConfig, FakeCluster

    cluster = FakeCluster(ClusterConfig(nodes=1, gpus_per_node=4, speed=4.0, profiling=True))
    fd = FakeDashboard(cluster)
    fd.start()
    try:
        w = Watch(tmp_path / "w", fd.url, *RULE)
        cleanup.append(w)
        w.wait(lambda: w.recorded() >= 3, 30, "three healthy snapshots in the recording")
        for n in (1, 2):
            cluster.set_hang(rank=1)
            w.wait(lambda n=n: len(w.incidents()) == n, 90, f"incident {n}")
            assert "Suspect: rank 1 of" in (w.incidents()[-1] / "summary.txt").read_text()
            cluster.clear_hang()
            w.wait(lambda n=n: w.text().count(" over: ") == n, 90, f"the end of incident {n}")
        assert w.stop() == 0
        a, b = (json.loads((p / "incident.json").read_text()) for p in w.incidents())
        assert a["closed_at"] is not None and b["closed_at"] is not None and a["closed_at"] < b["detected_at"]
        assert w.text().count("INCIDENT") == 2
    finally:
        threading.Thread(target=fd.stop, daemon=True).start()


@pytest.mark.parametrize(("args", "needle"), [
    (["replay", "/nonexistent/rec.vtr"], "/nonexistent/rec.vtr: no such file or directory"),
    (["replay", "README.md"], "README.md: not a verltop recording (no recording header)"),
    (["replay", "tests"], "tests: no recording in it"),
    (["watch", "--webhook", "ftp://example.com/x"], "--webhook must be an http(s) URL"),
    (["watch", "--samples", "0"], "--samples must be ≥ 1"),
    (["--record", "README.md"], "--record README.md: the file exists"),
])
def test_user_errors_are_one_line(args, needle):
    from tests.faults.helpers import assert_one_line_error, verltop

    p = verltop(*args, timeout=60)
    assert needle in assert_one_line_error(p)
