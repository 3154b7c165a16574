from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
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


# Under `pytest -n 2 --dist loadgroup` (the README's test command) the real-cluster tests are the long pole, and
# they mostly wait (for hangs, steps, timeouts), so they run as two groups, one per worker, each one cluster at a
# time: "demo" (the demo's cluster and the pending job's, both started by ray.init, whose dashboard agent takes
# Ray's fixed port 52365) and "clusters" (ray.cluster_utils clusters, whose heads take a free agent port: see
# tests/net.py AGENT_PORT). The unit tests fill the gaps on both. Modules that listen on fixed ports (their SVGs
# show the address) stay on one worker together.
_FIXED_PORT_MODULES = ("test_snapshots.py", "test_more_screens.py", "test_narrow_screens.py")
_ON_RAY_INIT = {"demo", "hung_demo", "tp_hung_demo", "sandbox_hung_demo", "dashboard", "pending_cluster"}


def cluster_group(item: pytest.Item) -> str:
    """Which real-cluster group a test runs in (see above)."""
    return "demo" if _ON_RAY_INIT & set(getattr(item, "fixturenames", ())) else "clusters"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for it in items:
        if it.get_closest_marker("ray") is not None:
            it.add_marker(pytest.mark.xdist_group(cluster_group(it)))
        elif Path(str(it.path)).name in _FIXED_PORT_MODULES:
            it.add_marker(pytest.mark.xdist_group("fixed-ports"))
    # the real-cluster tests go first, so each worker starts on its group at once
    items.sort(key=lambda it: it.get_closest_marker("ray") is None)


@pytest.fixture(autouse=True)
def _no_stray_ray_cluster(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests on synthetic dashboards must not reach a real Ray cluster that runs on this machine meanwhile
    (the other worker's): a probe would ray.init into it with address="auto" and wait for nodes it does not
    have. A GCS address where nothing listens makes a probe fail at once, as on a machine without Ray;
    RAY_ADDRESS is not an http(s) URL, so the dashboard address is unaffected."""
    if request.node.get_closest_marker("ray") is None and "RAY_ADDRESS" not in os.environ:
        monkeypatch.setenv("RAY_ADDRESS", NO_RAY_CLUSTER)


@pytest.fixture(autouse=True)
def _verltop_log_restored() -> Iterator[None]:
    """A command run in-process (``cli.main``) points verltop's logger at its own handler, the stderr of that
    test, and stops it propagating; left so, a later test's records go to a closed stream and never reach
    ``caplog``. Each test ends with the logger as it found it."""
    lg = logging.getLogger("verltop")
    handlers, propagate, level = list(lg.handlers), lg.propagate, lg.level
    yield
    for h in lg.handlers:
        if h not in handlers:
            h.close()
    lg.handlers[:] = handlers
    lg.propagate, lg.level = propagate, level
