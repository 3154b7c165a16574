"""The TUI driven by Pilot against a real (replayed) dashboard: keys answer, rows stay put."""

from __future__ import annotations

import asyncio

from aiohttp import web

from tests.captures import ray_gpu_cluster
from tests.wait import pilot_wait
from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals
from verltop.sources.aio import within
from verltop.sources.config import Endpoint
from verltop.sources.pyspy import DumpOptions
from verltop.ui.app import VerltopApp
from verltop.ui.screens.stacks import StackScreen
from verltop.ui.widgets.actor_table import ActorTable


def make_app(url: str, **kw) -> VerltopApp:
    iv = Intervals(actors_s=0.3, tasks_s=0.3, nodes_s=0.3, node_detail_s=0.3, timeout_s=2.0)
    return VerltopApp.live(Endpoint(url, "--address", None, None), iv, StallSettings(), use_local=False, **kw)


async def wait_rows(pilot, app, n: int, timeout: float = 10.0) -> ActorTable:
    """The main table once it shows ``n`` rows."""
    t = app.screen.query_one(ActorTable)
    await pilot_wait(pilot, lambda: t.row_count >= n, timeout, f"{n} rows in the table",
                     detail=lambda: f"{t.row_count} rows")
    return t


async def test_rows_grouped_and_keys(replay):
    app = make_app(replay.url)
    async with app.run_test(size=(180, 40)) as pilot:
        t = await wait_rows(pilot, app, 5)
        keys = t.keys
        assert keys[0] == "grp:group:controller" and keys[2] == "grp:group:abcd"
        head = t.cells("grp:group:abcd")["group"]
        assert head.startswith("▼ abcd  ") and head.endswith("2 actors  2 stalled") and "actor_rollout" in head
        r0 = t.cells(keys[3])
        assert [r0[k] for k in ("role", "rank", "pid", "gpu")] == ["actor_rollout", "0", "2120", "0"]
        assert "MAX" in r0["gpu_util"] and "node" not in r0  # one node: no NODE column
        # move to rank 1, survive refreshes
        await pilot.press("j", "j", "j", "j")
        assert t.selected_key() == keys[4]
        built = app.snapshots_shown
        await pilot_wait(pilot, lambda: app.snapshots_shown >= built + 2, 3, "two more snapshots shown")
        assert t.selected_key() == keys[4] and t.rebuilds == 1
        # group by role, then by node, then back
        await pilot.press("g")
        assert "grp:role:actor_rollout" in t.keys
        await pilot.press("g")
        assert t.keys[0] == "grp:node:192.0.2.2"
        await pilot.press("g")
        assert t.keys == keys
        # filter to rank rows of the actor group, then clear
        await pilot.press("slash")
        for ch in "update":
            await pilot.press(ch)
        await pilot.press("enter")
        assert t.keys[0] == "grp:group:abcd" and t.row_count == 3
        await pilot.press("escape")
        assert t.row_count == 5
        # help opens and closes
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert type(app.screen).__name__ == "MainScreen"


async def test_details_shows_log_tail(replay):
    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        await pilot.press("j", "j", "j")  # rank 0 of abcd
        await pilot.press("enter")
        assert type(app.screen).__name__ == "DetailsScreen"
        log = app.screen.query_one("#log")
        await pilot_wait(pilot, lambda: "loading" not in str(log.render()), 5, "the log tail")
        assert "Watchdog caught collective operation timeout" in str(log.render())
        await pilot.press("escape")
        assert type(app.screen).__name__ == "MainScreen"


async def test_dashboard_goes_away_ui_keeps_last_data(replay):
    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        t = await wait_rows(pilot, app, 5)
        replay.hooks["/api/v0/actors"] = lambda req: web.Response(status=500, text="GCS unavailable")
        header = app.screen.query_one("#header")
        await pilot_wait(pilot, lambda: "GCS unavailable" in str(header.render()), 6, "the error in the header",
                         detail=lambda: str(header.render()))
        assert t.row_count == 5  # last good data stays
        # keys still answer at once
        await pilot.press("s")
        assert "sort: gpu" in str(app.screen.query_one("#message").render())
        # recovery without a restart
        del replay.hooks["/api/v0/actors"]
        await pilot_wait(pilot, lambda: "GCS unavailable" not in str(header.render()), 10, "the recovery",
                         detail=lambda: str(header.render()))


