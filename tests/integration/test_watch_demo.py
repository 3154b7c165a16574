"""``verltop watch`` on the demo's real verl job (local Ray cluster, gloo), nobody watching: each hang becomes
one incident directory whose summary names the straggler and the collective its peers wait in, written
within the stall rule plus 10 s; the webhook reaches a local HTTP server; a second hang (a TP worker of the
rollout server, minutes into the watch) is a second incident, flagged as fast as a fresh start flags it and
named as the user sees it; ``verltop replay`` of the incident shows the rows turning red and the recorded dump; and the
watch killed with SIGKILL mid-write leaves a recording that opens and replays."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engine.procs import Hook, Watch
from tests.net import free_port
from tests.wait import pilot_wait, wait_until
from verltop.engine import recording_format as rf
from verltop.engine.recording_reader import Recording

pytestmark = pytest.mark.ray

WRITTEN_WITHIN_S = 10  # incident files after the snapshot that showed the stall
STALL_WITHIN_S = 60  # the stall rule, after the hang began (as tests/integration/test_tui_demo.py)
RESUME_S = 45


def hang(demo) -> float:
    demo.request_hang()
    wait_until(demo.hung, 60, "the hang", step=0.5, detail=demo.progress)
    return demo.hang_info()["since"]


def release(demo) -> None:
    step = demo.progress().get("step", 0)
    demo.release_hang()

    def resumed() -> bool:
        p = demo.progress()
        return not demo.hung() and (p.get("step", 0) > step or p.get("phase") in ("update_weights", "done"))

    wait_until(resumed, RESUME_S, "the job to resume", step=0.5, detail=demo.progress)


@pytest.fixture(scope="module")
def watched(demo, tmp_path_factory):
    # two steps completed from now, nothing hung: the job is healthy whatever the modules before it did
    # (the demo is shared), and there are finished update_actor runs to compare with (the median rule)
    if demo.hung():
        release(demo)
    start = demo.progress().get("step", 0)
    wait_until(lambda: not demo.hung() and demo.progress().get("step", 0) >= max(3, start + 2), 120,
               "two healthy steps of the demo", step=0.5, detail=demo.progress)
    tmp = tmp_path_factory.mktemp("watch-demo")
    hook = Hook()
    extra = {"RAY_AUTH_TOKEN": demo.token} if demo.token else {}
    w = Watch(tmp / "w", demo.address, "--clear-after", "10", "--before", "60", "--webhook", hook.url,
              "--on-incident", f'echo "$VERLTOP_INCIDENT_DIR" >> {tmp}/hooked', "--metrics-port", str(free_port()),
              env=extra)
    w.wait(lambda: "watching" in w.log(), 60, "the watch to start")
    w.wait(lambda: w.recorded() >= 3, 60, "three healthy snapshots in the recording")
    try:
        yield w, hook, tmp
    finally:
        if demo.hung():
            release(demo)
        if w.proc.poll() is None:
            os.killpg(w.proc.pid, signal.SIGKILL)
            w.proc.wait()
        hook.close()


def stall_posts(hook: Hook) -> list[dict]:
    """The webhook's posts about stalls (the demo's training also gives anomaly and slow-rank incidents)."""
    return [p[2] for p in hook.posts if "Stall in phase" in p[2].get("text", "")]


def check_incident(w: Watch, inc: Path, since: float, group_hint: str | None = None) -> dict:
    doc = json.loads((inc / "incident.json").read_text())
    summary = (inc / "summary.txt").read_text().strip()
    written = (inc / "summary.txt").stat().st_mtime
    stalled_after = doc["detected_at"] - since
    print(f"\nwatch: stall seen {stalled_after:.0f} s after the hang, incident written "
          f"{written - doc['detected_at']:.1f} s later; {summary}")
    assert stalled_after < STALL_WITHIN_S and written - doc["detected_at"] < WRITTEN_WITHIN_S
    group = doc["groups"][0]
    assert f"Suspect: rank 2 of {group} (pid " in summary and "_stuck_rollout" in summary, summary
    assert f"Ranks {group}:0-1,3 wait in all_reduce" in summary, summary
    assert doc["phase"] is not None and [(s["worker_group"], s["rank"]) for s in doc["suspects"]] == [(group, 2)]
    assert doc["started_at"] <= since + 2 and doc["recording"] == "recording.vtr"
    dump = json.loads((inc / "dump.json").read_text())
    ops = {r["rank"]: (r["blocked_on"] or {}).get("op") for r in dump["ranks"] if r["worker_group"] == group}
    assert ops == {0: "all_reduce", 1: "all_reduce", 2: None, 3: "all_reduce"}, ops
    return doc


def metrics(w: Watch) -> dict[str, float]:
    """The watch's /metrics, sample by sample (``name{labels}`` -> value)."""
    import re
    import urllib.request

    port = re.search(r"Prometheus metrics at http://127.0.0.1:(\d+)/metrics", w.text())
    assert port, w.text()[-2000:]
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return {k: float(v) for k, _, v in (ln.rpartition(" ") for ln in lines if ln and not ln.startswith("#"))}


