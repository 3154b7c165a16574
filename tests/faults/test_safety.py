"""Never harm the job: what verltop sends to the dashboard, counted on the server's side.

Every request of a TUI session (every screen, a dump, the logs) and of the CLI commands is a GET to a path
on verltop's read-only allow-list; nothing touches /worker/traceback (py-spy on the job) until a dump is
asked. (No listening socket and no py-spy without a dump, watched on the real process: test_live_cluster.py.)
"""

from __future__ import annotations

import json

from tests.fakeray import FakeDashboard
from tests.faults.helpers import verltop
from tests.wait import pilot_wait
from verltop.engine.monitor import Intervals
from verltop.sources.config import Endpoint
from verltop.sources.http import ALLOWED_PATHS, allowed
from verltop.ui.app import VerltopApp
from verltop.ui.widgets.actor_table import ActorTable

# GETs that change a Ray cluster; none of them may ever be called
MUTATING = ("/api/actors/kill", "/api/jobs/", "/api/serve/", "/api/v0/delete", "/worker/cpu_profile",
            "/worker/gpu_profile", "/memory_profile", "/task/cpu_profile")


def requests_seen(fd: FakeDashboard) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in list(fd.stats.log)]


def assert_read_only(seen: list[tuple[str, str]]) -> None:
    assert seen
    bad = [(m, p) for m, p in seen if m != "GET" or not allowed(p) or p.startswith(MUTATING)]
    assert bad == [], bad


async def test_tui_session_and_dump_send_only_allowed_gets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with FakeDashboard(nodes=2, gpus_per_node=2, profiling=True, dead_actors=2) as fd:
        iv = Intervals(actors_s=0.3, tasks_s=0.3, nodes_s=0.3, node_detail_s=0.3, timeout_s=3.0)
        app = VerltopApp.live(Endpoint(fd.url, "--address", None, None), iv, use_local=False)
        async with app.run_test(size=(200, 50)) as pilot:
            t = app.screen.query_one(ActorTable)
            await pilot_wait(pilot, lambda: t.row_count > 5, 10, what="rows")
            shown = app.snapshots_shown  # a quiet session: the job's processes are never sampled on a timer
            await pilot_wait(pilot, lambda: app.snapshots_shown >= shown + 5, 10, "five more snapshots shown")
            assert fd.count("/worker/traceback") == 0 and fd.count("/api/v0/logs/file") == 0
            for keys in (("s",), ("g",), ("g",), ("g",), ("p",), ("p",), ("question_mark", "escape")):
                await pilot.press(*keys)
            for _ in range(4):
                await pilot.press("j")
            await pilot.press("enter")  # details: the log tail
            await pilot_wait(pilot, lambda: "loading" not in str(app.screen.query_one("#log").render()), 10,
                           what="the log")
            await pilot.press("o", "r", "escape")
            await pilot.press("d")  # the selected group, through the dashboard's py-spy
            await pilot_wait(pilot, lambda: getattr(app.screen, "report", None) is not None, 30, what="the dump")
            assert fd.count("/worker/traceback") > 0
            status = app.screen.query_one("#stack-status")
            await pilot.press("w")  # the dump written here, as text and JSON, readable by the user only
            js, txt = sorted(tmp_path.glob("verltop-dump-*"))  # .json, .txt
            assert f"wrote {txt} and {js.name}" in str(status.render())
            assert txt.stat().st_mode & 0o777 == js.stat().st_mode & 0o777 == 0o600
            assert "rank" in txt.read_text() and json.loads(js.read_text())["ranks"]
            await pilot.press("f")  # no local rank here: nothing to ask, said on the screen
            await pilot_wait(pilot, lambda: str(status.render()).startswith("Flight Recorder: "), 20,
                             "the Flight Recorder's answer", detail=lambda: str(status.render()))
            await pilot.press("escape", "D")
            await pilot_wait(pilot, lambda: getattr(app.screen, "report", None) is not None, 30, what="dump all")
            await pilot.press("r")
            await pilot_wait(pilot, lambda: getattr(app.screen, "report", None) is not None, 30, what="again")
            await pilot.press("escape", "q")
    seen = requests_seen(fd)
    assert_read_only(seen)
    paths = {p for _, p in seen}
    # the session did use every kind of endpoint verltop has (so the check above covered them)
    for want in ("/api/v0/actors", "/api/v0/tasks", "/api/v0/nodes", "/nodes", "/api/v0/logs/file",
                 "/worker/traceback"):
        assert want in paths, want
    assert any(p.startswith("/nodes/") for p in paths)
    assert len(list(tmp_path.glob("verltop-dump-*"))) == 2


def test_cli_sends_only_allowed_gets():
    with FakeDashboard(nodes=2, gpus_per_node=2, profiling=True) as fd:
        for cmd in (["snapshot", "--json"], ["snapshot"], ["dump", "--json", "--samples", "1"],
                    ["dump", "--via", "dashboard", "--native", "--samples", "1"]):
            p = verltop("--address", fd.url, *cmd, "--no-local")
            assert p.returncode == 0, p.stderr
        doc = json.loads(verltop("--address", fd.url, "dump", "--json", "--samples", "1", "--no-local").stdout)
        assert doc["ranks"] and all(r["error"] is None for r in doc["ranks"])
        assert_read_only(requests_seen(fd))


def test_allow_list_is_the_documented_read_only_set():
    """The allow-list itself: adding an endpoint is a decision this test makes visible."""
    assert [rx.pattern for rx in ALLOWED_PATHS] == [
        r"^/api/v0/(actors|tasks|nodes)$", r"^/api/v0/(objects|jobs)$", r"^/nodes$", r"^/nodes/[0-9a-fA-F]{8,64}$", r"^/api/v0/logs/file$",
        r"^/worker/traceback$", r"^/api/authentication_mode$", r"^/api/profiling_enabled$", r"^/api/version$",
        r"^/api/v0/placement_groups$", r"^/api/cluster_status$",
    ]
    for p in MUTATING:
        assert not allowed(p)
