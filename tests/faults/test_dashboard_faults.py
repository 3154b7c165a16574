"""Every dashboard fault against a real HTTP server (the synthetic Ray 2.60 dashboard, tests/fakeray):

- the CLI (a real process) exits non-zero with ONE ``verltop: error:`` line, no traceback, nothing on stdout;
- the TUI (Pilot) keeps its last good rows, says what is wrong in one line, marks the data stale, keeps
  answering keys, and recovers by itself when the dashboard does;
- schema drift that still carries the data (fields missing, new fields, nulls) is not an error at all.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest
from aiohttp import web

from tests.fakeray import FakeDashboard
from tests.faults.helpers import assert_one_line_error, clean_env, verltop
from tests.replay_server import ReplayDashboard
from tests.wait import pilot_wait
from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals
from verltop.engine.polling import MAX_BACKOFF_S
from verltop.sources.config import Endpoint
from verltop.ui.app import VerltopApp
from verltop.ui.widgets.actor_table import ActorTable

TOKEN = "fault-test-token-5e4d3c2b1a"

# name -> (fault knobs on every path, what the one line must say)
FAULTS: dict[str, tuple[dict, tuple[str, ...]]] = {
    "404": ({"status_code": 404}, ("404", "not found on this dashboard")),
    "429": ({"status_code": 429}, ("429", "overloaded")),
    "500": ({"status_code": 500}, ("dashboard error 500: Failed to query data from GCS",)),
    "html": ({"html": True}, ("HTML, not JSON",)),
    "truncated": ({"truncate": True}, ("invalid JSON (truncated?)",)),
    "envelope-drift": ({"drop_fields": {"result"}}, ("schema changed",)),
    "ids-drift": ({"drop_fields": {"actor_id", "task_id"}}, ("lack actor_id", "schema changed")),
    "slow": ({"delay_s": 5}, ("did not answer within",)),  # later than --timeout 1 (+2 s grace)
}


def fake(**kw) -> FakeDashboard:
    kw.setdefault("nodes", 1)
    kw.setdefault("gpus_per_node", 4)
    kw.setdefault("seed", 5)
    return FakeDashboard(**kw)


# ---------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_cli_one_line_per_fault(name):
    knobs, needles = FAULTS[name]
    with fake() as fd:
        for k, v in knobs.items():
            setattr(fd.faults, k, v)
        for cmd in (["snapshot", "--json"], ["dump", "--json"]):
            t0 = time.monotonic()
            p = verltop("--address", fd.url, "--timeout", "1", *cmd, "--no-local")
            assert_one_line_error(p, *needles)
            assert time.monotonic() - t0 < 15  # a 30 s answer is not waited for (--timeout 1)
        fd.clear_faults()
        p = verltop("--address", fd.url, "snapshot", "--json", "--no-local")
        assert p.returncode == 0 and json.loads(p.stdout)["actors"]


def test_cli_dashboard_down_then_up():
    with fake() as fd:
        fd.take_down()
        for cmd in (["snapshot"], ["dump", "--json"], ["snapshot", "--json"]):
            assert_one_line_error(verltop("--address", fd.url, *cmd, "--no-local"), "not reachable", "--address")
        fd.bring_up()
        assert verltop("--address", fd.url, "snapshot", "--no-local").returncode == 0


def test_cli_missing_and_wrong_token():
    with fake(token=TOKEN) as fd:
        for cmd in (["snapshot", "--json"], ["dump", "--json"]):
            line = assert_one_line_error(verltop("--address", fd.url, *cmd, "--no-local"), "401")
            assert "RAY_AUTH_TOKEN" in line and "RAY_AUTH_TOKEN_PATH" in line and "~/.ray/auth_token" in line
            p = verltop("--address", fd.url, *cmd, "--no-local", env=clean_env(RAY_AUTH_TOKEN="wrong-" + TOKEN))
            line = assert_one_line_error(p, "403", "wrong Ray auth token", "RAY_AUTH_TOKEN")
            assert TOKEN not in line
        p = verltop("--address", fd.url, "snapshot", "--json", "--no-local", env=clean_env(RAY_AUTH_TOKEN=TOKEN))
        assert p.returncode == 0 and TOKEN not in p.stdout + p.stderr


def _actor_ranks(doc: dict) -> list[tuple]:
    return sorted((a["worker_group"] or "", a["rank"] if a["rank"] is not None else -1, a["class_name"])
                  for a in doc["actors"])


def test_cli_schema_drift_missing_fields_and_nulls_still_report():
    """Fields verltop can do without: gone or null, the snapshot still lists every actor (unknown = null)."""
    from tests.test_cli import ACTOR_KEYS

    with fake() as fd:
        healthy = json.loads(verltop("--address", fd.url, "snapshot", "--json", "--no-local").stdout)
        drifts = [
            {"drop_fields": {"pid", "serialized_runtime_env", "start_time_ms", "death_cause", "cpu", "mem", "gpus",
                             "hostname", "node_name"}},
            {"null_fields": {"pid", "node_id", "serialized_runtime_env", "start_time_ms", "name", "state", "cpu",
                             "mem", "gpus", "workers", "node_ip", "is_head_node"}},
        ]
        for knobs in drifts:
            fd.clear_faults()
            for k, v in knobs.items():
                setattr(fd.faults, k, v)
            p = verltop("--address", fd.url, "snapshot", "--json", "--no-local")
            assert p.returncode == 0, p.stderr
            doc = json.loads(p.stdout)
            assert len(doc["actors"]) == len(healthy["actors"])
            assert all(set(a) == ACTOR_KEYS for a in doc["actors"])
            p = verltop("--address", fd.url, "snapshot", "--no-local")
            assert p.returncode == 0 and "Traceback" not in p.stderr


def test_cli_schema_drift_new_fields_change_nothing():
    with ReplayDashboard() as d:
        base = json.loads(verltop("--address", d.url, "snapshot", "--json", "--no-local").stdout)

        def add_fields(name: str) -> Callable[[web.Request], web.Response]:
            def hook(req: web.Request) -> web.Response:
                doc = json.loads((d.dir / name).read_text())
                doc["new_top_level"] = {"ray": "2.99"}
                inner = doc["data"].get("result") or {}
                for row in inner.get("result", []) if isinstance(inner, dict) else []:
                    row["brand_new_field"] = [1, {"x": None}]
                    row["labels_v2"] = {"k": "v"}
                for row in doc["data"].get("summary", []):
                    row["brand_new_field"] = 7
                return web.json_response(doc)
            return hook

        d.hooks["/api/v0/actors"] = add_fields("api_v0_actors.json")
        d.hooks["/api/v0/tasks"] = add_fields("api_v0_tasks.json")
        d.hooks["/api/v0/nodes"] = add_fields("api_v0_nodes.json")
        d.hooks["/nodes"] = add_fields("nodes_view_summary.json")
        p = verltop("--address", d.url, "snapshot", "--json", "--no-local")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert _actor_ranks(doc) == _actor_ranks(base) and doc["source"]["errors"] == []
        assert [a["stalled"] for a in doc["actors"]] == [a["stalled"] for a in base["actors"]]


# ---------------------------------------------------------------------------------------------- TUI


def make_app(url: str, token: str | None = None, interval: float = 0.3) -> VerltopApp:
    iv = Intervals(actors_s=interval, tasks_s=interval, nodes_s=interval, node_detail_s=interval, timeout_s=1.0)
    ep = Endpoint(url, "--address", token, "RAY_AUTH_TOKEN" if token else None)
    return VerltopApp.live(ep, iv, StallSettings(), use_local=False)


def header(app) -> str:
    """The header's text, the dashboard's address left out: its random port (say 42913) may hold the very
    status code a test looks for."""
    return re.sub(r"https?://\S+", "<dashboard>", app.screen.query_one("#header").text.plain)


def is_stale(app) -> bool:
    return app.screen.query_one("#header").has_class("-stale")


async def _fault_and_recovery(app, pilot, apply: Callable[[], None], clear: Callable[[], None],
                              needles: tuple[str, ...], timeout: float = 10.0) -> None:
    t = app.screen.query_one(ActorTable)
    await pilot_wait(pilot, lambda: t.row_count > 3, 10, what="rows")
    keys = list(t.keys)
    built = app.engine.snapshots_built
    apply()
    await pilot_wait(pilot, lambda: all(n in header(app) for n in needles), timeout, what=f"{needles} in the header")
    err_line = next(ln for ln in header(app).splitlines() if needles[0] in ln)
    assert is_stale(app)
    assert list(t.keys) == keys  # the last good rows stay, in place
    await pilot.press("s")  # and the keys still answer at once
    assert "sort:" in app.screen.query_one("#message").text.plain
    await pilot.press("s", "s", "s", "s")
    assert app.engine.snapshots_built > built  # the UI kept rebuilding (ages tick) on the last good data
    assert "\n" not in err_line
    clear()
    # a source may have just begun its longest back-off: its next try, a snapshot, and room for a loaded machine
    await pilot_wait(pilot, lambda: not any(n in header(app) for n in needles) and not is_stale(app),
                     MAX_BACKOFF_S + 20, what="recovery",
                     detail=lambda: (header(app), is_stale(app), app.engine.snapshots_built,
                                     [(s.name, s.backoff_s, s.error.text if s.error else None)
                                      for s in (*app.engine.src.all(), app.engine.pending.state) if s.error]))
    assert len(t.keys) == len(keys)


@pytest.mark.parametrize("name", sorted(FAULTS))
async def test_tui_keeps_last_good_data_and_recovers(name):
    knobs, needles = FAULTS[name]
    async with fake() as fd:
        app = make_app(fd.url)
        async with app.run_test(size=(180, 40)) as pilot:

            def apply() -> None:
                for k, v in knobs.items():
                    setattr(fd.faults, k, v)

            await _fault_and_recovery(app, pilot, apply, fd.clear_faults, needles, timeout=12)
            await pilot.press("q")


async def test_tui_dashboard_goes_away_and_comes_back():
    """Connection refused for real (the server stops listening): rows stay, the data is called stale with
    its age, and the TUI picks up again when the server is back, without a restart."""
    async with fake() as fd:
        app = make_app(fd.url)
        async with app.run_test(size=(180, 40)) as pilot:
            t = app.screen.query_one(ActorTable)
            await pilot_wait(pilot, lambda: t.row_count > 3, 10, what="rows")
            n = t.row_count
            fd.take_down()
            await pilot_wait(pilot, lambda: "not reachable" in header(app), 10, what="not reachable")
            await pilot_wait(pilot, lambda: "(stale)" in header(app), 12, what="the stale mark")
            assert is_stale(app) and t.row_count == n
            assert "old (stale)" in header(app)
            fd.bring_up()
            await pilot_wait(pilot, lambda: "not reachable" not in header(app) and not is_stale(app), 20,
                           what="recovery")
            assert t.row_count == n
            await pilot.press("q")


async def test_tui_started_before_the_dashboard():
    """Not running when the TUI starts: it says so (and how to point it elsewhere), answers keys, and shows
    the cluster as soon as the dashboard is up, without a restart."""
    async with fake() as fd:
        fd.take_down()
        app = make_app(fd.url)
        async with app.run_test(size=(180, 40)) as pilot:
            await pilot_wait(pilot, lambda: "not reachable" in header(app), 10, what="not reachable")
            assert "--address" in header(app) and "\n" not in header(app)
            await pilot.press("question_mark", "escape", "s", "g")
            assert type(app.screen).__name__ == "MainScreen"
            fd.bring_up()
            await pilot_wait(pilot, lambda: app.screen.query_one(ActorTable).row_count > 3, 15, what="rows")
            await pilot_wait(pilot, lambda: "not reachable" not in header(app), 5, what="the error cleared")
            await pilot.press("q")


async def test_tui_token_rejected_then_accepted():
    """401 (no token sent) and 403 (the cluster's token changed under a running TUI)."""
    async with fake(token=TOKEN) as fd:
        app = make_app(fd.url, token=TOKEN)
        async with app.run_test(size=(180, 40)) as pilot:

            def rotate() -> None:
                fd.token = "rotated-" + TOKEN

            def back() -> None:
                fd.token = TOKEN

            await _fault_and_recovery(app, pilot, rotate, back, ("403", "wrong Ray auth token"))
            assert TOKEN not in header(app)
            await pilot.press("q")
        app = make_app(fd.url, token=None)
        async with app.run_test(size=(180, 40)) as pilot:  # no token at all: says where it looked
            await pilot_wait(pilot, lambda: "401" in header(app), 10, what="401")
            assert "RAY_AUTH_TOKEN" in header(app) and "~/.ray/auth_token" in header(app)
            await pilot.press("question_mark")  # the app answers keys with no data at all
            assert type(app.screen).__name__ == "HelpScreen"
            await pilot.press("escape")
            await pilot.press("D")
            assert "no data yet" in app.screen.query_one("#message").text.plain
            fd.token = None
            await pilot_wait(pilot, lambda: app.screen.query_one(ActorTable).row_count > 3, 15,
                           what="rows once the dashboard lets us in")
            await pilot.press("q")


async def _count_while(pilot, fd: FakeDashboard, seconds: float, path: str = "/api/v0/actors") -> int:
    fd.reset_counts()
    await pilot.pause(seconds)
    return fd.count(path)


async def test_tui_backs_off_on_429_and_5xx():
    """Polling at 0.3 s, a healthy dashboard sees ~3 actor requests a second; an overloaded one (429 with no
    Retry-After: 5 s) or a failing one (500: 2, 4, 8 s) sees almost none until it recovers."""
    async with fake() as fd:
        app = make_app(fd.url)
        async with app.run_test(size=(180, 40)) as pilot:
            await pilot_wait(pilot, lambda: app.screen.query_one(ActorTable).row_count > 3, 10, what="rows")
            healthy = await _count_while(pilot, fd, 3.0)
            assert healthy >= 6, healthy
            fd.faults.status_code = 429
            await pilot_wait(pilot, lambda: "429" in header(app), 5, what="429")
            assert await _count_while(pilot, fd, 3.0) <= 1
            fd.clear_faults()
            await pilot_wait(pilot, lambda: "429" not in header(app), 30, what="recovery from 429",
                             detail=lambda: header(app))
            fd.faults.status_code = 503
            await pilot_wait(pilot, lambda: "503" in header(app), 5, what="503")
            assert await _count_while(pilot, fd, 5.0) <= 3
            fd.clear_faults()
            await pilot_wait(pilot, lambda: "503" not in header(app), 30, what="recovery from 503",
                             detail=lambda: header(app))
            assert await _count_while(pilot, fd, 2.0) >= 4  # back to the normal pace
            await pilot.press("q")


async def test_tui_dump_with_profiling_off_says_how_to_turn_it_on():
    """403 on /worker/traceback: each rank of the dump carries the fix; the app stays up."""
    from verltop.sources.pyspy import DumpOptions
    from verltop.ui.screens.stacks import StackScreen

    async with fake(profiling=False) as fd:
        app = make_app(fd.url)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot_wait(pilot, lambda: app.snapshot is not None and app.snapshot.actors, 10, what="actors")
            await app.push_screen(StackScreen(app.snapshot, opts=DumpOptions(samples=1, via="dashboard")))
            await pilot_wait(pilot, lambda: app.screen.report is not None, 20, what="the dump")
            rep = app.screen.report
            assert rep.ranks and all(r.error and "RAY_DASHBOARD_ENABLE_PROFILING" in r.error.text for r in rep.ranks)
            # asked once per node at most 8 at a time: once a 403 said profiling is off, no rank asks again
            assert 1 <= fd.count("/worker/traceback") <= len(rep.ranks)
            await pilot.press("escape")
            assert type(app.screen).__name__ == "MainScreen"
            await pilot.press("q")
