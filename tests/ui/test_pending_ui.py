"""The pending group in the TUI, against replayed real Ray 2.60 answers: a busy verl pool's placement group
shows with why, Enter explains it, and when the other job lets go the line goes and the workers appear."""

from __future__ import annotations

from pathlib import Path

from tests.replay_server import ReplayDashboard
from tests.ui.test_main_screen import make_app
from tests.wait import pilot_wait
from verltop.ui.widgets.actor_table import ActorTable

FIX = Path(__file__).parent.parent / "fixtures" / "pending"
PG = "pend:placement_group:45905af4e8d7d0e8b490746f284a02000000"


async def test_pending_group_then_release():
    with ReplayDashboard(case=FIX / "busy", phase="hung") as d:
        app = make_app(d.url)
        async with app.run_test(size=(200, 40)) as pilot:
            t = app.screen.query_one(ActorTable)
            await pilot_wait(pilot, lambda: PG in t.keys, 10, "the pending placement group's line")
            assert t.keys[:2] == ["grp:pending", PG]
            assert t.cells("grp:pending")["group"].startswith("▼ pending  1 placement group")
            # the nodes' capacities come in their own poll: until then the line says only what Ray says
            line = await pilot_wait(pilot, lambda: (x := t.cells(PG)["pending"]) and "no node has" in x and x, 10,
                                    "the line to name the nodes' free CPUs")
            assert "job2verl_group_4:0" in line and "NO_RESOURCES" in line
            assert "no node has 4 CPU free for all bundles together (node 192.0.2.2: 4 CPU, 0 free)" in line
            # the line under the table has the whole reason; Enter opens the facts
            t.move_cursor(t.keys.index(PG))
            await pilot_wait(pilot, lambda: "waits for resources held by others"
                             in str(app.screen.query_one("#selection").render()), 5, "the selection's line")
            await pilot.press("enter")
            assert type(app.screen).__name__ == "PendingDetailsScreen"
            await pilot.press("escape")
            assert type(app.screen).__name__ == "MainScreen"
            # job 1 lets go: job 2's placement group is placed, its workers appear (still starting)
            d.dir = FIX / "busy" / "released"
            await pilot_wait(pilot, lambda: PG not in t.keys and any(
                k.startswith("grp:group:job2wg") for k in t.keys), 10, "the line to go and job2's workers")
            rows = [k for k in t.keys if not k.startswith(("grp:", "pend:"))]
            assert len(rows) == 8  # job1's 4 dead workers and job2's 4 starting ones
            assert not any(k.startswith("pend:placement_group") for k in t.keys)
            await pilot.press("q")
