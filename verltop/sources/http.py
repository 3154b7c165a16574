"""Read-only HTTP to the Ray dashboard: GET only, to a fixed list of endpoints, errors as one line.

Ray 2.50–2.52 has a GET that kills actors (``/api/actors/kill``), so "GET only" is not enough: every path
must match the allow-list below or the call is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from verltop.sources.config import TOKEN_PLACES, Endpoint

ALLOWED_PATHS = (
    re.compile(r"^/api/v0/(actors|tasks|nodes)$"),
    re.compile(r"^/nodes$"),
    re.compile(r"^/nodes/[0-9a-fA-F]{8,64}$"),
    re.compile(r"^/api/v0/logs/file$"),
    re.compile(r"^/worker/traceback$"),
    re.compile(r"^/api/authentication_mode$"),
    re.compile(r"^/api/profiling_enabled$"),
    re.compile(r"^/api/version$"),
)


def allowed(path: str) -> bool:
    return any(rx.match(path) for rx in ALLOWED_PATHS)


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: ``body`` on success, else a one-line ``error`` (never both)."""

    status: int | None
    body: bytes | None
    error: str | None
    elapsed_s: float
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return (self.body or b"").decode("utf-8", "replace")


class DashboardClient:
    """One aiohttp session per process; at most ``max_inflight`` requests at once (Ray's state server
    is single-threaded, and answers 429 past its own limit)."""

    def __init__(self, endpoint: Endpoint, max_inflight: int = 6, transport: str = "aiohttp") -> None:
        """``transport="stdlib"``: http.client in threads, for one-shot commands (`verltop dump`,
        `snapshot`): it imports in 10 ms where aiohttp takes 170 ms, a third of a whole dump."""
        self.endpoint = endpoint
        self.transport = transport
        self._session: Any = None
        self._sem = asyncio.Semaphore(max_inflight)
        self.requests = 0
        self.memo: dict[str, tuple[bytes, object]] = {}  # last answer per endpoint (see dashboard.py)

    async def _ensure(self) -> Any:
        if self._session is None or self._session.closed:
            import aiohttp  # deferred: keeps `verltop --help` and the analysis core free of it

            headers = {"User-Agent": "verltop"}
            if self.endpoint.token:
                headers["Authorization"] = f"Bearer {self.endpoint.token}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(limit=16, ttl_dns_cache=300),
                # no cookies, no env proxies: a dashboard on loopback must not go through a proxy
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def get(self, path: str, params: list[tuple[str, str]] | None = None, timeout_s: float = 10.0) -> Reply:
        """GET ``path`` (must be on the allow-list) and return its text, or a one-line error."""
        if not allowed(path):
            raise ValueError(f"verltop refuses to call {path}: not a read-only endpoint it knows")
        if self.transport == "stdlib":
            async with self._sem:
                self.requests += 1
                return await asyncio.to_thread(self._get_stdlib, path, params, timeout_s)
        import aiohttp

        t0 = time.monotonic()
        url = self.endpoint.address + path
        try:
            async with self._sem:
                session = await self._ensure()
                self.requests += 1
                async with session.get(
                    url, params=params, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False
                ) as resp:
                    body = await resp.read()
                    status = resp.status
                    retry = resp.headers.get("Retry-After")
        except asyncio.TimeoutError:
            return Reply(None, None, f"dashboard did not answer within {timeout_s:g} s ({self.endpoint.address})",
                         time.monotonic() - t0)
        except aiohttp.InvalidURL:
            return Reply(None, None, f"invalid dashboard address {self.endpoint.address!r}", time.monotonic() - t0)
        except aiohttp.ClientConnectorError as e:
            why = _conn_reason(e)
            return Reply(None, None, f"dashboard not reachable at {self.endpoint.address}: {why} "
                         "(is Ray running? use --address or RAY_DASHBOARD_ADDRESS)", time.monotonic() - t0)
        except (aiohttp.ClientError, OSError, ValueError) as e:
            return Reply(None, None, f"dashboard connection failed: {_one_line(e)}", time.monotonic() - t0)
        dt = time.monotonic() - t0
        if 200 <= status < 300:
            return Reply(status, body, None, dt)
        return Reply(status, None, self.status_error(status, body.decode("utf-8", "replace"), path), dt,
                     _retry_after(retry, status))

    def _get_stdlib(self, path: str, params: list[tuple[str, str]] | None, timeout_s: float) -> Reply:
        import http.client
        import urllib.parse

        t0 = time.monotonic()
        u = urllib.parse.urlsplit(self.endpoint.address)
        if u.scheme not in ("http", "https") or not u.hostname:
            return Reply(None, None, f"invalid dashboard address {self.endpoint.address!r}", 0.0)
        conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        target = (u.path.rstrip("/") + path) + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = {"User-Agent": "verltop"}
        if self.endpoint.token:
            headers["Authorization"] = f"Bearer {self.endpoint.token}"
        conn = conn_cls(u.hostname, u.port, timeout=timeout_s)
        try:
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            status, retry = resp.status, resp.getheader("Retry-After")
        except TimeoutError:
            return Reply(None, None, f"dashboard did not answer within {timeout_s:g} s ({self.endpoint.address})",
                         time.monotonic() - t0)
        except ConnectionRefusedError:
            return Reply(None, None, f"dashboard not reachable at {self.endpoint.address}: connection refused "
                         "(is Ray running? use --address or RAY_DASHBOARD_ADDRESS)", time.monotonic() - t0)
        except (OSError, http.client.HTTPException, ValueError) as e:
            return Reply(None, None, f"dashboard connection failed: {_one_line(e) or e.__class__.__name__}",
                         time.monotonic() - t0)
        finally:
            conn.close()
        dt = time.monotonic() - t0
        if 200 <= status < 300:
            return Reply(status, body, None, dt)
        return Reply(status, None, self.status_error(status, body.decode("utf-8", "replace"), path), dt,
                     _retry_after(retry, status))

    def status_error(self, status: int, body: str, path: str) -> str:
        text = _one_line(_ray_msg(body))[:160]
        if status == 401:
            if self.endpoint.token:
                return f"401 Unauthorized: the dashboard rejected the token from {self.endpoint.token_from}"
            return f"401 Unauthorized: this Ray cluster uses token auth and no token was found (looked in {TOKEN_PLACES})"
        if status == 403:
            if "rofiling" in body:
                return ("403: profiling is disabled on this dashboard "
                        "(start Ray with RAY_DASHBOARD_ENABLE_PROFILING=1, or let verltop use its probe)")
            src = self.endpoint.token_from or "nowhere"
            return f"403 Forbidden: wrong Ray auth token (token from {src}; verltop looks in {TOKEN_PLACES})"
        if status == 404:
            return f"404: {path} not found on this dashboard (Ray older than 2.40?)"
        if status == 429:
            return "429: the dashboard is overloaded; backing off"
        if status >= 500:
            return f"dashboard error {status}: {text or 'no message'}"
        return f"dashboard answered HTTP {status}: {text or 'no message'}"


def _retry_after(v: str | None, status: int) -> float | None:
    if status != 429:
        return None
    try:
        return max(1.0, min(60.0, float(v))) if v else 5.0
    except ValueError:
        return 5.0


def _conn_reason(e: Exception) -> str:
    os_err = getattr(e, "os_error", None)
    s = str(getattr(os_err, "strerror", "") or os_err or e)
    return s.lower() if s else "connection failed"


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


def _one_line(x: object) -> str:
    s = " ".join(str(x).split())
    return s[:300]
