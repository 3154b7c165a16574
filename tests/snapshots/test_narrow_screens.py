"""SVG snapshots of every screen at 80×24, a fresh SSH terminal's size: nothing important cut, every box
reachable. The screens are fed as in test_snapshots.py and test_more_screens.py (real captures over a real
HTTP server, a recording, a real process tree, a doctor report from fixed facts), at a frozen moment.
Update only after looking at the new pictures (``pytest tests/snapshots --snapshot-update``).
"""

from __future__ import annotations

import pytest

from tests.engine.helpers import write_replay_recording
from tests.replay_server import ReplayDashboard
from tests.snapshots.test_more_screens import (
    PENDING,
    PG,
    Checked,
    _timeline,
    cpu_app,
    doctor_report,
    late_step,
    pending_now,
    settle,
    tree_snapshot,
    utc,
)
from tests.snapshots.test_snapshots import (
    CPU,
    STALL,
    Clock,
    _load,
    _log_loaded,
    _open_report,
    cpu_dash,
    gpu_app,
    gpu_dash,
    gpu_loaded,
    gpu_report,
    make_app,
)
from tests.ui.test_process_rows import OneSnapshot
from verltop.ui.app import VerltopApp

__all__ = ["cpu_dash", "gpu_dash", "gpu_report", "utc"]  # fixtures shared with the other snapshot modules

SIZE = (80, 24)
PENDING_PORT = 28770


def test_main_marks_the_dumps_suspects(snap_compare, gpu_dash, gpu_report, utc):
    """Back on the main screen after a dump named abcd:1: its row reads "▶ not in all_reduce" first in
    STALLED, the group row "▶ held up by rank 1", and the line under the table (the row selected) says why,
    from the dump of that moment."""
    async def run(pilot):
        await _open_report(pilot, gpu_report)
        await pilot.press("escape")
        await pilot.press("j", "j", "j", "j")
        await pilot.pause()

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


def test_details(snap_compare, gpu_dash):
    """Enter on rank 0 of abcd: its facts, why it is stalled, its log tail, at 80 columns."""
    async def run(pilot):
        await gpu_loaded(pilot)
        await pilot.press("j", "j", "j", "enter")
        await _log_loaded(pilot)

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


def test_rank_full_stack(snap_compare, gpu_dash, gpu_report):
    """Enter on the suspect in the stack screen: abcd:1's threads, frames whole or wrapped."""
    async def run(pilot):
        await _open_report(pilot, gpu_report)
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


def test_stack_screen_tab_reaches_the_merged_stacks(snap_compare, gpu_dash, gpu_report):
    """``j`` past the last rank moves into MERGED STACKS, which scrolls on with ``j``; its box has lines."""
    async def run(pilot):
        await _open_report(pilot, gpu_report)
        await pilot.press("j", "j", "j", "j")
        await pilot.pause()
        assert pilot.app.screen.focused.id == "tree-box"

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


def test_help(snap_compare, gpu_dash):
    """``?`` at 80 columns: keys and what they do, a description wrapping under itself."""
    async def run(pilot):
        await gpu_loaded(pilot)
        await pilot.press("question_mark")

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


def test_timeline_late_rank(snap_compare, cpu_dash):
    """``t`` with a late rank: the steps' bars, the selected step's phases with their skew (one format)."""
    clock = Clock(CPU.at)

    async def run(pilot):
        await _load(pilot, CPU.at)
        steps = pilot.app.snapshot.steps
        step4, now = late_step(steps[2], 75.0)
        await _timeline(pilot, clock, (*steps[:3], step4), now)

    assert snap_compare(cpu_app(clock), terminal_size=SIZE, run_before=run)


def test_nodes_view(snap_compare, gpu_dash):
    """``n``: the checks' table, then the findings in a box as tall as its text, wrapped under themselves."""
    report = doctor_report()

    async def run(pilot):
        await gpu_loaded(pilot)
        pilot.app.engine.doctor = lambda path=None, node_timeout_s=30.0, on_progress=None: Checked(report)
        await pilot.press("n")
        await settle(pilot, lambda: getattr(pilot.app.screen, "report", None) is not None, "the doctor's report")
        await pilot.pause()

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


def test_pending_details(snap_compare):
    """Enter on the pending placement group of job 2: its facts and why, at 80 columns."""
    now = pending_now()

    async def run(pilot):
        from verltop.ui.widgets.actor_table import ActorTable

        await _load(pilot, now)
        t = pilot.app.screen.query_one(ActorTable)
        t.move_cursor(t.keys.index(PG))
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()

    with ReplayDashboard(case=PENDING, phase="hung", port=PENDING_PORT) as d:
        assert snap_compare(make_app(d.url, Clock(now)), terminal_size=SIZE, run_before=run)


def test_process_tree_open(snap_compare):
    """The rollout server's tree: EngineCore and the TP workers named to their end (``…Worker_TP1``)."""
    snap = tree_snapshot()

    async def run(pilot):
        from verltop.ui.widgets.actor_table import ActorTable

        t = pilot.app.screen.query_one(ActorTable)
        await settle(pilot, lambda: t.row_count == 5, "the server's group, the server and its three processes")

    assert snap_compare(VerltopApp(OneSnapshot(snap)), terminal_size=SIZE, run_before=run)


def test_replay(snap_compare, tmp_path, utc):
    """``verltop replay`` at 80 columns, past its recorded dump: the header, the suspect wg:2 marked on its
    row and its group's, the footer's time controls."""
    from verltop.engine.recording_reader import Recording
    from verltop.engine.replay import ReplayEngine

    snaps = write_replay_recording(tmp_path / "r.vtr")
    engine = ReplayEngine(Recording.open(tmp_path / "r.vtr"), paused=True, name="r.vtr")

    async def run(pilot):
        app = pilot.app
        await settle(pilot, lambda: app.snapshot is not None, "the first snapshot")
        engine.seek(snaps[28].taken_at)  # a poll after the dump: the ranks still in the task it caught
        await settle(pilot, lambda: bool(app.marks), "the recorded dump's suspects")
        app.screen.tick(app.engine.clock())
        await pilot.pause()

    assert snap_compare(VerltopApp(engine), terminal_size=SIZE, run_before=run)


@pytest.mark.parametrize("all_", [False, True], ids=["d", "D"])
def test_dump_scopes(snap_compare, gpu_dash, gpu_report, all_):
    """``d`` on abcd's group row and ``D``: the recorded report opened in each scope, titled."""
    from verltop.ui.screens.stacks import StackScreen

    async def run(pilot):
        await gpu_loaded(pilot)
        await pilot.app.push_screen(StackScreen(pilot.app.snapshot, scope=None if all_ else "abcd",
                                                report=gpu_report, title="dump of abcd" if not all_ else None))
        await pilot.pause()

    assert snap_compare(gpu_app(), terminal_size=SIZE, run_before=run)


assert STALL.stall_after_s == 30  # the pictures' stall limit, as test_snapshots.py draws them
