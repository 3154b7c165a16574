"""The probes join with the cluster's own auth mode: what the user set wins, else what the dashboard says
(``/api/authentication_mode``), and a token file alone turns token auth on only when the cluster does not say."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verltop.sources import probe_connect as pc


def serve(status: int, body: bytes) -> Iterator[str]:
    seen: list[tuple[str, str | None]] = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
    assert all(p == "/api/authentication_mode" and a is None for p, a in seen), seen  # public: no token sent


@pytest.mark.parametrize(("status", "body", "want"), [
    (200, json.dumps({"authentication_mode": "disabled"}).encode(), "disabled"),
    (200, json.dumps({"authentication_mode": "token"}).encode(), "token"),
    (404, b"Not Found", "disabled"),  # a Ray from before token auth
    (200, b"<html>", None),
    (500, b"Internal Server Error", None),
    (200, json.dumps({"authentication_mode": "k8s"}).encode(), None),
])
def test_the_dashboard_says_the_mode(status, body, want):
    for url in serve(status, body):
        assert pc.cluster_auth_mode(url) == want


def test_nothing_answers():
    assert pc.cluster_auth_mode("http://127.0.0.1:1", timeout_s=0.5) is None


@pytest.mark.parametrize(("env", "cluster", "token", "want"), [
    ("disabled", "token", True, None),  # the user's RAY_AUTH_MODE is Ray's to read
    ("token", "disabled", False, None),
    (None, "disabled", True, "disabled"),  # a token file, a cluster without auth: auth stays off
    (None, "token", False, "token"),  # Ray then says there is no token
    (None, "token", True, "token"),
    (None, None, True, "token"),  # the cluster does not say: the token at hand decides
    (None, None, False, None),
])
def test_mode_decided(env, cluster, token, want):
    assert pc.auth_mode_for(env, cluster, token) == want


def test_set_from_the_watched_dashboard(monkeypatch, tmp_path):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 64)
    monkeypatch.setenv("HOME", str(tmp_path))
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(pc, "_DASHBOARD", [])
    for url in serve(200, json.dumps({"authentication_mode": "disabled"}).encode()):
        pc.watch_cluster_of(url)
        pc._set_auth_mode()
    import os

    assert os.environ["RAY_AUTH_MODE"] == "disabled"
