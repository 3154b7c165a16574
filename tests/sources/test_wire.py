"""HTTP/1.1 as bytes (the one-shot client and the prefetch): answers with Content-Length, chunked or read to the
close; cut-short answers are errors, not data; a prefetched read is what the client gets, the same as asking."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from verltop.sources import dashboard as D
from verltop.sources import reads, wire
from verltop.sources.config import Endpoint
from verltop.sources.http import DashboardClient


def test_answer_with_content_length():
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: x\r\n\r\nhello"
    assert wire.complete(raw[:-1], False) is False and wire.complete(raw, False)
    assert wire.answer(raw) == (200, b"hello", None)


def test_answer_chunked_and_retry_after():
    raw = (b"HTTP/1.1 429 Too Many\r\nTransfer-Encoding: chunked\r\nRetry-After: 7\r\n\r\n"
           b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\n\r\n")
    assert not wire.complete(raw[:-5], False) and wire.complete(raw, False)
    assert wire.answer(raw) == (429, b"abcdefg", "7")


def test_answer_read_to_the_close():
    raw = b"HTTP/1.0 200 OK\r\n\r\n{}"
    assert not wire.complete(raw, False) and wire.complete(raw, True)
    assert wire.answer(raw) == (200, b"{}", None)


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    b"HTTP/1.1 200 OK\r\nContent-Le",
    b"SSH-2.0-OpenSSH\r\n\r\n",
])
def test_cut_short_or_not_http_is_an_error(raw):
    with pytest.raises(ValueError):
        wire.answer(raw)


def test_request_bytes_and_invalid_address():
    host, port, https, req = wire.request("http://[::1]:8265/base", "/api/v0/actors", [("limit", "5")],
                                          wire.headers("tok"))
    assert (host, port, https) == ("::1", 8265, False)
    assert req.startswith(b"GET /base/api/v0/actors?limit=5 HTTP/1.1\r\nHost: [::1]:8265\r\n")
    assert b"Authorization: Bearer tok\r\n" in req and b"Connection: close" in req and req.endswith(b"\r\n\r\n")
    kept = wire.request("http://[::1]:8265/base", "/api/v0/actors", None, {}, keep_alive=True)[3]
    assert b"Connection" not in kept  # HTTP/1.1 keeps it by default
    for bad in ("ftp://x", "http://:80", "http://host:notaport"):
        with pytest.raises(ValueError, match=wire.INVALID):
            wire.request(bad, "/api/version", None, {})


def test_prefetch_refuses_paths_off_the_allow_list():
    with pytest.raises(ValueError, match="refuses"):
        wire.Prefetch("http://127.0.0.1:1", {}, [("/api/actors/kill", None)], 1.0)


def _serve_once(chunks: list[bytes]) -> tuple[int, threading.Thread]:
    """A raw server that answers one connection with ``chunks``, a pause between them, then closes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        for c in chunks:
            conn.sendall(c)
            threading.Event().wait(0.02)
        conn.close()
        srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv.getsockname()[1], t


def test_both_transports_read_a_chunked_answer_in_pieces():
    body = b'{"result": true, "data": {"result": {"total": 0, "result": []}}}'
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:20], body[20:])) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    pieces = [head[:10], head[10:], chunked[:7], chunked[7:]]
    port, t = _serve_once(pieces)
    assert wire.get(f"http://127.0.0.1:{port}", "/api/version", None, {}, 5.0) == (200, body, None, None)
    t.join(5)
    port, t = _serve_once(pieces)
    client = DashboardClient(Endpoint(f"http://127.0.0.1:{port}", "--address", None, None))
    reply = asyncio.run(client.get("/api/version"))
    assert reply.ok and reply.body == body


def test_cut_short_answer_is_a_connection_problem():
    port, _ = _serve_once([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\": "])
    client = DashboardClient(Endpoint(f"http://127.0.0.1:{port}", "--address", None, None))
    reply = asyncio.run(client.get("/api/version"))
    assert not reply.ok and reply.error.kind == "connection" and "cut short" in reply.error.message


def test_prefetched_read_is_the_answer_the_client_gets(replay):
    """Sent before the client existed; the client takes it instead of asking again, once."""
    t = 3.0
    pre = wire.Prefetch(replay.url, wire.headers(None), [reads.actors(t, True), reads.nodes(t)], t + 2)

    async def go() -> tuple:
        c = DashboardClient(Endpoint(replay.url, "--address", None, None))
        c.prefetch = pre
        first = await D.fetch_actors(c, t, detail=True)
        n = sum(1 for _, q in replay.requests if q.startswith("/api/v0/actors"))
        again = await D.fetch_actors(c, t, detail=True)  # not prefetched any more: asked for now
        return first, n, again, c.requests

    first, n, again, counted = asyncio.run(go())
    assert first.ok and [a.actor_id for a in first.value] == [a.actor_id for a in again.value]
    assert n == 1 and sum(1 for _, q in replay.requests if q.startswith("/api/v0/actors")) == 2
    assert counted == 2
    nodes = pre.take(*reads.nodes(t))
    assert nodes is not None and nodes.result(5)[0] == 200 and pre.take(*reads.nodes(t)) is None


def test_prefetch_failure_maps_like_any_request():
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{port.getsockname()[1]}"
    port.close()
    pre = wire.Prefetch(url, {}, [reads.actors(1.0, True)], 2.0)

    async def go():
        c = DashboardClient(Endpoint(url, "--address", None, None))
        c.prefetch = pre
        return await D.fetch_actors(c, 1.0, detail=True)

    r = asyncio.run(go())
    assert not r.ok and r.error.kind == "unreachable" and "connection refused" in r.error.message
