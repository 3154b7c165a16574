"""HTTP/1.1 GET as bytes, importing nothing of verltop: the request for one path, and the answer split into
status, body and Retry-After once it is complete. Two transports use it: asyncio streams with kept
connections (``streams.py``, the dashboard client's) and a plain socket in a thread (``Prefetch``), which
sends a one-shot command's first reads while the rest of verltop is still being imported.
"""

from __future__ import annotations

import _thread
import json
import re
import socket
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any
from urllib.parse import urlencode, urlsplit

INVALID = "invalid address"

# Read-only endpoints, the only paths verltop ever asks for (Ray 2.50–2.52 has a GET that kills actors).
ALLOWED_PATHS = (
    re.compile(r"^/api/v0/(actors|tasks|nodes)$"),
    # read while a dump runs (wait chains, the driver); jobs also every 30 s while no trainer actor exists (its
    # metrics are then in a submitted driver's log)
    re.compile(r"^/api/v0/(objects|jobs)$"),
    re.compile(r"^/nodes$"),
    re.compile(r"^/nodes/[0-9a-fA-F]{8,64}$"),
    re.compile(r"^/api/v0/logs/file$"),
    re.compile(r"^/worker/traceback$"),
    re.compile(r"^/api/authentication_mode$"),
    re.compile(r"^/api/profiling_enabled$"),
    re.compile(r"^/api/version$"),
    # pending work: the state API's placement-group list (read from GCS) and the autoscaler's status
    # (reporter_head.get_cluster_status: three GCS KV reads); both plain reads in Ray 2.60's source
    re.compile(r"^/api/v0/placement_groups$"),
    re.compile(r"^/api/cluster_status$"),
)


def allowed(path: str) -> bool:
    return any(rx.match(path) for rx in ALLOWED_PATHS)


Params = list[tuple[str, str]] | None
# what a transport hands to DashboardClient._reply: status, body, Retry-After, or the exception
Outcome = tuple[int | None, bytes | None, str | None, BaseException | None]


def headers(token: str | None) -> dict[str, str]:
    """verltop's request headers: its name, and the Ray auth token when there is one (never logged)."""
    h = {"User-Agent": "verltop"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


def request(address: str, path: str, params: Params, headers: dict[str, str], keep_alive: bool = False
            ) -> tuple[str, int, bool, bytes]:
    """``(host, port, https, request bytes)`` of one GET (``Connection: close`` unless ``keep_alive``);
    ValueError(INVALID)."""
    u = urlsplit(address)
    try:
        port = u.port
    except ValueError:
        raise ValueError(INVALID) from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(INVALID)
    https = u.scheme == "https"
    port = port or (443 if https else 80)
    target = (u.path.rstrip("/") + path) + ("?" + urlencode(params) if params else "")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    head = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", "Accept-Encoding: identity",
            *(() if keep_alive else ("Connection: close",)),
            *(f"{k}: {v}" for k, v in headers.items())]
    return u.hostname, port, https, ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


def parse_head(buf: bytes | bytearray) -> tuple[int, dict[str, str], int] | None:
    """Status, headers and where the body starts, once the head is in."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers = {}
    for h in lines[1:]:
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers, end + 4


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (hex, extensions after ';' ignored); ValueError when not hex."""
    return int(line.split(b";", 1)[0].strip() or b"0", 16)


def complete(buf: bytes | bytearray, eof: bool) -> bool:
    """Is the whole answer in ``buf``? (Cheap: called after every read.)"""
    if eof:
        return True
    h = parse_head(buf)
    if h is None:
        return False
    _, headers, start = h
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return buf.endswith(b"0\r\n\r\n")
    if "content-length" in headers:
        return len(buf) - start >= int(headers["content-length"])
    return False  # the body ends when the server closes


def answer(buf: bytes | bytearray) -> tuple[int, bytes, str | None]:
    """Status, body and Retry-After of a complete answer; ValueError when it is not one (cut short)."""
    h = parse_head(buf)
    if h is None:
        raise ValueError("the connection closed before the answer's head")
    status, headers, start = h
    body = bytes(buf[start:])
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out, i = [], 0
        while True:
            j = body.find(b"\r\n", i)
            if j < 0:
                raise ValueError("chunked answer cut short")
            size = chunk_size(body[i:j])
            if size == 0:
                break
            if j + 2 + size > len(body):
                raise ValueError("chunked answer cut short")
            out.append(body[j + 2 : j + 2 + size])
            i = j + 4 + size
        body = b"".join(out)
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if len(body) < n:
            raise ValueError(f"answer cut short ({len(body)} of {n} bytes)")
        body = body[:n]
    return status, body, headers.get("retry-after")


