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
