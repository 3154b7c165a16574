"""Telling someone about an incident: a command of the user's (``--on-incident``) and a chat webhook
(``--webhook``: a JSON POST ``{"text": summary}``, the shape Slack, Mattermost, Teams and Discord-compatible
relays accept).

Both run after the incident is written, as background tasks: a slow or failing hook never delays a capture
nor stops the watch. The webhook goes through its own small client (the stdlib's), never through the
dashboard client, which can only GET. A webhook URL is itself a secret (Slack puts the key in the path):
only its scheme and host are ever logged. Known secrets (the Ray auth token) are scrubbed from the text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from verltop.convert import one_line
from verltop.sources.aio import within
from verltop.sources.procgroup import kill_group

log = logging.getLogger("verltop.watch")


def url_host(url: str) -> str:
    """What may be logged of a webhook URL: ``https://hooks.slack.com``."""
    u = urllib.parse.urlsplit(url)
    return f"{u.scheme}://{u.hostname or '?'}" + (f":{u.port}" if u.port else "")


def check_webhook(url: str) -> str | None:
    """Why ``url`` cannot be a webhook, or None."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        return f"--webhook must be an http(s) URL, not {url_host(url) if u.scheme else 'that'}"
    return None


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    for s in secrets:
        if s and len(s) >= 8:
            text = text.replace(s, "***")
    return text


@dataclass(frozen=True, slots=True)
class HookResult:
    ok: bool
    detail: str  # one line for the watch log


async def post_webhook(url: str, text: str, timeout_s: float = 10.0, tries: int = 3, backoff_s: float = 2.0
                       ) -> HookResult:
    """POST ``{"text": text}``; retried on network errors, 429 and 5xx (``backoff_s`` doubling)."""
    body = json.dumps({"text": text}).encode()
    host = url_host(url)
    last = ""
    for attempt in range(1, max(1, tries) + 1):
        status, last = await asyncio.to_thread(_post, url, body, timeout_s)
        if status is not None and 200 <= status < 300:
            return HookResult(True, f"webhook {host}: {status} (try {attempt})")
        if status is not None and 400 <= status < 500 and status != 429:
            return HookResult(False, f"webhook {host}: {last} (not retried)")
        if attempt < tries:
            await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
    return HookResult(False, f"webhook {host}: {last} after {tries} tries")


def _post(url: str, body: bytes, timeout_s: float) -> tuple[int | None, str]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "verltop-watch"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read(65536)
            return r.status, f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return e.code, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return None, one_line(reason, 120) if not isinstance(reason, TimeoutError) else f"no answer in {timeout_s:g} s"


async def run_hook(cmd: str, env: dict[str, str], timeout_s: float = 60.0) -> HookResult:
    """``cmd`` through the shell with ``env`` added; killed with its children at ``timeout_s``."""
    try:
        proc = await asyncio.create_subprocess_shell(
            cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **env}, start_new_session=True)
    except OSError as e:
        return HookResult(False, f"--on-incident could not start: {e.strerror or e}")
    try:
        out, _ = await within(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        kill_group(proc.pid)
        await proc.wait()
        return HookResult(False, f"--on-incident killed after {timeout_s:g} s")
    except asyncio.CancelledError:
        kill_group(proc.pid)
        raise
    lines = (out or b"").decode(errors="replace").strip().splitlines()
    tail = one_line(lines[-1], 160) if lines else ""
    ok = proc.returncode == 0
    return HookResult(ok, f"--on-incident exited {proc.returncode}" + (f": {tail}" if tail else ""))

