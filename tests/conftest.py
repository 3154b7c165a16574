from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.net import NO_RAY_CLUSTER

FIX = Path(__file__).parent / "fixtures" / "real-gpu"


def load(rel: str) -> str:
    return (FIX / rel).read_text()


def load_json(rel: str):
    return json.loads(load(rel))


@pytest.fixture
def replay():
    from tests.replay_server import ReplayDashboard

    with ReplayDashboard() as d:
        yield d


# Under `pytest -n 2 --dist loadgroup` (the README's test command) one worker runs every real-cluster test,
# one cluster at a time as on a single process, while the other takes the rest: the clusters mostly wait for
# hangs and steps, so the unit tests fill that time. Modules that listen on fixed ports (their SVGs show the
# address) stay on one worker together.
_FIXED_PORT_MODULES = ("test_snapshots.py", "test_more_screens.py", "test_narrow_screens.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for it in items:
        if it.get_closest_marker("ray") is not None:
            it.add_marker(pytest.mark.xdist_group("clusters"))
        elif Path(str(it.path)).name in _FIXED_PORT_MODULES:
            it.add_marker(pytest.mark.xdist_group("fixed-ports"))
    # the real-cluster tests are the long pole: they go first, so their worker starts on them at once
    items.sort(key=lambda it: it.get_closest_marker("ray") is None)


@pytest.fixture(autouse=True)
def _no_stray_ray_cluster(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests on synthetic dashboards must not reach a real Ray cluster that runs on this machine meanwhile
    (the other worker's): a probe would ray.init into it with address="auto" and wait for nodes it does not
    have. A GCS address where nothing listens makes a probe fail at once, as on a machine without Ray;
    RAY_ADDRESS is not an http(s) URL, so the dashboard address is unaffected."""
    if request.node.get_closest_marker("ray") is None and "RAY_ADDRESS" not in os.environ:
        monkeypatch.setenv("RAY_ADDRESS", NO_RAY_CLUSTER)