def get(address: str, path: str, params: Params, headers: dict[str, str], timeout_s: float) -> Outcome:
    """One blocking GET on a plain socket (``timeout_s`` per operation)."""
    try:
        host, port, https, req = request(address, path, params, headers)
        with _connect(host, port, timeout_s) as raw:
            s: Any = raw
            if https:
                import ssl

                s = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
            s.sendall(req)
            buf = bytearray()
            while True:
                data = s.recv(1 << 16)
                buf += data
                if complete(buf, not data):
                    return (*answer(buf), None)
    except (OSError, ValueError, UnicodeError) as e:
        return None, None, None, e


def _connect(host: str, port: int, timeout_s: float) -> socket.socket:
    """``socket.create_connection``, but an IP literal (the usual dashboard address) is connected to
    directly: getaddrinfo would first import the IDNA codec (3 ms of a one-shot command's start)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout_s)
            s.connect((host, port))
        except BaseException:
            s.close()
            raise
        return s
    return socket.create_connection((host, port), timeout=timeout_s)


def _fetch_into(fut: Future, address: str, path: str, params: Params, headers: dict[str, str],
                timeout_s: float) -> None:
    result = get(address, path, params, headers, timeout_s)
    try:
        fut.set_result(result)
    except InvalidStateError:  # whoever took it gave up waiting (cancelled) before the answer came
        pass


class Prefetch:
    """GETs started now, each in its own thread; ``take(path, params)`` hands over one's outcome (a
    ``concurrent.futures.Future``) to whoever asks for exactly that read first. ``follow`` adds reads that
    need earlier answers (the trainer's log needs the actor list)."""

    def __init__(self, address: str, headers: dict[str, str], reads: list[tuple[str, Params]],
                 timeout_s: float) -> None:
        bad = [p for p, _ in reads if not allowed(p)]
        if bad:
            raise ValueError(f"verltop refuses to call {bad[0]}: not a read-only endpoint it knows")
        self._futures: dict[tuple[str, tuple], Future] = {}
        self._asked: set[tuple[str, tuple]] = set()  # taken, or asked for before it was sent: never sent twice
        self._lock = _thread.allocate_lock()
        self._address, self._headers, self._timeout_s = address, headers, timeout_s
        for path, params in reads:
            self._send(path, params)

    def _send(self, path: str, params: Params) -> None:
        if not allowed(path):
            raise ValueError(f"verltop refuses to call {path}: not a read-only endpoint it knows")
        key = (path, tuple(params or ()))
        with self._lock:
            if key in self._asked or key in self._futures:
                return
            fut: Future = Future()
            self._futures[key] = fut
        # a bare thread: threading.Thread.start() would wait until it runs, and the point is not to wait
        _thread.start_new_thread(_fetch_into, (fut, self._address, path, params, self._headers, self._timeout_s))

    def take(self, path: str, params: Params) -> Future | None:
        key = (path, tuple(params or ()))
        with self._lock:
            self._asked.add(key)
            return self._futures.pop(key, None)

    def peek(self, path: str, params: Params) -> Future | None:
        """That read's outcome, left for ``take`` (``headstart`` looks at the actors before the engine)."""
        return self._futures.get((path, tuple(params or ())))

    def follow(self, after: tuple[str, Params], then: Callable[[list[dict[str, Any]]], list[tuple[str, Params]]]
               ) -> None:
        """Once ``after`` (a read sent here) is in, send the reads ``then(its rows)`` names (from a bare thread;
        a read the command asked for meanwhile is not sent again, and one that fails is the command's to do)."""
        fut = self.peek(*after)
        if fut is not None:
            _thread.start_new_thread(self._follow, (fut, then))

    def _follow(self, fut: Future, then: Callable[[list[dict[str, Any]]], list[tuple[str, Params]]]) -> None:
        try:
            for path, params in then(rows(fut.result(self._timeout_s))):
                self._send(path, params)
        except Exception:  # noqa: BLE001 - a head start only: the command reads whatever was not sent
            pass


def rows(outcome: Outcome) -> list[dict[str, Any]]:
    """The rows of a state-API list answer (``data.result.result``); [] for a failed or odd one."""
    status, body, _, err = outcome
    if err is not None or status != 200 or not body:
        return []
    try:
        data = json.loads(body).get("data", {}).get("result", {})
        found = data.get("result", []) if isinstance(data, dict) else []
    except (ValueError, AttributeError):
        return []
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []
