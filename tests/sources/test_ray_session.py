"""The local Ray session's dashboard, read from the files Ray 2.60 leaves in its session directory."""

from __future__ import annotations

import pytest

from tests.replay_server import ReplayDashboard
from verltop.sources.config import DEFAULT_ADDRESS, local_session_address
from verltop.sources.ray_session import answers, session_dashboard

# as Ray 2.60's dashboard logs it (ray/dashboard/http_server_head.py), between its other lines
LOG = ("2026-12-02 06:54:34,527\tINFO head.py:516 -- Initialize the http server.\n"
       "2026-12-02 06:54:34,591\tINFO http_server_head.py:492 -- Dashboard head http address: 127.0.0.1:{port}\n"
       "2026-12-02 06:54:34,591\tINFO http_server_head.py:499 -- <ResourceRoute [GET] <PlainResource  /> ...>\n")


def session(tmp_path, text: str, name: str = "dashboard.log") -> dict[str, str]:
    """A Ray temp dir with one session, ``session_latest`` pointing at it, as ``ray start`` leaves it."""
    real = tmp_path / "ray" / "session_2026-12-02_06-54-31_436280_24725"
    (real / "logs").mkdir(parents=True)
    (real / "logs" / name).write_text(text)
    (tmp_path / "ray" / "session_latest").symlink_to(real)
    return {"RAY_TMPDIR": str(tmp_path)}


def test_reads_the_port_the_dashboard_bound(tmp_path):
    assert session_dashboard(session(tmp_path, LOG.format(port=60341))) == "http://127.0.0.1:60341"


def test_a_rotated_log_still_says_it(tmp_path):
    env = session(tmp_path, LOG.format(port=47913), "dashboard.log.1")
    (tmp_path / "ray" / "session_latest" / "logs" / "dashboard.log").write_text("INFO nothing about ports\n")
    assert session_dashboard(env) == "http://127.0.0.1:47913"


def test_no_session_or_no_line_is_none(tmp_path):
    assert session_dashboard({"RAY_TMPDIR": str(tmp_path)}) is None
    assert session_dashboard(session(tmp_path, "INFO starting\n")) is None


def test_used_only_when_nothing_names_a_cluster_and_8265_is_silent(tmp_path):
    env = session(tmp_path, LOG.format(port=56281))
    found = "http://127.0.0.1:56281"
    up = {found}
    assert local_session_address(env, lambda u: u in up) == found
    assert local_session_address({**env, "RAY_ADDRESS": "auto"}, lambda u: u in up) == found
    assert local_session_address({**env, "RAY_ADDRESS": "10.0.0.1:6379"}, lambda u: u in up) is None
    # a GCS address is this session's when its port is the one the session's GCS listens on
    (tmp_path / "ray" / "session_latest" / "gcs_server_port_640bcb67").write_text("6379")
    assert local_session_address({**env, "RAY_ADDRESS": "10.0.0.1:6379"}, lambda u: u in up) == found
    assert local_session_address({**env, "RAY_ADDRESS": "10.0.0.1:6380"}, lambda u: u in up) is None
    assert local_session_address(env, lambda u: u in up | {DEFAULT_ADDRESS}) is None  # 8265 answers: it
    assert local_session_address(env, lambda u: False) is None  # a session that ended


def test_snapshot_in_another_shell_finds_the_session(tmp_path):
    """``verltop snapshot`` with no address: 8265 silent, the session's dashboard (a real server) is read."""
    from tests.test_cli import run

    if answers(DEFAULT_ADDRESS):
        pytest.skip("something answers on 8265 on this machine")
    with ReplayDashboard() as d:
        port = d.url.rsplit(":", 1)[1]
        env = session(tmp_path, LOG.format(port=port))
        p = run("snapshot", "--no-local", env={**env, "RAY_ADDRESS": ""})
        assert p.returncode == 0, p.stderr
        assert d.url.split("://")[1] in p.stdout.splitlines()[0] and "actor_rollout" in p.stdout
