"""``verltop doctor`` on a one-raylet cluster started without token auth, run by a user whose ``~/.ray`` holds
a token file (left by another cluster): the probes join with the cluster's own mode (its dashboard says
"disabled") and every check runs; with token auth forced on (the token file taken as the mode, as before) Ray
kills them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from doctor_host import DoctorCluster

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def plain_doctor_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoctorCluster]:
    c = DoctorCluster(tmp_path_factory.mktemp("plain-doctor-cluster"), plain=True)
    try:
        yield c
    finally:
        c.stop()


def user_env(c: DoctorCluster, home: Path) -> dict[str, str]:
    """No RAY_ variable; a token file in ~/.ray, as `ray get-auth-token --generate` leaves it."""
    (home / ".ray").mkdir(parents=True, exist_ok=True)
    (home / ".ray" / "auth_token").write_text("f" * 64 + "\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    e["HOME"] = str(home)
    return e


def test_token_file_does_not_turn_auth_on_against_a_cluster_without_it(plain_doctor_cluster, tmp_path):
    c = plain_doctor_cluster
    assert c.dashboard("/api/authentication_mode") == {"authentication_mode": "disabled"}
    env = user_env(c, tmp_path / "home")
    p, _ = c.doctor("--json", env=env)
    assert p.returncode in (0, 1), (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    r = json.loads(p.stdout)
    [node] = r["nodes"]
    assert node["node_id"] == c.nodes["head"] and node["error"] is None, node
    assert node["checks"]["probe"] == "ok", node["checks"]
    assert not any("probe" in x for x in r["problems"]), r["problems"]