async def test_starts_with_dashboard_down_then_says_why():
    from tests.net import free_port

    app = make_app(f"http://127.0.0.1:{free_port()}")
    async with app.run_test(size=(120, 30)) as pilot:
        header = app.screen.query_one("#header")
        await pilot_wait(pilot, lambda: "not reachable" in str(header.render()), 5, "'not reachable' in the header",
                         detail=lambda: str(header.render()))
        await pilot.press("q")


async def test_a_bug_in_a_poll_is_shown_not_swallowed(replay, monkeypatch):
    """A poll that raises (a verltop bug, injected: a dashboard cannot cause one) is named in the header
    with its exception instead of the data silently going stale, and clears when the poll works again."""
    from verltop.sources import dashboard

    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        real = dashboard.fetch_node_detail

        # raised where every node-details poll passes (a report read before is not parsed again: a parser's
        # bug shows with the next new report only)
        async def broken(*a, **kw):
            raise KeyError("workers")

        monkeypatch.setattr(dashboard, "fetch_node_detail", broken)
        header = app.screen.query_one("#header")
        await pilot_wait(pilot, lambda: "node details poll failed" in header.text.plain, 5, "the failed poll",
                         detail=lambda: header.text.plain)
        assert "engine: node details poll failed: KeyError: 'workers'" in header.text.plain
        assert "verltop's log" in header.text.plain
        monkeypatch.setattr(dashboard, "fetch_node_detail", real)
        await pilot_wait(pilot, lambda: "poll failed" not in header.text.plain, 5, "the header to clear",
                         detail=lambda: header.text.plain)


async def test_a_dump_that_fails_says_so_on_its_screen(replay, monkeypatch):
    """A dump whose capture raises (a bug, injected) ends with the reason on the stack screen, never with
    "dumping…" left there for ever; `r` then works again."""
    from verltop.sources import stacks

    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_rows(pilot, app, 5)

        async def broken(self, targets, on_progress=None):
            raise RuntimeError("capture exploded")

        monkeypatch.setattr(stacks.StackCapture, "capture", broken)
        await pilot.press("D")
        status = app.screen.query_one("#stack-status")
        await pilot_wait(pilot, lambda: "failed" in str(status.render()), 5, "the failed dump's status",
                         detail=lambda: str(status.render()))
        text = str(status.render())
        assert "the dump failed: RuntimeError: capture exploded" in text and "dumping" not in text
        assert app.screen.report is None and app.screen.job.problem.kind == "internal"


