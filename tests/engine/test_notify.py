"""Notifications against real things: a local HTTP server for the webhook, real shell commands for the
hook. Failures are values; nothing here may raise into the watch."""

from __future__ import annotations

import time

import pytest

from tests.engine.procs import Hook
from tests.wait import proc_state, wait_until
from verltop.engine.notify import check_webhook, post_webhook, run_hook, scrub, url_host


@pytest.fixture
def hook():
    servers = []

    def make(*a, **kw) -> Hook:
        servers.append(Hook(*a, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


async def test_webhook_posts_the_text_as_json(hook):
    h = hook()
    r = await post_webhook(h.url, "Stall in phase update_actor of worker group wg")
    assert r.ok and "200" in r.detail
    path, headers, body = h.posts[0]
    assert body == {"text": "Stall in phase update_actor of worker group wg"}
    assert headers["Content-Type"] == "application/json" and path.endswith("SECRETKEY")
    assert "SECRETKEY" not in r.detail and r.detail.startswith("webhook http://127.0.0.1:")  # the URL is a secret


async def test_webhook_retries_server_errors_not_client_errors(hook):
    h = hook([503, 500])
    r = await post_webhook(h.url, "x", tries=3, backoff_s=0.05)
    assert r.ok and len(h.posts) == 3 and "try 3" in r.detail
    h2 = hook([404])
    r2 = await post_webhook(h2.url, "x", tries=3, backoff_s=0.05)
    assert not r2.ok and len(h2.posts) == 1 and "404" in r2.detail and "not retried" in r2.detail
    h3 = hook([500, 500, 500])
    r3 = await post_webhook(h3.url, "x", tries=3, backoff_s=0.05)
    assert not r3.ok and "after 3 tries" in r3.detail


async def test_webhook_times_out_and_never_raises(hook):
    h = hook(delay_s=2.0)
    t0 = time.monotonic()
    r = await post_webhook(h.url, "x", timeout_s=0.3, tries=2, backoff_s=0.05)
    assert not r.ok and time.monotonic() - t0 < 1.9 and "no answer" in r.detail
    from tests.net import free_port

    r2 = await post_webhook(f"http://127.0.0.1:{free_port()}/x", "x", tries=1)
    assert not r2.ok and "refused" in r2.detail.lower()


def test_webhook_urls_and_secrets():
    assert check_webhook("https://hooks.slack.com/services/T/B/K") is None
    assert "http(s)" in (check_webhook("ftp://x/y") or "")
    assert url_host("https://user:pw@hooks.example.com:8443/a/b?tok=1") == "https://hooks.example.com:8443"
    assert scrub("token abcdef0123456789 in text", ["abcdef0123456789", None, ""]) == "token *** in text"


async def test_hook_gets_the_incident_dir_and_its_failure_is_a_value(tmp_path):
    out = tmp_path / "seen"
    r = await run_hook(f'echo "$VERLTOP_INCIDENT_DIR" > {out}; echo done', {"VERLTOP_INCIDENT_DIR": "/x/inc"})
    assert r.ok and out.read_text().strip() == "/x/inc" and r.detail == "--on-incident exited 0: done"
    r = await run_hook("echo oops >&2; exit 3", {})
    assert not r.ok and r.detail == "--on-incident exited 3: oops"
    r = await run_hook("no-such-command-verltop", {})
    assert not r.ok and "127" in r.detail


async def test_hook_is_killed_with_its_children_at_the_timeout(tmp_path):
    t0 = time.monotonic()
    r = await run_hook(f"sleep 30 & echo $! > {tmp_path}/child; sleep 30", {}, timeout_s=0.5)
    assert not r.ok and "killed after 0.5 s" in r.detail and time.monotonic() - t0 < 5
    child = int((tmp_path / "child").read_text())
    wait_until(lambda: proc_state(child) in (None, "Z"), 10, "the hook's child to be killed with it",
               detail=lambda: proc_state(child))
