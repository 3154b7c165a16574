"""SVG snapshots of the screens test_snapshots.py does not draw: the step timeline (healthy, and with a late
rank), the nodes view, a pending placement group's details, a replay, an open process tree, a failed dump.

Each is fed what its UI test feeds it (a real capture over a real HTTP server, a recording written by the
recorder, a real process tree captured on an H200, the doctor's report built from fixed node facts), at a
frozen moment, with the local time zone set to UTC (the replay header prints local times).
Update only after looking at the new pictures (``pytest tests/snapshots --snapshot-update``).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from tests.analysis.test_doctor import facts, node
from tests.engine.helpers import write_replay_recording
from tests.replay_server import FIXTURES, ReplayDashboard
from tests.snapshots.test_snapshots import (
    CPU,
    FROZEN_NOW,
    GPU,
    Clock,
    _load,
    cpu_dash,
    gpu_app,
    gpu_dash,
    gpu_loaded,
    make_app,
)
from tests.ui.test_process_rows import OneSnapshot
from tests.wait import pilot_wait
from verltop.analysis.doctor import build_report
from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.analysis.steps import CallView, build_steps
from verltop.model import DoctorReport, ProcStat, ProcTree, RawActor, Snapshot, Step
from verltop.sources import parse
from verltop.text.doctor import value_text
from verltop.ui.app import VerltopApp

__all__ = ["cpu_dash", "gpu_dash"]  # module-scoped fixtures shared with test_snapshots.py

PENDING_PORT, FAILED_PORT = 28768, 28769
TREE = FIXTURES / "real-gpu-tree" / "grouped"


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC while the test runs (and the machine's zone again after it)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def settle(pilot, cond, what: str, timeout: float = 10.0) -> None:
    await pilot_wait(pilot, cond, timeout, what, step=0.05)


# ---------------------------------------------------------------- the step timeline (t)


def cpu_app(clock: Clock) -> VerltopApp:
    return make_app("http://127.0.0.1:28766", clock)


async def _timeline(pilot, clock: Clock, steps: tuple[Step, ...], now: float) -> None:
    """``t`` on the demo, then the steps it shows at ``now`` (the clock stands there too)."""
    clock.now = now
    await pilot.press("t")
    pilot.app.screen.show_snapshot(replace(pilot.app.snapshot, steps=steps, taken_at=now))
    await pilot.pause()


def test_timeline_healthy(snap_compare, cpu_dash):
    """``t`` on ``verltop demo`` as it trained (the capture's three finished steps, the moment step 4 began):
    one line per step, gen, reward, old_log_prob, ref, values, update_critic, update_actor, weight_sync and
    other placed where they ran, each labelled with its time; the header "step 3", about 10 s a step; the
    selected step 3 phase by phase below, no skew worth naming."""
    clock = Clock(CPU.at)

    async def run(pilot):
        await _load(pilot, CPU.at)
        steps = pilot.app.snapshot.steps
        assert len(steps) == 4 and steps[3].running
        await _timeline(pilot, clock, steps[:3], steps[3].started_at)

    assert snap_compare(cpu_app(clock), terminal_size=(120, 30), run_before=run)


def late_step(s: Step, late_by_s: float) -> tuple[Step, float]:
    """Step ``s`` run again right after itself, where rank 2 of the update_actor group is still running
    ``late_by_s`` after its three peers finished (what the demo's ``L`` does); and that moment."""
    dt = s.duration_s or 0.0
    calls, now = [], 0.0
    update = next(r for r in s.runs if r.phase == "update_actor")
    for r in s.runs:
        if r.start_s > update.start_s:
            continue  # what comes after the update has not begun
        start, end = r.start_s + dt, (r.end_s or r.start_s) + dt
        first = end - (r.skew_s or 0.0)
        if r.phase == "update_actor":
            now = first + late_by_s
            calls.append(CallView(r.group, r.method, r.phase, start, None, now, first, r.ranks, 1,
                                  late_actor_id="late", exact=True))
        else:
            calls.append(CallView(r.group, r.method, r.phase, start, end, end, first, r.ranks, 0, exact=True))
    (step,) = build_steps(calls, now, first_index=s.index + 1, rank_of=lambda a: 2 if a == "late" else None)
    return step, now


def test_timeline_late_rank(snap_compare, cpu_dash):
    """The same job when rank 2 finishes update_actor late: steps 1-3 as they ran, step 4 still in
    update_actor 75 s after its peers finished (the bar runs on, called out "⚠ actor r2 +1m15s" at its end);
    the header says 1 of 4 ranks still running; the detail: "rank 2 still runs actor_rollout_update_actor, 1m15s after the
    first of its 3 finished peers"."""
    clock = Clock(CPU.at)

    async def run(pilot):
        await _load(pilot, CPU.at)
        steps = pilot.app.snapshot.steps
        step4, now = late_step(steps[2], 75.0)
        await _timeline(pilot, clock, (*steps[:3], step4), now)

    assert snap_compare(cpu_app(clock), terminal_size=(140, 30), run_before=run)


# ---------------------------------------------------------------- the nodes view (n)


class Checked:
    """A doctor job that has finished: its report (the probes are tests/ui/test_nodes_screen.py's)."""

    problem = None

    def __init__(self, report: DoctorReport) -> None:
        self.report = report

    async def run(self) -> DoctorReport:
        return self.report


def doctor_report() -> DoctorReport:
    """Three GPU nodes as test_doctor.py's facts give them: the third has another torch, the second's clock is
    2.5 s off the head's."""
    drifted = facts()
    drifted["versions"] = {**drifted["versions"], "torch": "2.5.1"}
    return build_report([node(1), node(2, clock_offset_s=2.5), node(3, drifted)], now=0.0, show=value_text, elapsed_s=1.9)


def test_nodes_view(snap_compare, gpu_dash):
    """``n``: a column per node (10.0.0.1 (head), 10.0.0.2, 10.0.0.3), a row per check — versions, NVIDIA
    driver and CUDA, GPU model and count, free memory, ECC, Xids, NCCL environment and interfaces, disks,
    clock; torch 2.5.1 on 10.0.0.3 in red, the 2.5 s clock in yellow; "3 nodes checked in 1.9 s: 1 mismatch,
    1 problem"; below, the mismatch and the problem, each with its fix."""
    report = doctor_report()

    async def run(pilot):
        await gpu_loaded(pilot)
        pilot.app.engine.doctor = lambda path=None, node_timeout_s=30.0, on_progress=None: Checked(report)
        await pilot.press("n")
        await settle(pilot, lambda: getattr(pilot.app.screen, "report", None) is not None, "the doctor's report")
        await pilot.pause()

    assert snap_compare(gpu_app(), terminal_size=(120, 40), run_before=run)


# ---------------------------------------------------------------- pending work (Enter on a pending line)

PENDING = FIXTURES / "pending" / "busy"
PG = "pend:placement_group:45905af4e8d7d0e8b490746f284a02000000"


def pending_now() -> float:
    """65 s after Ray received job 2's placement group."""
    pgs = json.loads((PENDING / "hung" / "api_v0_placement_groups.json").read_text())["data"]["result"]["result"]
    pg = next(p for p in pgs if p["state"] == "PENDING")
    return int(pg["stats"]["creation_request_received_ns"]) / 1e9 + 65


def test_pending_details(snap_compare):
    """Enter on the pending placement group of job 2 (a verl pool asking for the 4 CPUs job 1 holds, real
    Ray 2.60 answers): its facts — job2verl_group_4:0, PENDING, NO_RESOURCES, 4 bundles of {CPU: 1}, waiting
    1m05s — and why: no node has 4 CPU free for all bundles together (node 192.0.2.2: 4 CPU, 0 free)."""
    now = pending_now()

    async def run(pilot):
        from verltop.ui.widgets.actor_table import ActorTable

        await _load(pilot, now)
        t = pilot.app.screen.query_one(ActorTable)
        assert PG in t.keys
        t.move_cursor(t.keys.index(PG))
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert type(pilot.app.screen).__name__ == "PendingDetailsScreen"

    with ReplayDashboard(case=PENDING, phase="hung", port=PENDING_PORT) as d:
        assert snap_compare(make_app(d.url, Clock(now)), terminal_size=(120, 30), run_before=run)


# ---------------------------------------------------------------- replay


def test_replay(snap_compare, tmp_path, utc):
    """``verltop replay`` of a recording (tests/engine/helpers.py's job: 4 ranks of wg, an incident, a
    recorded dump), ``i`` then Shift-→: the header says REPLAY ‖ (paused), the speed, the recorded time and
    the position; the rows of wg turn red as the hang has gone on; the message line names the incident."""
    from verltop.engine.recording_reader import Recording
    from verltop.engine.replay import ReplayEngine

    snaps = write_replay_recording(tmp_path / "r.vtr")
    engine = ReplayEngine(Recording.open(tmp_path / "r.vtr"), paused=True, name="r.vtr")

    async def run(pilot):
        app = pilot.app
        await settle(pilot, lambda: app.snapshot is not None, "the first snapshot")
        await pilot.press("i")
        await settle(pilot, lambda: app.snapshot.taken_at == snaps[12].taken_at, "the incident's lead-in")
        await pilot.press("shift+right")
        await settle(pilot, lambda: any(a.stalled for a in app.snapshot.actors), "stalled rows")
        app.screen.tick(app.engine.clock())  # ages run on to the replay's clock, as the next second's tick does
        await pilot.pause()

    assert snap_compare(VerltopApp(engine), terminal_size=(120, 30), run_before=run)


# ---------------------------------------------------------------- an open process tree


def tree_snapshot() -> Snapshot:
    """vLLM's rollout server on an H200 (tests/fixtures/real-gpu-tree): its engine core and two TP workers
    under it as /proc and NVML read them there, joined to the dashboard's node answer of that moment."""
    local = next(a for a in json.loads((TREE / "snapshot_local.json").read_text())["actors"]
                 if a["actor_name"] == "vllm_server_0_0")
    n = parse.node_detail(json.loads((TREE / "nodes_NODE_ID.json").read_text()))
    assert n is not None
    tree = ProcTree(1.0, roots=(local["pid"],), node_id=n.node_id, procs=tuple(
        ProcStat(p["pid"], p["cpu_percent"], p["rss_bytes"], None, p["title"], p["ppid"]) for p in local["processes"]))
    actor = RawActor(local["actor_id"], "vLLMHttpServer", "ALIVE", "vllm_server_0_0", n.node_id, local["pid"])
    data = ClusterData(address="http://127.0.0.1:8265", actors=(actor,), nodes=(n,), remote_trees=(tree,))
    return build_snapshot(data, TaskHistory(), 2.0)


def test_process_tree_open(snap_compare):
    """The rollout server's tree closed and opened again with ``c`` (it starts open: its workers hold GPU memory):
    ``▾`` on its role, then └ VLLM::EngineCore_DP0 with ├ VLLM::Worker_TP0 and └ VLLM::Worker_TP1 under it,
    each with its PID, GPU 0 and GPU memory; the server's row carries its workers' memory."""
    snap = tree_snapshot()

    async def run(pilot):
        from verltop.ui.widgets.actor_table import ActorTable

        t = pilot.app.screen.query_one(ActorTable)
        await settle(pilot, lambda: t.row_count == 5, "the server's group, the server and its three processes")
        await pilot.press("c")  # closed: the group and the server
        await settle(pilot, lambda: t.row_count == 2, "the tree to close")
        await pilot.press("c")  # open again
        await settle(pilot, lambda: t.row_count == 5, "the tree to open")
        await pilot.pause()

    assert snap_compare(VerltopApp(OneSnapshot(snap)), terminal_size=(120, 24), run_before=run)


# ---------------------------------------------------------------- a failed dump


def test_failed_dump(snap_compare):
    """``D`` on the hung GPU cluster whose dashboard has profiling off (``/worker/traceback`` answers 403):
    "0/3 ranks dumped"; each rank's row says what to do (403: profiling is disabled on this dashboard; start
    Ray with RAY_DASHBOARD_ENABLE_PROFILING=1, or let verltop use its probe) in its ERROR / NOTE column; the
    wait chains end in stacks that could not be read; no suspect, no merged stack."""
    from verltop.sources.pyspy import DumpOptions
    from verltop.ui.screens.stacks import StackScreen

    clock = Clock(FROZEN_NOW)
    dash = GPU.dashboard(FAILED_PORT)
    dash.tracebacks = None  # the replay server then answers 403, as Ray does with profiling off

    async def run(pilot):
        app = pilot.app
        await _load(pilot, clock.now)
        app.push_screen(StackScreen(app.snapshot, opts=DumpOptions(samples=1, interval_s=0.0, via="dashboard")))
        await settle(pilot, lambda: app.screen.report is not None, "the dump to end")
        app.screen.job.elapsed_s = 0.1  # how long it took is the machine's: drawn again with a fixed figure
        app.screen._show_report(app.screen.report)
        await pilot.pause()

    with dash:
        assert snap_compare(make_app(f"http://127.0.0.1:{FAILED_PORT}", clock), terminal_size=(180, 30),
                            run_before=run)
