"""The dashboard client against a real local server: every fault is one clear line, never an exception."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from tests.net import free_port
from tests.replay_server import ReplayDashboard
from verltop.sources import dashboard as D
from verltop.sources.config import Endpoint
from verltop.sources.http import DashboardClient, allowed


def ep(url, token=None, src=None):
    return Endpoint(url, "--address", token, src)


async def actors(url, token=None, src=None, timeout=3.0):
    c = DashboardClient(ep(url, token, src))
    try:
        return await D.fetch_actors(c, timeout)
    finally:
        await c.close()


def test_ok(replay):
    r = asyncio.run(actors(replay.url))
    assert r.ok and len(r.value) == 3


def test_missing_and_wrong_token():
    with ReplayDashboard(token="s3cret-token") as d:
        r = asyncio.run(actors(d.url))
        assert "401" in r.error.text and "RAY_AUTH_TOKEN" in r.error.text and "~/.ray/auth_token" in r.error.text
        r = asyncio.run(actors(d.url, "wrong", "RAY_AUTH_TOKEN"))
        assert r.error.text.startswith("403") and "wrong Ray auth token" in r.error.text and "wrong" not in r.error.text[20:40]
        assert "s3cret" not in r.error.text and r.error.kind == "auth_rejected"
        assert asyncio.run(actors(d.url, "s3cret-token", "RAY_AUTH_TOKEN")).ok
        assert all(m == "GET" for m, _ in d.requests)


def test_dashboard_down():
    url = f"http://127.0.0.1:{free_port()}"
    r = asyncio.run(actors(url))
    assert "not reachable" in r.error.text and "--address" in r.error.text
    # one reason, whichever transport saw the refusal (aiohttp wraps it; its text repeats the address)
    assert r.error.message == f"dashboard not reachable at {url}: connection refused"


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [(404, "404: Not Found", "404"), (429, "too many", "overloaded"), (500, "GCS down", "dashboard error 500: GCS down")],
)
def test_status_codes(replay, status, body, needle):
    replay.hooks["/api/v0/actors"] = lambda req: web.Response(status=status, text=body)
    r = asyncio.run(actors(replay.url))
    assert needle in r.error.text
    if status == 429:
        assert r.retry_after_s and r.retry_after_s >= 1


def test_html_and_truncated_json(replay):
    replay.hooks["/api/v0/actors"] = lambda req: web.Response(text="<html><body>proxy error</body></html>")
    assert "HTML" in asyncio.run(actors(replay.url)).error.text
    replay.hooks["/api/v0/actors"] = lambda req: web.Response(text='{"result": true, "data": {"res')
    assert "invalid JSON" in asyncio.run(actors(replay.url)).error.text


def test_slow_dashboard_times_out(replay):
    import time

    async def slow(req):
        # never answers; ends once the client hangs up (a handler left waiting is "destroyed but pending"
        # when the test session ends)
        while req.transport is not None and not req.transport.is_closing():
            await asyncio.sleep(0.05)

    replay.hooks["/api/v0/actors"] = slow
    t0 = time.monotonic()
    r = asyncio.run(actors(replay.url, timeout=0.5))
    # the server-side timeout is 0.5 s; the client waits 2 s more, then gives up
    assert "did not answer within" in r.error.text and time.monotonic() - t0 < 4.0


def test_allow_list_refuses_mutating_paths():
    for bad in ("/api/actors/kill", "/api/jobs/", "/api/v0/objects/x", "/nodes/../api/actors/kill", "/api/v0/tasks/x"):
        assert not allowed(bad)
    c = DashboardClient(ep("http://127.0.0.1:1"))
    with pytest.raises(ValueError):
        asyncio.run(c.get("/api/actors/kill"))
