"""`verltop replay` driven by Pilot: the main screen on a recording, its time keys, the recorded time in the
header, the incident jump, and the recorded dump in the stack screen."""

from __future__ import annotations

import time

from tests.engine.helpers import write_replay_recording
from tests.wait import pilot_wait
from verltop.engine.recording_reader import Recording
from verltop.engine.replay import LEAD_S, ReplayEngine
from verltop.ui.app import VerltopApp
from verltop.ui.screens.help import help_text
from verltop.ui.screens.replay import ReplayScreen
from verltop.ui.screens.stacks import StackScreen
from verltop.ui.widgets.actor_table import ActorTable


def header(app: VerltopApp) -> str:
    return str(app.screen.query_one("#header").render())


def message(app: VerltopApp) -> str:
    return str(app.screen.query_one("#message").render())


async def settle(pilot, app, cond, timeout: float = 5.0) -> None:
    await pilot_wait(pilot, cond, timeout, "the replay to show it", step=0.05,
                     detail=lambda: app.snapshot and app.snapshot.taken_at)


async def test_replay_keys(tmp_path):
    snaps = write_replay_recording(tmp_path / "r.vtr")
    engine = ReplayEngine(Recording.open(tmp_path / "r.vtr"), paused=True, name="r.vtr")
    app = VerltopApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None)
        assert isinstance(app.screen, ReplayScreen)
        table = app.screen.query_one(ActorTable)
        stamp = time.strftime("%H:%M:%S", time.localtime(snaps[0].taken_at))
        assert "REPLAY ‖ ×1" in header(app) and stamp in header(app) and "+0s / 1m58s" in header(app)
        assert "1 incident(s), 1 recorded dump(s)" in message(app)

        # → steps one snapshot, ← back
        await pilot.press("right")
        await settle(pilot, app, lambda: app.snapshot.taken_at == snaps[1].taken_at)
        await pilot.press("right", "right", "left")
        await settle(pilot, app, lambda: app.snapshot.taken_at == snaps[2].taken_at)
        assert time.strftime("%H:%M:%S", time.localtime(snaps[2].taken_at)) in header(app)

        # ] and [ change the speed; space plays and pauses
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        assert engine.speed == 8.0 and "×8" in header(app) and "speed ×8" in message(app)
        await pilot.press("left_square_bracket")
        assert engine.speed == 4.0
        await pilot.press("space")
        assert engine.playing and "REPLAY ▶ ×4" in header(app)
        await settle(pilot, app, lambda: app.snapshot.taken_at >= snaps[4].taken_at)
        await pilot.press("space")
        assert not engine.playing

        # i: shortly before the incident's hang began; rows turn red as it plays on
        await pilot.press("i")
        assert engine.clock() == snaps[20].taken_at - LEAD_S and "incident 20260101T000050Z-wg" in message(app)
        await settle(pilot, app, lambda: app.snapshot.taken_at == snaps[12].taken_at)
        assert not any(a.stalled for a in app.snapshot.actors)
        assert "stalled" not in table.cells("grp:group:wg")["group"]
        await pilot.press("shift+right")  # +1 min
        await settle(pilot, app, lambda: any(a.stalled for a in app.snapshot.actors))
        assert "4 stalled" in table.cells("grp:group:wg")["group"]

        # d: the recorded dump, in the stack screen, naming the straggler
        await pilot.press("d")
        await settle(pilot, app, lambda: isinstance(app.screen, StackScreen))
        screen = app.screen
        assert screen.report is not None and screen.job is None
        assert "recorded dump of" in str(screen.query_one("#stack-status").render())
        assert "wg:2" in str(screen.query_one("#suspects").render())
        await pilot.press("r")  # no new dumps from a recording
        assert screen.job is None
        await pilot.press("escape")
        assert isinstance(app.screen, ReplayScreen)

        # details of a rank: its recorded facts; the log is not part of a recording
        while table.selected_actor() is None:
            await pilot.press("j")
        await pilot.press("enter")
        assert type(app.screen).__name__ == "DetailsScreen"
        log = app.screen.query_one("#log")
        await settle(pilot, app, lambda: "no logs" in str(log.render()))
        await pilot.press("escape")
        await pilot.press("q")


def test_help_lists_the_replay_keys():
    text = help_text().plain
    for key, what in (("Space", "pause or play the recording"), ("←", "go back one snapshot"),
                      ("[", "play half as fast"), ("]", "play twice as fast"), ("i", "next incident")):
        line = next((ln for ln in text.splitlines() if what in ln), "")
        assert line.strip().startswith(key), (key, line)
