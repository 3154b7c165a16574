"""SVG snapshots of every screen, from the real Ray 2.60 capture of a 2x H200 NCCL hang (frozen clock).

Update only after reading the report: `pytest tests/snapshots --snapshot-update`.
"""

from __future__ import annotations

import pytest

from tests.replay_server import ReplayDashboard
from verltop.analysis.stalls import StallSettings
from verltop.sources.config import Endpoint
from verltop.ui.app import VerltopApp

PORT = 28765
# 60 s after both ranks entered actor_rollout_update_actor in the capture
FROZEN_NOW = 1795960279.73 + 60


@pytest.fixture(scope="module")
def dash():
    with ReplayDashboard(port=PORT) as d:
        yield d


def make_app(dash) -> VerltopApp:
    app = VerltopApp.live(Endpoint(dash.url, "--address", None, None), stall=StallSettings(stall_after_s=30),
                     use_local=False, clock=lambda: FROZEN_NOW, autostart=False)
    return app


async def _loaded(pilot) -> None:
    app = pilot.app
    await app.engine.poll_once(seed=False)
    for s in app.engine.src.all():
        s.ok_at = FROZEN_NOW  # ages are part of the picture: freeze them too
    await app.engine.publish_now()
    await app.show_now()
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_main_screen(snap_compare, dash, size):
    assert snap_compare(make_app(dash), terminal_size=size, run_before=_loaded)


def test_main_grouped_by_node(snap_compare, dash):
    async def run(pilot):
        await _loaded(pilot)
        await pilot.press("g", "g")

    assert snap_compare(make_app(dash), terminal_size=(160, 48), run_before=run)


def test_help_screen(snap_compare, dash):
    async def run(pilot):
        await _loaded(pilot)
        await pilot.press("question_mark")

    assert snap_compare(make_app(dash), terminal_size=(160, 48), run_before=run)