async def test_stack_screen_opens_a_finished_dump_and_r_takes_a_new_one():
    """``StackScreen(snap, report=...)`` shows a dump as it is, taking nothing; ``r`` dumps again through a
    live engine, and is refused by a recording; ``f`` on a dump not taken here says what to do."""
    with ray_gpu_cluster().dashboard() as dash:
        app = make_app(dash.url)
        opts = DumpOptions(samples=2, interval_s=0.0, via="dashboard")
        async with app.run_test(size=(200, 50)) as pilot:
            await wait_rows(pilot, app, 5)
            await pilot_wait(  # every source in: tasks, and the GPU figures that name rank 0's wait
                pilot, lambda: (snap := app.snapshot) and all(a.task for a in snap.actors)
                and any(a.gpu_util_percent for a in snap.actors), 10, "tasks and GPU figures in the snapshot")
            report = await app.engine.dump(app.snapshot, None, opts).run()
            assert report is not None and [(s.worker_group, s.rank) for s in report.suspects] == [("abcd", 1)]
            tracebacks = lambda: sum(1 for _, p in dash.requests if p.startswith("/worker/traceback"))  # noqa: E731
            taken = tracebacks()
            assert taken == 6  # 3 ranks x 2 samples

            await app.push_screen(StackScreen(app.snapshot, report=report, opts=opts))
            await pilot.pause()
            screen = app.screen
            assert screen.report is report and screen.job is None and tracebacks() == taken  # nothing taken
            # the controller is dumped too, but it is not a rank
            assert str(screen.query_one("#stack-status").render()).startswith(
                "2/2 ranks dumped, 1/1 other process, 2 samples")
            assert "abcd:1" in str(screen.query_one("#suspects").render())
            ranks = screen.query_one("#ranks")
            assert ranks.row_count == 3 and str(ranks.get_row_at(0)[0]) == "▶ abcd"
            await pilot.press("f")
            assert "r takes a new one" in [n.message for n in app._notifications][-1]
            await pilot.press("enter")
            assert type(app.screen).__name__ == "RankStackScreen" and "abcd:1" in str(app.screen.query_one("#rank-stack").render())
            await pilot.press("escape")
            assert app.screen is screen

            await pilot.press("r")  # a live engine: a new dump
            await pilot_wait(  # a busy machine can take seconds
                pilot, lambda: screen.report is not report and screen.job is not None and screen.job.stage == "done",
                20, "the new dump")
            assert screen.report is not report and tracebacks() == 2 * taken
            assert [(s.worker_group, s.rank) for s in screen.report.suspects] == [("abcd", 1)]

            app.engine.live = False  # a recording: nothing to ask
            await pilot.press("escape")
            await app.push_screen(StackScreen(app.snapshot, report=report, opts=opts))
            await pilot.pause()
            # a recording offers neither a new dump nor a Flight Recorder request: not in the footer, and the
            # keys do nothing
            shown = {ab.binding.id for ab in app.screen.active_bindings.values() if ab.binding.show}
            assert "dump-again" not in shown and "flight-recorder" not in shown and "write-dump" in shown
            await pilot.press("r")
            await pilot.pause()
            assert app.screen.report is report and tracebacks() == 2 * taken


