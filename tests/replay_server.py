"""A real HTTP server that answers as a Ray 2.60 dashboard did, from responses captured on real clusters.

Used by source, CLI and UI tests: verltop talks to it over loopback exactly as to a dashboard.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

FIXTURES = Path(__file__).parent / "fixtures"
RAY_GPU = FIXTURES / "real-gpu" / "ray-gpu-cluster"


# a state-API list with no rows, as Ray 2.60 answers it
NO_ROWS = {"result": True, "msg": "", "data": {"result": {"total": 0, "num_after_truncation": 0, "num_filtered": 0,
                                                          "result": [], "partial_failure_warning": "",
                                                          "warnings": None}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReplayDashboard:
    """Serves one capture folder (``hung/`` of a real-gpu case). ``hooks`` may override any path."""

    def __init__(self, case: Path = RAY_GPU, phase: str = "hung", token: str | None = None,
                 port: int | None = None) -> None:
        self.case = case
        self.dir = case / phase
        self.token = token
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[tuple[str, str]] = []
        self.hooks: dict[str, Callable[[web.Request], web.Response | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        actors = json.loads((self.dir / "api_v0_actors.json").read_text())["data"]["result"]["result"]
        self.pid_of = {a["actor_id"]: a["pid"] for a in actors}

    def _file(self, name: str) -> web.Response:
        p = self.dir / name
        if not p.exists():
            return web.Response(status=404, text="404: Not Found")
        return web.Response(body=p.read_bytes(), content_type="application/json")

    async def handle(self, req: web.Request) -> web.StreamResponse:
        self.requests.append((req.method, req.path_qs))
        if req.method != "GET":
            return web.Response(status=405)
        hook = self.hooks.get(req.path)
        if hook is not None:
            r = hook(req)
            if asyncio.iscoroutine(r):
                r = await r
            if r is not None:
                return r
        if self.token and req.path != "/api/authentication_mode":
            auth = req.headers.get("Authorization")
            if not auth:
                return web.Response(status=401, text="Unauthorized: Missing authentication token")
            if auth != f"Bearer {self.token}":
                return web.Response(status=403, text="Forbidden: Invalid authentication token")
        p = req.path
        if p == "/api/authentication_mode":
            return web.json_response({"authentication_mode": "token" if self.token else "disabled"})
        if p == "/api/v0/actors":
            return self._file("api_v0_actors.json")
        if p == "/api/v0/tasks":
            return self._file("api_v0_tasks.json")
        if p == "/api/v0/nodes":
            return self._file("api_v0_nodes.json")
        if p == "/nodes" and req.query.get("view") == "summary":
            return self._file("nodes_view_summary.json")
        if p.startswith("/nodes/"):
            return self._file("nodes_NODE_ID.json")
        if p == "/api/v0/logs/file":
            pid = self.pid_of.get(req.query.get("actor_id", ""))
            suffix = req.query.get("suffix", "out")
            hits = glob.glob(str(self.case / "logs" / f"worker-*-{pid}.{suffix}")) if pid else []
            if not hits:
                return web.Response(status=500, text="Failed to get log: file not found")
            lines = int(req.query.get("lines", "1000"))
            text = Path(hits[0]).read_text(errors="replace").splitlines()[-lines:]
            return web.Response(text="\n".join(text) + "\n", content_type="text/plain")
        if p == "/api/v0/placement_groups":  # captures without one were taken with every group placed
            return self._file("api_v0_placement_groups.json") if (self.dir / "api_v0_placement_groups.json").exists() \
                else web.json_response(NO_ROWS)
        if p == "/api/cluster_status":
            return self._file("api_cluster_status.json")
        if p == "/worker/traceback":
            return web.Response(status=403, text="Profiling is disabled by default for security reasons.")
        return web.Response(status=404, text="404: Not Found")

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        loop.run_until_complete(site.start())
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self) -> ReplayDashboard:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"replay dashboard could not listen on port {self.port}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


if __name__ == "__main__":
    with ReplayDashboard() as d:
        print(d.url, flush=True)
        threading.Event().wait(float(os.environ.get("REPLAY_SECONDS", "3600")))
