from __future__ import annotations

import json
from pathlib import Path

import pytest

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
_FIXED_PORT_MODULES = ("test_snapshots.py", "test_more_screens.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for it in items:
        if it.get_closest_marker("ray") is not None:
            it.add_marker(pytest.mark.xdist_group("clusters"))
        elif Path(str(it.path)).name in _FIXED_PORT_MODULES:
            it.add_marker(pytest.mark.xdist_group("fixed-ports"))
