"""The dashboard client's connections: kept between requests, a connection the server closed is replaced
(before use, or when it answers nothing), a request cut off by its timeout never leaves its connection for the
next one, and a body of megabytes arrives whole."""

from __future__ import annotations

import asyncio
import socket
import threading

from aiohttp import web

from tests.wait import wait_until_async
from verltop.sources import streams
from verltop.sources.config import Endpoint
from verltop.sources.http import DashboardClient

BIG = bytes(range(256)) * (5 * 4096)  # 5 MiB


class Server:
    """An aiohttp server on this loop that notes each request's connection (its client port)."""

    def __init__(self, keepalive_timeout: float = 75.0) -> None:
        self.peers: list[int] = []
        self.gate = asyncio.Event()
        self.keepalive_timeout = keepalive_timeout

    async def handle(self, req: web.Request) -> web.StreamResponse:
        self.peers.append(req.transport.get_extra_info("peername")[1])
        if req.query.get("slow"):
            await self.gate.wait()
        if req.query.get("big"):
            return web.Response(body=BIG)
        return web.json_response({"n": len(self.peers)})

    async def __aenter__(self) -> Server:
        app = web.Application()
        app.router.add_get("/api/version", self.handle)
        self.runner = web.AppRunner(app, keepalive_timeout=self.keepalive_timeout)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.gate.set()
        await self.runner.cleanup()


def client(url: str) -> DashboardClient:
    return DashboardClient(Endpoint(url, "--address", None, None))


async def test_requests_share_kept_connections():
    async with Server() as srv:
        c = client(srv.url)
        for _ in range(5):
            assert (await c.get("/api/version")).ok
        assert len(set(srv.peers)) == 1, srv.peers
        # three at once need three connections; the next ones reuse them
        assert all(r.ok for r in await asyncio.gather(*(c.get("/api/version") for _ in range(3))))
        for _ in range(4):
            assert (await c.get("/api/version")).ok
        assert len(srv.peers) == 12 and len(set(srv.peers)) <= 3, srv.peers
        await c.close()


async def test_a_big_body_arrives_whole_and_the_connection_serves_on():
    async with Server() as srv:
        c = client(srv.url)
        r = await c.get("/api/version", [("big", "1")])
        assert r.ok and r.body == BIG
        assert (await c.get("/api/version")).ok and len(set(srv.peers)) == 1
        await c.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced():
    async with Server(keepalive_timeout=0.2) as srv:
        c = client(srv.url)
        assert (await c.get("/api/version")).ok
        kept = c._pool._idle[0]
        await wait_until_async(lambda: not kept.usable(), 10, "the server closing the idle connection")
        r = await c.get("/api/version")
        assert r.ok and len(set(srv.peers)) == 2
        await c.close()


async def test_a_timed_out_request_does_not_leave_its_connection_for_the_next():
    async with Server() as srv:
        c = client(srv.url)
        r = await c.get("/api/version", [("slow", "1")], timeout_s=0.3)
        assert not r.ok and r.error.kind == "timeout", r.error
        assert c._pool._idle == []
        srv.gate.set()
        r = await c.get("/api/version")
        assert r.ok and r.body == b'{"n": 2}' and len(set(srv.peers)) == 2
        await c.close()


def _close_on_second_request() -> tuple[int, list[int]]:
    """A raw server: its first connection answers one request and then closes on the next without a word (a
    kept connection the server dropped just as it was reused); later connections answer and close."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    conns: list[int] = []
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    def run() -> None:
        for i in range(2):
            conn, peer = srv.accept()
            conns.append(peer[1])
            conn.recv(65536)
            conn.sendall(answer)
            if i == 0:
                conn.recv(65536)  # the second request, on the kept connection: dropped
            conn.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1], conns


async def test_a_kept_connection_that_answers_nothing_is_retried_once_on_a_new_one():
    port, conns = _close_on_second_request()
    c = client(f"http://127.0.0.1:{port}")
    assert (await c.get("/api/version")).ok
    r = await c.get("/api/version")
    assert r.ok and r.body == b"{}" and len(conns) == 2
    await c.close()


async def test_a_new_connection_that_answers_nothing_is_an_error_not_a_retry():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)
    accepted: list[int] = []

    def run() -> None:
        conn, _ = srv.accept()
        accepted.append(1)
        conn.recv(65536)
        conn.close()

    threading.Thread(target=run, daemon=True).start()
    c = client(f"http://127.0.0.1:{srv.getsockname()[1]}")
    r = await c.get("/api/version", timeout_s=5)
    srv.close()
    assert not r.ok and r.error.kind == "connection" and "without answering" in r.error.message, r.error
    assert accepted == [1]
    await c.close()


def test_a_client_used_from_a_new_event_loop_starts_afresh(replay):
    """A one-shot helper may ``asyncio.run`` more than once with one client: the connections kept by a
    finished loop are dropped, not used (their transports belong to a closed loop)."""
    c = client(replay.url)
    assert asyncio.run(c.get("/api/v0/actors")).ok and len(c._pool._idle) == 1
    first = c._pool._idle[0]
    assert asyncio.run(c.get("/api/v0/actors")).ok and c._pool._idle[0] is not first
    assert streams.IDLE_KEPT >= 6  # the state reads in flight at once (DashboardClient's max_inflight)


def _one_answer(answer: bytes) -> tuple[int, threading.Event]:
    """A raw server that answers one request with ``answer`` and waits for the client to close (set then)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    closed = threading.Event()

    def run() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(answer)
        if b"Content-Length" not in answer and b"chunked" not in answer:
            conn.shutdown(socket.SHUT_WR)  # a body that ends when the server closes
        conn.settimeout(30)
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
        closed.set()
        conn.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1], closed


def _chunked(body: bytes, size: int = 1000) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


async def test_a_one_off_request_reads_each_framing_up_to_its_cap_and_closes_its_connection():
    # a rollout engine's /metrics: any server, on its own connection; a body past the cap is refused, not read
    body = b"x" * 5000
    heads = {"length": b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
             "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
             "to the end": b"HTTP/1.0 200 OK\r\n\r\n"}
    for kind, head in heads.items():
        for cap, ok in ((5000, True), (4999, False)):
            answer = head + (_chunked(body) if kind == "chunked" else body)
            port, closed = _one_answer(answer)
            req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            if ok:
                assert await streams.get_once("127.0.0.1", port, req, cap) == (200, body, None), kind
            else:
                try:
                    await streams.get_once("127.0.0.1", port, req, cap)
                except ValueError as e:
                    assert str(e) == "answer over 4999 bytes", (kind, e)
                else:
                    raise AssertionError(f"{kind}: a body over the cap was read")
            await wait_until_async(closed.is_set, 10, f"the client to close its connection ({kind}, cap {cap})")


async def test_rollout_metrics_past_the_cap_is_a_one_line_reason():
    from verltop.sources import rollout

    port, _ = _one_answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (rollout.MAX_BODY + 1))
    text, why = await rollout.get_metrics(f"127.0.0.1:{port}", 5.0)
    assert text is None and why == "/metrics: ValueError: answer over 8 MB"
    port, _ = _one_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\nvllm:num_requests 1")
    assert await rollout.get_metrics(f"127.0.0.1:{port}", 5.0) == ("vllm:num_requests 1", None)
