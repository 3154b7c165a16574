"""Read-only HTTP to the Ray dashboard: GET only, to a fixed list of endpoints, errors as one line.

Ray 2.50–2.52 has a GET that kills actors (``/api/actors/kill``), so "GET only" is not enough: every path
must match the allow-list (``wire.ALLOWED_PATHS``) or the call is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from verltop.convert import one_line
from verltop.model import Problem
from verltop.sources import wire
from verltop.sources.aio import within
from verltop.sources.config import TOKEN_PLACES, Endpoint
from verltop.sources.streams import StreamPool
from verltop.sources.wire import ALLOWED_PATHS, allowed  # noqa: F401 - the allow-list lives where requests are written

RAY_RUNNING = "is Ray running? use --address or RAY_DASHBOARD_ADDRESS"
INVALID = wire.INVALID
RELAY_INFLIGHT = 128  # requests relayed to node agents at once (/worker/traceback), over all nodes
PROFILING_OFF = "start Ray with RAY_DASHBOARD_ENABLE_PROFILING=1, or let verltop use its probe"


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: ``body`` on success, else a ``Problem`` (never both)."""

    status: int | None
    body: bytes | None
    error: Problem | None
    elapsed_s: float
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return (self.body or b"").decode("utf-8", "replace")


class DashboardClient:
    """One client per process; at most ``max_inflight`` requests at once (Ray's state server is
    single-threaded, and answers 429 past its own limit). HTTP/1.1 on asyncio's own streams, connections kept
    (``streams``); a read sent before the client was ready (``prefetch``) ends in ``_reply`` too: one mapping
    from what happened to a ``Reply``."""

    def __init__(self, endpoint: Endpoint, max_inflight: int = 6) -> None:
        self.endpoint = endpoint
        self._pool = StreamPool()
        self._sem = asyncio.Semaphore(max_inflight)
        # relayed to the nodes' agents (py-spy there), not served by the single-threaded state server: a dump
        # of 128 nodes fans out wide; each node's own cap is the caller's (sources/stacks.py)
        self._relay_sem = asyncio.Semaphore(RELAY_INFLIGHT)
        self.requests = 0
        self.memo: dict[str, tuple[bytes, object]] = {}  # last answer per endpoint (see dashboard.py)
        self.rows: dict[str, dict] = {}  # the last answer's parsed rows per endpoint, by their raw fields
        self.prefetch: wire.Prefetch | None = None  # reads a one-shot command sent before it was ready

    def _headers(self) -> dict[str, str]:
        return wire.headers(self.endpoint.token)

    async def close(self) -> None:
        self._pool.close()

    async def get(self, path: str, params: list[tuple[str, str]] | None = None, timeout_s: float = 10.0) -> Reply:
        """GET ``path`` (must be on the allow-list) and return its body, or a ``Problem``."""
        if not allowed(path):
            raise ValueError(f"verltop refuses to call {path}: not a read-only endpoint it knows")
        t0 = time.monotonic()
        sent = self.prefetch.take(path, params) if self.prefetch is not None else None
        if sent is not None:  # asked for while verltop was starting
            self.requests += 1
            status, body, retry, exc = await asyncio.wrap_future(sent)
            return self._reply(path, timeout_s, time.monotonic() - t0, status, body, retry, exc)
        async with self._relay_sem if path.startswith("/worker/") else self._sem:
            self.requests += 1
            status, body, retry, exc = await self._get(path, params, timeout_s)
        return self._reply(path, timeout_s, time.monotonic() - t0, status, body, retry, exc)

    async def _get(self, path: str, params: list[tuple[str, str]] | None, timeout_s: float) -> wire.Outcome:
        """One GET on a kept connection (``streams``), read to the end within ``timeout_s``."""
        try:
            host, port, https, req = wire.request(self.endpoint.address, path, params, self._headers(), keep_alive=True)
        except ValueError as e:
            return None, None, None, e
        try:
            return (*await within(self._pool.get(host, port, _ssl_context() if https else None, req),
                                  timeout_s), None)
        except (OSError, asyncio.TimeoutError, ValueError, UnicodeError) as e:
            return None, None, None, e

    def _reply(self, path: str, timeout_s: float, dt: float, status: int | None, body: bytes | None,
               retry: str | None, exc: BaseException | None) -> Reply:
        """What happened → a ``Reply``: the one place transport failures and HTTP statuses become problems."""
        if exc is not None:
            return Reply(None, None, self.transport_problem(exc, timeout_s), dt)
        assert status is not None
        if 200 <= status < 300:
            return Reply(status, body or b"", None, dt)
        return Reply(status, None, self.status_problem(status, (body or b"").decode("utf-8", "replace"), path), dt,
                     _retry_after(retry, status))

    def transport_problem(self, e: BaseException, timeout_s: float) -> Problem:
        addr = self.endpoint.address
        if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
            return Problem("timeout", f"dashboard did not answer within {timeout_s:g} s ({addr})")
        if type(e) is ValueError and str(e) == INVALID:
            return Problem("invalid_address", f"invalid dashboard address {addr!r}")
        if isinstance(e, ConnectionRefusedError):
            return Problem("unreachable", f"dashboard not reachable at {addr}: connection refused", RAY_RUNNING)
        if isinstance(e, socket.gaierror):  # `--address notaurl`: say which name did not resolve
            return Problem("unreachable", f"dashboard not reachable at {addr}: no such host "
                           f"({one_line(e) or 'name not known'})", RAY_RUNNING)
        return Problem("connection", f"dashboard connection to {addr} failed: {one_line(e) or e.__class__.__name__}")

    def status_problem(self, status: int, body: str, path: str) -> Problem:
        text = one_line(_ray_msg(body), 160)
        if status == 401:
            if self.endpoint.token:
                return Problem("auth_rejected", f"401 Unauthorized: the dashboard rejected the token from "
                               f"{self.endpoint.token_from}", status=status)
            return Problem("auth_missing", "401 Unauthorized: this Ray cluster uses token auth and no token was "
                           f"found (looked in {TOKEN_PLACES})", status=status)
        if status == 403:
            if "rofiling" in body:
                return Problem("profiling_off", "403: profiling is disabled on this dashboard", PROFILING_OFF,
                               status=status)
            src = self.endpoint.token_from or "nowhere"
            return Problem("auth_rejected", f"403 Forbidden: wrong Ray auth token (token from {src}; verltop "
                           f"looks in {TOKEN_PLACES})", status=status)
        if status == 404:
            return Problem("not_found", f"404: {path} not found on this dashboard (Ray older than 2.40?)",
                           status=status)
        if status == 429:
            return Problem("overloaded", "429: the dashboard is overloaded; backing off", status=status)
        if status >= 500:
            return Problem("server_error", f"dashboard error {status}: {text or 'no message'}", status=status)
        return Problem("http", f"dashboard answered HTTP {status}: {text or 'no message'}", status=status)


_SSL: Any = None


def _ssl_context() -> Any:
    global _SSL
    if _SSL is None:
        import ssl

        _SSL = ssl.create_default_context()
    return _SSL


def _retry_after(v: str | None, status: int) -> float | None:
    if status != 429:
        return None
    try:
        return max(1.0, min(60.0, float(v))) if v else 5.0
    except ValueError:
        return 5.0


def _ray_msg(body: str) -> str:
    """The ``msg`` of Ray's JSON error envelope (``{"result": false, "msg": ...}``), else the body."""
    if body.lstrip().startswith("{"):
        try:
            msg = json.loads(body).get("msg")
        except (ValueError, AttributeError):
            return body
        if isinstance(msg, str) and msg.strip():
            return msg
    return body
