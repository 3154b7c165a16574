"""HTTP/1.1 GET on asyncio's own streams: connections kept open between requests (the dashboard client's
transport), and one-off requests with a cap on the body (``get_once``: a rollout engine's ``/metrics``).
Nothing to import (aiohttp's import is 0.2 s of a 1-s start, half of it two TLS contexts the dashboard never
needs), and a body of megabytes is read in one ``readexactly`` rather than chunk by chunk.

A connection that the server closed while it was idle (Ray's dashboard, an aiohttp server, closes them after
75 s) is noticed before use or by the empty answer, and the request is sent again once on a new one. A
request cancelled or timed out midway leaves its connection closed, never back in the pool.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verltop.sources import wire

# a buffer limit past which StreamReader pauses the socket: above the largest answer (7.5 MB at 10,000
# actors), so that a big body streams in without a pause and resume per read
_LIMIT = 1 << 26
IDLE_KEPT = 8  # connections kept open between requests (a dump's fan-out of 128 closes the rest)


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())


class _Stale(Exception):
    """A kept connection the server had closed: nothing of the answer came."""


class StreamPool:
    """Keep-alive connections to one dashboard, used by one event loop at a time (a new loop starts afresh)."""

    def __init__(self) -> None:
        self._idle: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def get(self, host: str, port: int, ssl: Any, req: bytes) -> tuple[int, bytes, str | None]:
        """Send ``req`` (a whole GET) and read its answer: ``(status, body, Retry-After)``. Raises OSError
        (connection) or ValueError (not HTTP, cut short)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections of a finished loop cannot be used (nor closed) from this one
            self._idle, self._loop = [], loop
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                try:
                    return await self._exchange(conn, req)
                except _Stale:
                    break  # the server closed it: a new connection
            conn.writer.close()
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl, server_hostname=host if ssl else None,
                                                       limit=_LIMIT)
        try:
            return await self._exchange(_Conn(reader, writer), req)
        except _Stale:
            raise ConnectionResetError("the dashboard closed the connection without answering") from None

    async def _exchange(self, conn: _Conn, req: bytes) -> tuple[int, bytes, str | None]:
        try:
            status, body, retry, keep = await _ask(conn.reader, conn.writer, req)
        except (ConnectionResetError, BrokenPipeError) as e:
            conn.writer.close()
            raise _Stale from e
        except BaseException:
            conn.writer.close()  # cancelled, timed out, or a bad answer: the connection is in an unknown state
            raise
        if keep and len(self._idle) < IDLE_KEPT:
            self._idle.append(conn)
        else:
            conn.writer.close()
        return status, body, retry

    def close(self) -> None:
        """Close the kept connections (of the running loop; a finished loop's are gone with it)."""
        for c in self._idle:
            c.writer.close()
        self._idle = []


async def get_once(host: str, port: int, req: bytes, max_body: int) -> tuple[int, bytes, str | None]:
    """Send ``req`` on a connection of its own, closed after (a server verltop asks now and then, such as a
    rollout engine's ``/metrics``): ``(status, body, Retry-After)``. Raises OSError (connection) or ValueError
    (not HTTP, cut short, a body over ``max_body`` bytes: an arbitrary server is not trusted to be brief)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        status, body, retry, _ = await _ask(reader, writer, req, max_body)
        return status, body, retry
    except _Stale:
        raise ConnectionResetError("the server closed the connection without answering") from None
    finally:
        writer.close()


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: bytes, max_body: int | None = None
               ) -> tuple[int, bytes, str | None, bool]:
    """Send ``req`` and read its answer (``_read_body``); ``_Stale`` when nothing of it came."""
    writer.write(req)
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise _Stale from None
        raise ValueError("the connection closed before the answer's head") from None
    except asyncio.LimitOverrunError:
        raise ValueError("the answer's head is too long") from None
    return await _read_body(reader, head, max_body)


def _over(n: int, max_body: int | None) -> None:
    if max_body is not None and n > max_body:
        raise ValueError(f"answer over {max_body >> 20} MB" if max_body >= 1 << 20 else
                         f"answer over {max_body} bytes")


async def _read_body(reader: asyncio.StreamReader, head: bytes, max_body: int | None = None
                     ) -> tuple[int, bytes, str | None, bool]:
    """The body after ``head``: by Content-Length, chunked, or to the end; ValueError past ``max_body``
    bytes. ``keep``: the connection can carry the next request."""
    h = wire.parse_head(head)
    assert h is not None  # readuntil returned the head's end
    status, headers, _ = h
    version = head[:8]
    conn = headers.get("connection", "").lower()
    keep = "close" not in conn and (version == b"HTTP/1.1" or "keep-alive" in conn)
    try:
        if status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _chunks(reader, max_body)
        elif "content-length" in headers:
            n = int(headers["content-length"])
            _over(n, max_body)
            body = await reader.readexactly(n) if n else b""
        else:  # the body ends when the server closes
            keep, parts, n = False, [], 0
            while data := await reader.read(1 << 16):
                n += len(data)
                _over(n, max_body)
                parts.append(data)
            body = b"".join(parts)
    except asyncio.IncompleteReadError as e:
        raise ValueError(f"answer cut short ({len(e.partial)} of {e.expected} bytes)") from None
    return status, body, headers.get("retry-after"), keep


async def _chunks(reader: asyncio.StreamReader, max_body: int | None = None) -> bytes:
    out = []
    n = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size = wire.chunk_size(line)
        n += size
        _over(n, max_body)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                pass
            return b"".join(out)
        out.append((await reader.readexactly(size + 2))[:-2])
