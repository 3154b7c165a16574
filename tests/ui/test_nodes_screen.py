"""The nodes view (`n`): the doctor's job run by the engine against a real (replayed) dashboard listing three
nodes, with the probes run in this process (the functions a probe runs, on this machine's real facts; one
node's answer altered the way a drifted node's would be). The table, the red cell, the findings, `r`, Esc
while a node is silent (the job is cancelled and the probes closed), a recording."""

from __future__ import annotations

import asyncio
import copy
import json
import platform
from importlib import metadata
from typing import Any

from aiohttp import web
from textual.widgets import DataTable, Static

from tests.ui.test_main_screen import make_app, wait_rows
from tests.wait import pilot_wait
from verltop.engine.doctor import DoctorJob
from verltop.sources import node_check
from verltop.sources.probe_connect import RayNode
from verltop.ui.screens.nodes import NodesScreen

IDS = ["c05c9662dbeaf72133be68beae1a7fe2b4758589d600022cc73ee441", "aa" * 28, "bb" * 28]
IPS = ["192.0.2.2", "192.0.2.3", "192.0.2.4"]


def three_nodes(replay) -> None:
    doc = json.loads((replay.dir / "api_v0_nodes.json").read_text())
    one = doc["data"]["result"]["result"][0]
    rows = []
    for i, (nid, ip) in enumerate(zip(IDS, IPS, strict=True)):
        rows.append({**copy.deepcopy(one), "node_id": nid, "node_ip": ip, "node_name": ip, "is_head_node": i == 0})
    doc["data"]["result"]["result"] = rows
    doc["data"]["result"]["total"] = doc["data"]["result"]["num_after_truncation"] = 3
    replay.hooks["/api/v0/nodes"] = lambda req: web.json_response(doc)


class LocalRunner:
    """A ``NodeRunner`` stand-in: every node's functions run here; ``drift`` alters one node's facts;
    ``silent`` nodes never answer (until cancelled)."""

    def __init__(self, drift: dict[str, Any] | None = None, silent: set[str] = frozenset()) -> None:
        self.drift = drift or {}
        self.silent = silent
        self.closed = False
        self.calls = 0

    async def connect(self, node_ids) -> None:
        list(node_ids)
        return None

    def start(self, node_ids) -> None:
        list(node_ids)

    @property
    def nodes(self) -> dict[str, RayNode]:
        return {nid: RayNode(nid, True, ip, "host", "/tmp/ray/session_test", 0.0) for nid, ip in zip(IDS, IPS, strict=True)}

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, None]:
        self.calls += 1
        if node_id in self.silent:
            await asyncio.Event().wait()
        v = await asyncio.to_thread(fn, *args)
        if fn is node_check.collect and node_id in self.drift:
            v = copy.deepcopy(v)
            v["versions"].update(self.drift[node_id])
        return v, None

    async def close(self) -> None:
        self.closed = True


def use_runner(app, runner: LocalRunner) -> None:
    eng = app.engine
    eng.doctor = lambda path=None, node_timeout_s=30.0, on_progress=None: DoctorJob(
        eng.client, path, node_timeout_s, on_progress, runner=runner)


def installed(dist: str) -> str:
    try:
        return metadata.version(dist).split("+")[0]
    except metadata.PackageNotFoundError:
        return "absent"


def status(screen) -> str:
    return str(screen.query_one("#doctor-status", Static).render())


async def test_nodes_view_shows_the_drifted_node_in_red(replay):
    three_nodes(replay)
    app = make_app(replay.url)
    runner = LocalRunner(drift={IDS[2]: {"torch": "2.5.1"}})
    use_runner(app, runner)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_rows(pilot, app, 5)
        await pilot.press("n")
        screen = app.screen
        assert isinstance(screen, NodesScreen)
        await pilot_wait(pilot, lambda: screen.report is not None, 20, "the report")
        assert "3 nodes checked" in status(screen) and "1 mismatch, 0 problems" in status(screen)
        t = screen.query_one("#doctor-table", DataTable)
        assert [c.key.value for c in t.ordered_columns] == ["check", *IDS]  # the head first
        row = t.get_row("torch")
        # this machine's torch (as pip knows it; the cell may carry the build's local tag) on the two
        # healthy nodes, the drifted one's in red
        assert [c.plain.split("+")[0] for c in row[1:]] == [installed("torch"), installed("torch"), "2.5.1"]
        assert row[3].style == "bold red" and row[1].style == row[2].style == ""
        python = t.get_row("python")
        assert [c.plain for c in python[1:]] == [platform.python_version()] * 3
        assert all(c.style == "" for c in python[1:])
        findings = str(screen.query_one("#doctor-findings", Static).render())
        assert f"torch differs: {row[1].plain} on 2 node(s), but 2.5.1 on 192.0.2.4" in findings
        assert "fix: install torch==" in findings
        assert runner.closed
        # r: again (the probes ran again)
        calls, screen.report, runner.closed = runner.calls, None, False
        await pilot.press("r")
        await pilot_wait(pilot, lambda: screen.report is not None, 20, "the report")
        assert runner.calls > calls and runner.closed
        await pilot.press("escape")
        assert not isinstance(app.screen, NodesScreen)


async def test_esc_while_a_node_is_silent_cancels_and_removes_the_probes(replay):
    three_nodes(replay)
    app = make_app(replay.url)
    runner = LocalRunner(silent={IDS[1]})
    use_runner(app, runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        await pilot.press("n")
        screen = app.screen
        await pilot_wait(pilot, lambda: "2/3 answered" in status(screen), 20, "two of three nodes")
        assert "Esc cancels" in status(screen)
        await pilot.press("escape")
        await pilot_wait(pilot, lambda: runner.closed, 20, "the probes closed")
        assert not isinstance(app.screen, NodesScreen) and screen.report is None


async def test_a_recording_cannot_check_nodes(replay):
    app = make_app(replay.url)
    app.engine.doctor = lambda *a, **k: None
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        await pilot.press("n")
        assert "a recording cannot check the nodes" in status(app.screen)


def test_help_lists_the_nodes_view():
    from verltop.ui.screens.help import help_text

    text = help_text().plain
    assert "Nodes view (n)" in text and "every node side by side" in text and "run the check again" in text


async def test_no_node_answers_is_a_check_that_could_not_run(replay):
    three_nodes(replay)
    app = make_app(replay.url)
    runner = LocalRunner()

    async def refuse(node_id, timeout_s, fn, *args):
        from verltop.model import Problem

        return None, Problem("probe", "the probe failed: ActorUnschedulableError")

    runner.call = refuse
    use_runner(app, runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_rows(pilot, app, 5)
        await pilot.press("n")
        screen = app.screen
        await pilot_wait(pilot, lambda: "could not run" in status(screen), 20, "the check that could not run")
        assert "no node could be checked (3 tried): the probe failed: ActorUnschedulableError" in status(screen)
        assert screen.report is None and runner.closed