async def test_a_tick_just_before_a_snapshot_is_left_to_it_but_never_two_in_a_row(replay):
    """The clocks tick a second after each snapshot; a tick that the next snapshot (by the last gaps between
    them) would follow within a moment is skipped, so a 2 s refresh repaints twice, not three times; a
    snapshot that does not come costs the clocks one second at most."""
    import time

    from verltop.ui.screens.main import MainScreen

    app = make_app(replay.url)
    async with app.run_test(size=(180, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        app.engine.paused = True  # no snapshot lands while the rule is looked at
        main = app.screen
        assert isinstance(main, MainScreen)
        ticks: list[float] = []
        main.tick = ticks.append  # type: ignore[method-assign]
        app._gaps = (2.0, 2.0, 2.0)
        app._shown_at = time.monotonic() - 1.0  # the tick a second after a snapshot: the next is a second off
        app._tick()
        assert len(ticks) == 1
        app._shown_at = time.monotonic() - 1.9  # the next snapshot is due within the skip window
        app._tick()
        assert len(ticks) == 1, "a tick right before the next snapshot repaints for nothing"
        app._tick()  # that snapshot did not come: this tick is not skipped too
        assert len(ticks) == 2
        app._tick()
        assert len(ticks) == 2  # skipped again, once, as the snapshot is still due
        shown = app.snapshots_shown
        app.engine.paused = False
        await pilot_wait(pilot, lambda: app.snapshots_shown > shown, 10, "a snapshot shown after the pause")
        assert app._shown_at is not None and time.monotonic() - app._shown_at < 1.0  # the ticks' phase moved


async def test_rows_worked_out_before_a_filter_are_not_shown(replay, monkeypatch):
    """A snapshot's rows are worked out off the UI loop; a filter typed meanwhile makes them stale: the table
    shows the filtered layout, not the rows of before until the next snapshot."""
    import re

    from verltop.ui.screens.main import MainScreen

    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        t = await wait_rows(pilot, app, 5)
        screen = app.screen
        real = MainScreen.table_rows
        calls: list[int] = []

        def meanwhile(self, snap):
            rows = real(self, snap)
            if not calls:  # the user's filter lands while the first layout is worked out
                self.filter_rx = re.compile("no-such-actor")
                self.layout_gen += 1
            calls.append(len(rows))
            return rows

        monkeypatch.setattr(MainScreen, "table_rows", meanwhile)
        app._pending = app.engine.latest
        await app._show()
        monkeypatch.setattr(MainScreen, "table_rows", real)
        assert len(calls) == 2 and calls[0] >= 5 and calls[1] == 0  # the stale layout, then the filtered one
        assert t.row_count <= 1 and screen.filter_rx is not None, t.row_count  # the header line at most


async def test_a_screen_whose_widgets_went_while_its_rows_were_worked_out_is_skipped(replay, monkeypatch):
    """The app closing while a snapshot's rows are worked out off the UI loop: its screens' widgets are gone
    when the rows come back; the snapshot is dropped, not raised from a task nobody awaits (asyncio then
    printed a traceback at exit)."""
    from verltop.ui.screens.main import MainScreen
    from verltop.ui.widgets.header_bar import HeaderBar

    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        header = app.screen.query_one(HeaderBar)
        shown = app.snapshot
        real = MainScreen.table_rows

        def meanwhile(self, snap):
            app.call_from_thread(header.remove)  # on the UI loop, while this runs off it
            return real(self, snap)

        monkeypatch.setattr(MainScreen, "table_rows", meanwhile)
        app._pending = app.engine.latest
        await app._show()  # no NoMatches out of it
        monkeypatch.setattr(MainScreen, "table_rows", real)
        assert app.snapshot is shown and not app.screen.query(HeaderBar)


async def test_the_clocks_tick_on_a_screen_whose_widgets_went(replay, monkeypatch):
    """The app closing: the clocks' tick can reach a main screen whose table is already gone (seen under load
    in CI: NoMatches out of a timer ends the app with a traceback). The tick passes over it."""
    from textual.css.query import NoMatches

    from verltop.ui.screens.main import MainScreen

    def gone(self):
        raise NoMatches("the table went with the app")

    app = make_app(replay.url)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        monkeypatch.setattr(MainScreen, "table", property(gone))
        app._skipped = True  # the tick is not the one skipped for a snapshot due
        app._tick()  # no NoMatches out of it
        monkeypatch.undo()
        assert app.screen.query_one(ActorTable).row_count >= 5


async def test_the_first_polls_take_the_reads_sent_before_the_app(replay):
    """`verltop` sends its first reads before Textual and the engine are imported (~0.4 s); the first polls
    take those answers instead of asking again: each prefetched read is one a poll makes, to the parameter."""
    from verltop.engine.prefetch import prefetch_tui, tui_reads

    endpoint = Endpoint(replay.url, "--address", None, None)
    pre = prefetch_tui(endpoint, 2.0)  # make_app's timeout
    app = make_app(replay.url, prefetch=pre)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        await pilot_wait(pilot, lambda: app.engine.src.nodes.tries, 10, "the nodes asked once")
        left = [r for r in tui_reads(2.0) if pre.take(*r) is not None]
        assert left == [], left  # every one taken by a poll: none was sent for nothing


async def test_q_quits_even_when_the_engine_does_not_stop(replay, caplog):
    """A bug that hangs the engine's stop (a lost cancel, as once) never hangs quitting: the app waits its
    ``stop_wait_s``, says so in the log, and goes."""
    app = make_app(replay.url)
    app.stop_wait_s = 0.3
    real_stop, forever = app.engine.stop, asyncio.Event()

    async def hung() -> None:
        await real_stop()
        await forever.wait()

    app.engine.stop = hung

    async def session() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_rows(pilot, app, 5)
            await pilot.press("q")

    await within(session(), 30)
    assert "the engine did not stop within 0.3 s" in caplog.text
