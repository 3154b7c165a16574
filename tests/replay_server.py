"""A real HTTP server that answers as a Ray 2.60 dashboard did, from responses captured on real clusters.

Used by source, CLI and UI tests: verltop talks to it over loopback exactly as to a dashboard.
"""

from __future__ import annotations

import asyncio
import errno
import glob
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from tests.net import free_port

FIXTURES = Path(__file__).parent / "fixtures"
RAY_GPU = FIXTURES / "real-gpu" / "ray-gpu-cluster"


# a state-API list with no rows, as Ray 2.60 answers it
NO_ROWS = {"result": True, "msg": "", "data": {"result": {"total": 0, "num_after_truncation": 0, "num_filtered": 0,
                                                          "result": [], "partial_failure_warning": "",
                                                          "warnings": None}}}


LogFn = Callable[[str, str], "Path | None"]  # (actor_id, "err" | "out") -> the captured log, if any
TracebackFn = Callable[[int, bool, int], "Path | None"]  # (pid, native, n-th call for that pid) -> py-spy text


class ReplayDashboard:
    """Serves one capture folder (``hung/`` of a real-gpu case). ``hooks`` may override any path.

    ``files`` maps an answer's default name (``api_v0_actors.json``, ``api_v0_tasks.json``,
    ``api_v0_nodes.json``, ``nodes_view_summary.json``, ``nodes_NODE_ID.json``) to the capture to serve
    instead (captures of other layouts); ``logs`` and ``tracebacks`` find a worker's log and its py-spy
    dump (``/worker/traceback`` answers 403, profiling off, without them). State API filters
    (``filter_keys``/``filter_predicates``/``filter_values``, ``=`` and ``!=``) are applied to the captured
    rows as GCS would.
    """

    def __init__(self, case: Path = RAY_GPU, phase: str = "hung", token: str | None = None,
                 port: int | None = None, files: dict[str, Path] | None = None, logs: LogFn | None = None,
                 tracebacks: TracebackFn | None = None) -> None:
        self.case = case
        self.dir = case / phase
        self.files = dict(files or {})
        self.logs = logs
        self.tracebacks = tracebacks
        self.token = token
        # a fixed port (the address is part of a snapshot's picture) may be held by another test run on this
        # machine for a while: wait for it rather than fail
        self.bind_wait_s = 120.0 if port else 0.0
        self._bind_error: OSError | None = None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[tuple[str, str]] = []
        self.hooks: dict[str, Callable[[web.Request], web.Response | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._traceback_calls: dict[tuple[int, bool], int] = {}
        actors = json.loads(self._path("api_v0_actors.json").read_text())["data"]["result"]["result"]
        self.pid_of = {a["actor_id"]: a["pid"] for a in actors}

    def _path(self, name: str) -> Path:
        return self.files.get(name, self.dir / name)

    def _file(self, name: str, req: web.Request | None = None) -> web.Response:
        p = self._path(name)
        if not p.exists():
            return web.Response(status=404, text="404: Not Found")
        body = p.read_bytes()
        if req is not None and "filter_keys" in req.query:
            body = _filtered(body, req)
        return web.Response(body=body, content_type="application/json")

    def _log(self, req: web.Request) -> web.Response:
        aid, suffix = req.query.get("actor_id", ""), req.query.get("suffix", "out")
        if self.logs is not None:
            p = self.logs(aid, suffix)
            hits = [str(p)] if p is not None and p.exists() else []
        else:
            pid = self.pid_of.get(aid)
            hits = glob.glob(str(self.case / "logs" / f"worker-*-{pid}.{suffix}")) if pid else []
        if not hits:
            return web.Response(status=500, text="Failed to get log: file not found")
        lines = int(req.query.get("lines", "1000"))
        text = Path(hits[0]).read_text(errors="replace").splitlines()[-lines:]
        return web.Response(text="\n".join(text) + "\n", content_type="text/plain")

    def _traceback(self, req: web.Request) -> web.Response:
        if self.tracebacks is None:
            return web.Response(status=403, text="Profiling is disabled by default for security reasons.")
        pid, native = int(req.query.get("pid", "0")), req.query.get("native") == "1"
        n = self._traceback_calls.get((pid, native), 0)
        self._traceback_calls[(pid, native)] = n + 1
        p = self.tracebacks(pid, native, n)
        if p is None or not p.exists():
            # what the agent says when py-spy finds no such process
            return web.Response(status=500, text=f"Failed to execute: Error: Failed to find process {pid}")
        return web.Response(text=p.read_text(errors="replace"), content_type="text/plain")

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
            return self._file("api_v0_actors.json", req)
        if p == "/api/v0/tasks":
            return self._file("api_v0_tasks.json", req)
        if p == "/api/v0/nodes":
            return self._file("api_v0_nodes.json")
        if p == "/nodes" and req.query.get("view") == "summary":
            return self._file("nodes_view_summary.json")
        if p.startswith("/nodes/"):
            return self._file("nodes_NODE_ID.json")
        if p == "/api/v0/logs/file":
            return self._log(req)
        if p == "/api/v0/placement_groups":  # captures without one were taken with every group placed
            return self._file("api_v0_placement_groups.json") if (self.dir / "api_v0_placement_groups.json").exists() \
                else web.json_response(NO_ROWS)
        if p == "/api/cluster_status":
            return self._file("api_cluster_status.json")
        if p == "/worker/traceback":
            return self._traceback(req)
        return web.Response(status=404, text="404: Not Found")

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        deadline = time.monotonic() + self.bind_wait_s
        while True:
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            try:
                loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
                break
            except OSError as e:
                loop.run_until_complete(self._runner.cleanup())
                if e.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    self._bind_error = e
                    self._ready.set()
                    loop.close()
                    return
                time.sleep(0.25)
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self) -> ReplayDashboard:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(self.bind_wait_s + 10) or self._bind_error is not None:
            raise RuntimeError(f"replay dashboard could not listen on port {self.port}: {self._bind_error}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


def _filtered(body: bytes, req: web.Request) -> bytes:
    """The State API's row filters, evaluated on a captured (unfiltered) answer."""
    keys, preds, vals = (req.query.getall(k, []) for k in ("filter_keys", "filter_predicates", "filter_values"))
    doc = json.loads(body)
    res = doc["data"]["result"]
    rows = res["result"]
    for k, pred, v in zip(keys, preds, vals, strict=False):
        rows = [r for r in rows if (str(r.get(k)) == v) == (pred == "=")]
    res["result"] = rows
    # counted after the filter, as when GCS evaluates it (a smaller "total" would read as truncation)
    res["total"] = res["num_after_truncation"] = res["num_filtered"] = len(rows)
    return json.dumps(doc).encode()


if __name__ == "__main__":
    with ReplayDashboard() as d:
        print(d.url, flush=True)
        threading.Event().wait(float(os.environ.get("REPLAY_SECONDS", "3600")))