def test_one_incident_per_hang_naming_the_straggler(demo, watched):
    w, hook, tmp = watched
    since = hang(demo)
    w.wait(lambda: len(w.incidents()) == 1, STALL_WITHIN_S + 30, "the incident")
    inc = w.incidents()[0]
    check_incident(w, inc, since)
    w.wait(lambda: stall_posts(hook) and (tmp / "hooked").exists(), 30, "the webhook and the hook")
    assert stall_posts(hook)[0] == {"text": f"verltop: {(inc / 'summary.txt').read_text().strip()} ({inc})"}
    assert str(inc) in (tmp / "hooked").read_text().split()
    # the same, as Prometheus sees it (verltop watch --metrics-port)
    m = metrics(w)
    assert m['verltop_incidents_total{kind="hang"}'] == 1 and m["verltop_suspects"] == 1, m
    group = json.loads((inc / "incident.json").read_text())["groups"][0]
    assert sum(v for k, v in m.items() if k.startswith("verltop_stalled_actors{") and f'worker_group="{group}"' in k) >= 3
    n = w.recorded()  # more polls of the same stall
    w.wait(lambda: w.recorded() >= n + 3, 60, "three more snapshots in the recording")
    stalls = [ln for ln in w.text().splitlines() if "INCIDENT" in ln and ": Stall in phase" in ln]
    assert len(w.incidents()) == 1 and len(stalls) == 1, stalls  # one per stall, not per poll
    release(demo)
    w.wait(lambda: " over: " in w.text(), 60, "the end of the incident")


def fresh_snapshot(demo) -> dict:
    """``verltop snapshot --json``: what a fresh start knows (its medians from the finished runs it reads)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    if demo.token:
        env["RAY_AUTH_TOKEN"] = demo.token
    p = subprocess.run([sys.executable, "-m", "verltop", "--address", demo.address, "snapshot", "--json"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_a_second_hang_a_tp_worker_is_a_second_incident_flagged_as_a_fresh_start_does(demo, watched):
    """The same watch, running since before the first hang (an incident behind it), and TP worker 1 of the
    rollout server hung in its weight load: the server's ``update_weights`` (shorter than a poll when healthy:
    its medians come from finished runs read later) is stalled by the median rule, as a fresh start says, not
    after the 5-minute rule; the summary names the worker as the user sees it (server / process, pid), never
    an id; the phase the incident and the header say is the timeline's for the running call."""
    w, hook, _ = watched
    demo.request_hang("tp1")
    wait_until(lambda: demo.hung() and (demo.hang_info() or {}).get("target") == "tp1", 60, "the TP worker's hang",
               step=0.5, detail=demo.progress)
    info = demo.hang_info()
    w.wait(lambda: len(w.incidents()) == 2, STALL_WITHIN_S + 30, "the second incident")
    inc = w.incidents()[1]
    fresh = fresh_snapshot(demo)
    doc = json.loads((inc / "incident.json").read_text())
    summary = (inc / "summary.txt").read_text().strip()
    print(f"\nwatch: TP worker hang seen {doc['detected_at'] - info['since']:.0f} s after it began; {summary}")
    assert doc["detected_at"] - info["since"] < STALL_WITHIN_S  # the median rule's 10 s floor, not 300 s
    # the watch's snapshot that opened it, from its recording: the row, the header's phase, the timeline's
    rec = Recording.open(inc / "recording.vtr")
    snap = rec.cursor().goto(rec.index_at(doc["detected_at"]))
    srv = next(a for a in snap.actors if a.actor_name == "vllm_server_0_0")
    (st,) = [x for x in srv.stalls if x.method == "update_weights"]
    now = next(a for a in fresh["actors"] if a["actor_name"] == "vllm_server_0_0")
    (fst,) = [x for x in now["stalls"] if x["method"] == "update_weights"]
    print(f"watch: {st.rule} median {st.median_s}; fresh start: {fst['rule']} median {fst['median_s']}")
    assert st.rule == fst["rule"] == "median" and st.median_s < 5 and fst["median_s"] < 5
    run = next(r for r in snap.steps[-1].runs if r.end_s is None and r.method == "update_weights")
    assert snap.phase == run.phase == doc["phase"] == "weight_sync", (snap.phase, run.phase, doc["phase"])
    # the suspect as the user sees it
    name = f"vllm_server_0_0/VLLM::Worker_TP1 (pid {info['pid']})"
    assert f"Suspect: {name}" in summary, summary
    assert not re.search(r"\b[0-9a-f]{12}\b", summary), summary
    assert [s["pid"] for s in doc["suspects"]] == [info["pid"]] and "(and " not in summary, doc["suspects"]
    w.wait(lambda: len(stall_posts(hook)) == 2, 30, "the webhook's second post")
    assert f"Suspect: {name}" in stall_posts(hook)[1]["text"]
    release(demo)
    w.wait(lambda: w.text().count(" over: ") == 2, 60, "the end of the second incident")


async def test_replay_of_the_incident_shows_rows_turning_red_and_the_dump(watched):
    from types import SimpleNamespace

    from verltop.cli_watch import replay_engine
    from verltop.ui.app import VerltopApp
    from verltop.ui.screens.stacks import StackScreen

    w, _, _ = watched
    inc = w.incidents()[0]
    doc = json.loads((inc / "incident.json").read_text())
    group = doc["groups"][0]
    engine = replay_engine(SimpleNamespace(path=str(inc), at=None, speed=8.0, paused=False))
    app = VerltopApp(engine)

    def red() -> set[int]:
        return {a.rank for a in app.snapshot.actors if a.worker_group == group and a.stalled} if app.snapshot else set()

    async with app.run_test(size=(200, 50)) as pilot:
        await pilot_wait(pilot, lambda: app.snapshot is not None, 10, "the recording's first snapshot")
        assert app.snapshot.taken_at < doc["detected_at"] and red() == set()  # before: nobody red
        # the waiting ranks turn red as it plays
        await pilot_wait(pilot, lambda: {0, 1, 3} <= red(), 30, "ranks 0, 1, 3 red", detail=red)
        await pilot.press("space", "d")
        await pilot_wait(pilot, lambda: isinstance(app.screen, StackScreen), 10, "the stored dump's screen")
        screen = app.screen
        assert isinstance(screen, StackScreen) and screen.report is not None
        assert [(s.worker_group, s.rank) for s in screen.report.suspects] == [(group, 2)]
        assert f"{group}:2" in str(screen.query_one("#suspects").render())


def test_kill_9_mid_write_then_replay(watched):
    w, _, _ = watched
    assert w.proc.poll() is None
    n = w.recorded()
    w.wait(lambda: w.recorded() > n, 30, "the watch recording")  # killed while it writes
    os.killpg(w.proc.pid, signal.SIGKILL)
    killed = time.time()
    w.proc.wait()
    rec = Recording.open(w.dir)
    assert rec.damage == [] or "stopped mid-write" in rec.damage[-1], rec.damage
    assert killed - rec.times[-1] < 6, killed - rec.times[-1]  # at most the poll being written is lost
    assert len(rec.events_of(rf.INCIDENT)) >= 2 and len(rec.events_of(rf.DUMP)) == 2
    last = rec.cursor().goto(len(rec.snaps) - 1)
    assert last is not None and any(a.role == "controller" for a in last.actors)
