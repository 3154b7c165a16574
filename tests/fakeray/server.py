"""A real HTTP server (aiohttp.web) that answers like a Ray 2.60 dashboard for a :class:`FakeCluster`.

Usage::

    from tests.fakeray.server import FakeDashboard
    with FakeDashboard(nodes=128, gpus_per_node=8, token=None, seed=1) as fd:
        fd.url                      # "http://127.0.0.1:PORT"
        fd.cluster                  # the model (FakeCluster): kill_rank(), set_hang(), position(), ...
        fd.faults.status_code = 500 # fault knobs, read per request
        fd.counts["/api/v0/actors"] # requests received per path

The server runs in a background thread with its own event loop, so sync and async tests can both use it.
``make_app(cluster)`` gives the bare ``web.Application`` for aiohttp's own test client.

Endpoints (GET; other methods on a known path → 405, unknown path → 404):
``/api/v0/{actors,tasks,nodes,workers}`` (State API: limit ≤ 10000, filters, detail, sort by id, truncation
counters), ``/nodes?view=summary``, ``/nodes/{node_id}``, ``/logical/actors[/{id}]``, ``/api/v0/logs/file``,
``/worker/traceback`` (403 unless profiling), ``/api/authentication_mode``, ``/api/profiling_enabled``,
``/api/version``, ``/api/healthz``, ``/api/gcs_healthz``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakeray.cluster import (
    ACTOR_BASE_COLUMNS,
    ACTOR_COLUMNS,
    ACTOR_FILTERABLE,
    JOB_ID,
    NODE_BASE_COLUMNS,
    NODE_COLUMNS,
    NODE_FILTERABLE,
    TASK_BASE_COLUMNS,
    TASK_COLUMNS,
    TASK_FILTERABLE,
    WORKER_BASE_COLUMNS,
    WORKER_COLUMNS,
    WORKER_FILTERABLE,
    FakeCluster,
)

try:  # orjson is ~10x faster on 10k-row payloads; the stdlib keeps the server dependency-free
    import orjson

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover
    import json

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode()


# the decoded payload rides along with a cached response, for the drop/null faults
PAYLOAD: Any = web.ResponseKey("fakeray_payload", object) if hasattr(web, "ResponseKey") else "fakeray_payload"
DROPPED: Any = web.RequestKey("fakeray_dropped", bool) if hasattr(web, "RequestKey") else "fakeray_dropped"
RAY_MAX_LIMIT_FROM_API_SERVER = 10000
RAY_MAX_LIMIT_FROM_DATA_SOURCE = 10000
DEFAULT_LIMIT = 100
RAY_COMMIT = "b7f4259e944bf6959f721b106adc366ddfa0c356"
PUBLIC_PATHS = frozenset({
    "/", "/favicon.ico", "/api/authentication_mode", "/api/authenticate", "/api/healthz", "/api/gcs_healthz",
    "/api/local_raylet_healthz", "/-/healthz",
})
PROFILING_DISABLED = (
    "Profiling is disabled by default for security reasons. To enable profiling, set the environment variable "
    "RAY_DASHBOARD_ENABLE_PROFILING=1 on the Ray head node. See https://docs.ray.io/en/latest/ray-observability/"
    "user-guides/profiling.html for details."
)
GCS_QUERY_FAILURE = (
    "Failed to query data from GCS. It is due to (1) GCS is unexpectedly failed. (2) GCS is overloaded. (3) "
    "There's an unexpected network issue. Please check the gcs_server.out log to find the root cause."
)
MISSING_TOKEN = "Unauthorized: Missing authentication token"
INVALID_TOKEN = "Forbidden: Invalid authentication token"
AIOHTTP_500 = "500 Internal Server Error\n\nServer got itself in trouble"
HTML_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway"
    "</h1></center>\n<hr><center>nginx/1.25.3</center>\n</body></html>\n"
)


# ---------------------------------------------------------------------------------------------- faults


@dataclass
class Faults:
    """Fault knobs, read on every request (set them from any thread).

    - ``match``: regex searched in the request path; ``None`` = every path. Applies to all knobs below.
    - ``remaining``: apply to the next N matching requests only (then the rule goes quiet); ``None`` = always.
    - ``delay_s``: sleep before answering (``timeout`` tests).
    - ``status_code``: answer this status (500, 429, 404, 503, ...) with a Ray-like body (``body`` overrides).
    - ``html``: answer an HTML page (a proxy's error page) with ``status_code`` or 200.
    - ``truncate``: cut the body: ``True`` = half, an ``int`` = that many bytes, a ``float`` < 1 = that fraction.
    - ``drop_fields`` / ``null_fields``: remove / null these keys wherever they occur in the JSON body.
    - ``down``: abort the connection without any answer (``FakeDashboard.take_down()`` refuses connections).
    """

    match: str | None = None
    remaining: int | None = None
    delay_s: float = 0.0
    status_code: int | None = None
    body: str | None = None
    html: bool = False
    truncate: bool | int | float | None = None
    drop_fields: set[str] = field(default_factory=set)
    null_fields: set[str] = field(default_factory=set)
    down: bool = False

    def reset(self) -> None:
        for k, v in Faults().__dict__.items():
            setattr(self, k, v)

    @property
    def active(self) -> bool:
        return bool(self.delay_s or self.status_code or self.html or self.truncate or self.drop_fields
                    or self.null_fields or self.down) and (self.remaining is None or self.remaining > 0)

    def applies(self, path: str) -> bool:
        return self.active and (self.match is None or re.search(self.match, path) is not None)


@dataclass
class RequestRecord:
    t: float
    method: str
    path: str
    query: str
    status: int
    elapsed_s: float


class RequestStats:
    """What the server saw: per-path counts, a bounded log, concurrency high-water marks."""

    def __init__(self, log_size: int = 100_000) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.log: collections.deque[RequestRecord] = collections.deque(maxlen=log_size)
        self.inflight = 0
        self.max_inflight = 0
        self.inflight_by_path: collections.Counter[str] = collections.Counter()
        self.max_inflight_by_path: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.log.clear()
            self.max_inflight = self.inflight
            self.max_inflight_by_path.clear()

    def total(self) -> int:
        return sum(self.counts.values())


# ---------------------------------------------------------------------------------------------- errors


class _ValueError(Exception):
    """Maps to Ray's 400 envelope (handle_list_api's ``except ValueError``)."""


def _envelope(status: int, msg: str, data: dict | None = None) -> web.Response:
    return web.Response(
        status=status, body=dumps({"result": status == 200, "msg": msg, "data": data if data is not None else {}}),
        content_type="application/json", charset="utf-8",
    )


def _to_bool(val: str) -> bool:
    if val in ("False", "false", "0"):
        return False
    if val in ("True", "true", "1"):
        return True
    raise _ValueError(f"Failed to convert a value {val} of type {type(val)} to {bool}")


def _to_int(val: str) -> int:
    try:
        return int(val)
    except ValueError:
        raise _ValueError(f"Failed to convert a value {val} of type {type(val)} to {int}") from None


@dataclass
class ListOptions:
    limit: int
    timeout: int
    filters: list[tuple[str, str, str]]
    detail: bool
    exclude_driver: bool


def list_options(query: Any) -> ListOptions:
    """``options_from_req`` of ray/dashboard/state_api_utils.py (same checks, same messages)."""
    raw = query.get("limit")
    try:
        limit = int(raw) if raw is not None else DEFAULT_LIMIT
    except ValueError as e:
        raise _ValueError(str(e)) from None
    if limit > RAY_MAX_LIMIT_FROM_API_SERVER:
        raise _ValueError(
            f"Given limit {limit} exceeds the supported limit {RAY_MAX_LIMIT_FROM_API_SERVER}. Use a lower limit, "
            "or set the `RAY_MAX_LIMIT_FROM_API_SERVER` environment variable to a larger value."
        )
    try:
        timeout = int(query.get("timeout", 30))
    except ValueError as e:
        raise _ValueError(str(e)) from None
    keys = query.getall("filter_keys", [])
    preds = query.getall("filter_predicates", [])
    vals = query.getall("filter_values", [])
    if len(keys) != len(vals):
        raise AssertionError("filter_keys and filter_values differ in length")
    filters = list(zip(keys, preds, vals))  # noqa: B905  (Ray zips without strict)
    detail = _to_bool(query["detail"]) if "detail" in query else False
    exclude_driver = _to_bool(query["exclude_driver"]) if "exclude_driver" in query else True
    return ListOptions(limit, timeout, filters, detail, exclude_driver)


def _matcher(filters: list[tuple[str, str, str]], filterable: frozenset[str]) -> Callable[[dict], bool]:
    """``do_filter`` of state_api_utils.py: case-insensitive strings, int/bool conversion, = and !=."""
    prepared = []
    for col, pred, val in filters:
        col = col.lower()
        if col not in filterable:
            raise _ValueError(
                f"The given filter column {col} is not supported. Enter filters with –-filter key=value or "
                f"–-filter key!=value Supported filter columns: {set(filterable)}"
            )
        if pred not in ("=", "!="):
            raise _ValueError(f"Unsupported filter predicate {pred} is given. Available predicates: =, !=.")
        if col == "attempt_number":
            try:
                val = int(val)
            except ValueError:
                raise _ValueError(
                    f"Invalid filter `--filter {col} {val}` for a int type column. Please provide an integer "
                    f"filter `--filter {col} [int]`"
                ) from None
        prepared.append((col, pred, val, val.lower() if isinstance(val, str) else val))

    def match(row: dict) -> bool:
        for col, pred, val, low in prepared:
            if col not in row:
                return False
            d = row[col]
            if pred == "=":
                if isinstance(val, str) and isinstance(d, str):
                    ok = d.lower() == low
                elif isinstance(val, str) and isinstance(d, bool):
                    ok = d == _to_bool(val)
                elif isinstance(val, str) and isinstance(d, int):
                    ok = d == _to_int(val)
                else:
                    ok = d == val
            else:
                ok = d.lower() != low if isinstance(val, str) and isinstance(d, str) else d != val
            if not ok:
                return False
        return True

    return match


PG_COLUMNS = ("placement_group_id", "name", "creator_job_id", "state", "bundles", "is_detached", "stats",
              "topology_strategy", "topology_assignments")


def list_result(
    rows: list[dict], opts: ListOptions, *, id_key: str, columns: tuple[str, ...], base_columns: tuple[str, ...],
    filterable: frozenset[str], pushdown: dict[str, tuple[str, ...]], mode: str,
    by_state: Callable[[str], list[dict]] | None = None,
) -> dict:
    """One ListApiResponse. ``rows`` are in data-source order (GCS order); ``pushdown`` maps the columns GCS
    filters itself to the predicates it supports. ``mode`` picks how ``total`` and ``num_after_truncation``
    are counted: ``actors`` (GCS reports every actor and how many it filtered out) or ``tasks``."""
    match_all = _matcher(opts.filters, filterable)
    push = [f for f in opts.filters if f[0].lower() in pushdown and f[1] in pushdown[f[0].lower()]]
    state_eq = [f for f in push if f[0].lower() == "state" and f[1] == "="]
    if by_state is not None and state_eq:  # an index instead of a scan; same rows, same order
        rows_src = by_state(state_eq[0][2])
        push = [f for f in push if f is not state_eq[0]]
    else:
        rows_src = rows
    match_push = _matcher(push, filterable)
    matched = [r for r in rows_src if match_push(r)] if push else rows_src
    returned = matched[:RAY_MAX_LIMIT_FROM_DATA_SOURCE]
    if mode == "actors":
        total = len(rows)
        num_after_truncation = len(returned) + (len(rows) - len(matched))
    else:
        total = len(matched)
        num_after_truncation = len(returned)
    result = [r for r in returned if match_all(r)] if opts.filters else list(returned)
    num_filtered = len(result)
    result.sort(key=lambda r: r[id_key] or "")
    if opts.limit < 0:
        raise _ValueError("Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    result = result[: opts.limit]
    cols = columns if opts.detail else base_columns
    # detail rows already carry exactly the detail columns, in order
    out = result if opts.detail else [{c: r.get(c) for c in cols} for r in result]
    return {
        "total": total, "num_after_truncation": num_after_truncation, "num_filtered": num_filtered,
        "result": out, "partial_failure_warning": "", "warnings": None,
    }


# ---------------------------------------------------------------------------------------------- app


class _Cached:
    __slots__ = ("body", "content_type", "headers", "payload", "status")

    def __init__(self, status: int, body: bytes, content_type: str, payload: Any = None,
                 headers: dict | None = None) -> None:
        self.status, self.body, self.content_type, self.payload, self.headers = (
            status, body, content_type, payload, headers)


class DashboardApp:
    """Request handling; holds the cluster, the fault rules, the stats and a per-version response cache."""

    def __init__(self, cluster: FakeCluster, faults: Faults | None = None, stats: RequestStats | None = None,
                 max_state_inflight: int = 100) -> None:
        self.cluster = cluster
        self.faults = faults or Faults()
        self.fault_rules: list[Faults] = []
        self.stats = stats or RequestStats()
        self.max_state_inflight = max_state_inflight
        self.traceback_delay_s = 0.0
        self.dead_nodes: set[str] = set()  # node ids whose agent never answers a traceback (a node down)
        self.native_traceback_delay_s = 0.0
        self._state_inflight = 0
        self._cache: dict[tuple, tuple[Any, _Cached]] = {}
        self._building: dict[tuple, asyncio.Future] = {}
        self.builds = 0  # responses generated (cache misses), for perf tests

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._stats_mw, self._fault_mw, self._auth_mw])
        r = app.router
        for path, h in (
            ("/api/v0/actors", self.h_actors), ("/api/v0/tasks", self.h_tasks), ("/api/v0/nodes", self.h_state_nodes),
            ("/api/v0/workers", self.h_workers), ("/nodes", self.h_nodes), ("/nodes/{node_id}", self.h_node),
            ("/logical/actors", self.h_logical_actors), ("/logical/actors/{actor_id}", self.h_logical_actor),
            ("/api/v0/logs/{media_type}", self.h_logs), ("/worker/traceback", self.h_traceback),
            ("/api/authentication_mode", self.h_auth_mode), ("/api/profiling_enabled", self.h_profiling),
            ("/api/version", self.h_version), ("/api/healthz", self.h_health), ("/api/gcs_healthz", self.h_health),
            ("/api/v0/placement_groups", self.h_placement_groups), ("/api/cluster_status", self.h_cluster_status),
        ):
            r.add_get(path, h)
        return app

    # middlewares ----------------------------------------------------------------------------------

    @web.middleware
    async def _stats_mw(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        st = self.stats
        path = request.path
        t0 = time.perf_counter()
        with st._lock:
            st.counts[path] += 1
            st.inflight += 1
            st.max_inflight = max(st.max_inflight, st.inflight)
            st.inflight_by_path[path] += 1
            st.max_inflight_by_path[path] = max(st.max_inflight_by_path[path], st.inflight_by_path[path])
        status = 0
        try:
            resp = await handler(request)
            status = 0 if request.get(DROPPED) else resp.status
            return resp
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            with st._lock:
                st.inflight -= 1
                st.inflight_by_path[path] -= 1
                st.log.append(RequestRecord(time.time(), request.method, path, request.query_string, status,
                                            time.perf_counter() - t0))

    def _rules(self, path: str) -> list[Faults]:
        rules = [r for r in (self.faults, *self.fault_rules) if r.applies(path)]
        for r in rules:
            if r.remaining is not None:
                r.remaining -= 1
        return rules

    @web.middleware
    async def _fault_mw(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        rules = self._rules(request.path)
        if not rules:
            return await handler(request)
        if any(r.down for r in rules):
            if request.transport is not None:
                request.transport.abort()  # RST: the client sees a disconnect, nothing is written
            request[DROPPED] = True
            return web.Response(status=503)
        delay = sum(r.delay_s for r in rules)
        if delay:
            await asyncio.sleep(delay)
        status = next((r.status_code for r in rules if r.status_code), None)
        if any(r.html for r in rules):
            body = next((r.body for r in rules if r.body), HTML_PAGE)
            return web.Response(status=status or 200, text=body, content_type="text/html")
        if status:
            body = next((r.body for r in rules if r.body), None)
            return self._error_for(request.path, status, body)
        resp = await handler(request)
        drop = set().union(*(r.drop_fields for r in rules))
        null = set().union(*(r.null_fields for r in rules))
        trunc = next((r.truncate for r in rules if r.truncate), None)
        if not (drop or null or trunc) or not isinstance(resp, web.Response):
            return resp
        body = resp.body if isinstance(resp.body, bytes) else (resp.text or "").encode()
        if (drop or null) and resp.get(PAYLOAD) is not None:
            body = dumps(_scrub(resp[PAYLOAD], drop, null))
        if trunc:
            if trunc is True:
                n = len(body) // 2
            elif isinstance(trunc, float) and trunc < 1:
                n = int(len(body) * trunc)
            else:
                n = int(trunc)
            body = body[:n]
        return web.Response(status=resp.status, body=body, content_type=resp.content_type)

    def _error_for(self, path: str, status: int, body: str | None) -> web.Response:
        if body is not None:
            return web.Response(status=status, text=body)
        if path.startswith("/api/v0/") or path.startswith("/nodes") or path.startswith("/logical"):
            if status == 429:
                msg = ("Max number of in-progress requests=100 reached. To set a higher limit, set environment "
                       "variable: export RAY_STATE_SERVER_MAX_HTTP_REQUEST='xxx'. Max allowed = 1000")
            elif status == 500:
                msg = GCS_QUERY_FAILURE
            else:
                msg = web.Response(status=status).reason or ""
            return _envelope(status, msg, {"result": None})
        if status == 500:
            return web.Response(status=500, text=AIOHTTP_500)
        return web.Response(status=status, text=f"{status}: {web.Response(status=status).reason}")

    @web.middleware
    async def _auth_mw(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        token = self.cluster.token
        path = request.path
        if token and path not in PUBLIC_PATHS and not path.startswith("/static/"):
            hdr = request.headers.get("Authorization", "") or request.headers.get("X-Ray-Authorization", "")
            if not hdr:
                cookie = request.cookies.get("ray-authentication-token")
                if cookie:
                    hdr = "Bearer " + cookie
            if not hdr:
                return web.Response(status=401, text=MISSING_TOKEN)
            if hdr != "Bearer " + token:
                return web.Response(status=403, text=INVALID_TOKEN)
        return await handler(request)

    # caching --------------------------------------------------------------------------------------

    async def _cached(self, key: tuple, version: Any, build: Callable[[], _Cached]) -> web.Response:
        hit = self._cache.get(key)
        if hit is None or hit[0] != version:
            fut = self._building.get(key)
            if fut is not None and fut.version == version:  # type: ignore[attr-defined]
                c = await asyncio.shield(fut)
            else:
                loop = asyncio.get_running_loop()
                fut = loop.run_in_executor(None, build)
                fut.version = version  # type: ignore[attr-defined]
                self._building[key] = fut
                try:
                    c = await fut
                finally:
                    if self._building.get(key) is fut:
                        del self._building[key]
                self.builds += 1
                if len(self._cache) > 512:
                    self._cache.clear()
                self._cache[key] = (version, c)
        else:
            c = hit[1]
        resp = web.Response(status=c.status, body=c.body, content_type=c.content_type, headers=c.headers,
                            charset="utf-8")
        resp[PAYLOAD] = c.payload
        return resp

    @staticmethod
    def _key(request: web.Request) -> tuple:
        return (request.path, tuple(sorted(request.query.items())))

    def _json(self, status: int, msg: str, data: dict) -> _Cached:
        payload = {"result": status == 200, "msg": msg, "data": data}
        return _Cached(status, dumps(payload), "application/json", payload)

    # State API ------------------------------------------------------------------------------------

    async def _state(self, request: web.Request, version: Any, build: Callable[[ListOptions], dict]) -> web.Response:
        if self._state_inflight >= self.max_state_inflight:
            return _envelope(429, (
                f"Max number of in-progress requests={self.max_state_inflight} reached. To set a higher limit, "
                "set environment variable: export RAY_STATE_SERVER_MAX_HTTP_REQUEST='xxx'. Max allowed = 1000"),
                {"result": None})
        self._state_inflight += 1
        try:
            try:
                opts = list_options(request.query)
            except _ValueError as e:
                return _envelope(400, str(e), {"result": None})
            except AssertionError:
                return web.Response(status=500, text=AIOHTTP_500)

            def run() -> _Cached:
                try:
                    return self._json(200, "", {"result": build(opts)})
                except _ValueError as e:
                    return self._json(400, str(e), {"result": None})

            return await self._cached(self._key(request), version, run)
        finally:
            self._state_inflight -= 1

    async def h_actors(self, request: web.Request) -> web.Response:
        c = self.cluster
        return await self._state(request, ("actors", c.version), lambda o: list_result(
            c.actor_rows(), o, id_key="actor_id", columns=ACTOR_COLUMNS, base_columns=ACTOR_BASE_COLUMNS,
            filterable=ACTOR_FILTERABLE, pushdown={"actor_id": ("=",), "state": ("=",), "job_id": ("=",)},
            mode="actors"))

    async def h_tasks(self, request: web.Request) -> web.Response:
        c = self.cluster
        snap = await asyncio.get_running_loop().run_in_executor(None, c.task_snapshot)
        return await self._state(request, ("tasks", snap.t, c.version), lambda o: list_result(
            snap.all_rows(o.exclude_driver), o, id_key="task_id", columns=TASK_COLUMNS,
            base_columns=TASK_BASE_COLUMNS, filterable=TASK_FILTERABLE,
            pushdown={k: ("=", "!=") for k in ("actor_id", "job_id", "task_id", "name", "state")}, mode="tasks",
            by_state=lambda st: snap.rows_in_state(st, o.exclude_driver)))

    async def h_state_nodes(self, request: web.Request) -> web.Response:
        c = self.cluster
        return await self._state(request, ("nodes", c.version), lambda o: list_result(
            [c.state_node_row(n) for n in c.nodes], o, id_key="node_id", columns=NODE_COLUMNS,
            base_columns=NODE_BASE_COLUMNS, filterable=NODE_FILTERABLE,
            pushdown={"node_id": ("=",), "state": ("=",), "node_name": ("=",)}, mode="tasks"))

    async def h_placement_groups(self, request: web.Request) -> web.Response:
        """Ray 2.60's placement-group list (rows from ``cluster.pg_rows`` when a test sets it; none else)."""
        c = self.cluster
        rows = list(getattr(c, "pg_rows", None) or [])
        return await self._state(request, ("pgs", c.version, len(rows)), lambda o: list_result(
            rows, o, id_key="placement_group_id", columns=PG_COLUMNS, base_columns=PG_COLUMNS[:4],
            filterable=frozenset({"placement_group_id", "name", "creator_job_id", "state", "is_detached"}),
            pushdown={}, mode="tasks"))

    async def h_cluster_status(self, request: web.Request) -> web.Response:
        """``/api/cluster_status`` as on a cluster whose autoscaler has written no status yet."""
        body = {"result": True, "msg": "Got cluster status.",
                "data": {"autoscalingStatus": None, "autoscalingError": None, "clusterStatus": None}}
        return web.json_response(body)

    async def h_workers(self, request: web.Request) -> web.Response:
        c = self.cluster
        return await self._state(request, ("workers", c.version), lambda o: list_result(
            c.worker_rows(), o, id_key="worker_id", columns=WORKER_COLUMNS, base_columns=WORKER_BASE_COLUMNS,
            filterable=WORKER_FILTERABLE, pushdown={}, mode="tasks"))

    # legacy dashboard -----------------------------------------------------------------------------

    async def h_nodes(self, request: web.Request) -> web.Response:
        c = self.cluster
        view = request.query.get("view")
        snap = c.node_snapshot()
        if view == "summary":
            return await self._cached(self._key(request), (snap.t, c.version), lambda: self._json(
                200, "Node summary fetched.",
                {"summary": snap.summary(), "nodeLogicalResources": snap.logical_resources()}))
        if view is not None and view.lower() == "hostnamelist":
            return await self._cached(self._key(request), c.version, lambda: self._json(
                200, "Node hostname list fetched.", {"hostNameList": sorted({n.hostname for n in c.nodes})}))
        return _envelope(500, f"Unknown view {view}")

    async def h_node(self, request: web.Request) -> web.Response:
        c = self.cluster
        node_id = request.match_info["node_id"]
        snap = c.node_snapshot()
        node = c.node_by_id(node_id)

        def build() -> _Cached:
            if node is None:  # Ray answers an almost empty dict for an unknown node
                detail = {"raylet": {"objectStoreUsedMemory": 0, "objectStoreAvailableMemory": 0,
                                     "stateMessage": None}, "tpus": [], "actors": {}, "workers": []}
            else:
                detail = snap.detail(node)
            return self._json(200, "Node details fetched.", {"detail": detail})

        return await self._cached(self._key(request), (snap.t, c.version), build)

    async def h_logical_actors(self, request: web.Request) -> web.Response:
        c = self.cluster
        snap = c.node_snapshot()

        def build() -> _Cached:
            if "ids" in request.query:
                ids = request.query["ids"].split(",")
                actors = {i: (snap.logical_actor(c.by_actor_id[i]) if i in c.by_actor_id else None) for i in ids}
            else:
                actors = {a.actor_id: snap.logical_actor(a) for a in c.actors}
            return self._json(200, "All actors fetched.", {"actors": actors})

        return await self._cached(self._key(request), (snap.t, c.version), build)

    async def h_logical_actor(self, request: web.Request) -> web.Response:
        c = self.cluster
        aid = request.match_info["actor_id"]
        if aid not in c.by_actor_id:
            return web.Response(status=500, text=AIOHTTP_500)  # KeyError in Ray's handler
        snap = c.node_snapshot()
        return await self._cached(self._key(request), (snap.t, c.version), lambda: self._json(
            200, "Actor details fetched.", {"detail": snap.logical_actor(c.by_actor_id[aid])}))

    # logs, tracebacks -----------------------------------------------------------------------------

    async def h_logs(self, request: web.Request) -> web.Response:
        c = self.cluster
        q = request.query
        suffix = q.get("suffix", "out")
        try:
            lines = int(q.get("lines", 1000))
        except ValueError as e:
            return web.Response(status=500, text=str(e))
        if suffix not in ("out", "err"):
            return web.Response(status=500, text=f"Suffix {suffix} is not supported.")
        actor = None
        if q.get("actor_id"):
            actor = c.by_actor_id.get(q["actor_id"])
            if actor is None:
                return web.Response(status=500, text=f"Actor ID {q['actor_id']} not found.")
        elif q.get("task_id"):
            tid = q["task_id"]
            snap = c.task_snapshot()
            row = next((r for r in snap.all_rows(False) if r["task_id"] == tid), None)
            actor = c.by_actor_id.get(row["actor_id"]) if row and row.get("actor_id") else None
            if actor is None:
                return web.Response(status=500, text=(f"Could not find log file for task: {tid} (attempt "
                                                      f"{q.get('attempt_number', 0)}) with suffix: {suffix}"))
        elif q.get("pid"):
            if not (q.get("node_id") or q.get("node_ip")):
                return web.Response(status=500, text="Both node_id and node_ip are not given")
            try:
                pid = int(q["pid"])
            except ValueError as e:
                return web.Response(status=500, text=str(e))
            found = c.find_proc(q.get("node_id"), pid, q.get("node_ip"))
            if found is None:
                return web.Response(status=500, text=f"Node {q.get('node_id') or q.get('node_ip')} not found")
            proc = found[1]
            if proc is None or proc.actor is None or proc.kind != "actor":
                return web.Response(status=500, text=(f"Worker log file for pid {pid} with suffix {suffix} "
                                                      "not found"))
            actor = proc.actor
        else:
            return web.Response(status=500, text=("None of node_id, node_ip, actor_id, task_id, pid and "
                                                  "submission_id is given"))
        text = await asyncio.get_running_loop().run_in_executor(None, c.log_text, actor, suffix, lines)
        return web.Response(text=text, content_type="text/plain",
                            headers={"Content-Disposition": 'attachment; filename="file.txt"'})

    async def h_traceback(self, request: web.Request) -> web.Response:
        c = self.cluster
        if not c.profiling:
            return web.Response(status=403, text=PROFILING_DISABLED)
        q = request.query
        pid_s = q.get("pid")
        node_id = q.get("node_id")
        ip = q.get("ip")
        if not pid_s or not (node_id or ip):
            return web.Response(status=500, text=AIOHTTP_500)  # ValueError raised in Ray's handler
        node = c.node_by_id(node_id) if node_id else next((n for n in c.nodes if n.ip == ip), None)
        if node is None:
            where = f"node_id {node_id}" if node_id else f"IP {ip}"
            return web.Response(status=500, text=f"Failed to get agent address for node at {where}")
        try:
            pid = int(pid_s)
        except ValueError:
            return web.Response(status=400, text="pid must be an integer")
        native = q.get("native", "0").lower() in ("1", "true")
        delay = self.native_traceback_delay_s if native else self.traceback_delay_s
        if node.node_id in self.dead_nodes:
            delay = 3600.0
        if delay:
            await asyncio.sleep(delay)
        ok, text = c.traceback(node, node.by_pid.get(pid), pid, native)
        return web.Response(status=200 if ok else 500, text=text)

    # small ones ---------------------------------------------------------------------------------

    async def h_auth_mode(self, request: web.Request) -> web.Response:
        return web.json_response({"authentication_mode": "token" if self.cluster.token else "disabled"})

    async def h_profiling(self, request: web.Request) -> web.Response:
        return _envelope(200, "", {
            "profilingEnabled": bool(self.cluster.profiling),
            "profilingDefaults": {
                "native": False, "subprocesses": False, "idle": False, "leaks": False,
                "tracePythonAllocators": False, "cpuDuration": 5, "memoryDuration": 10, "maxDuration": 60,
                "cpuFormat": "flamegraph", "memoryFormat": "flamegraph", "pyspyNativeSupported": True,
            },
        })

    async def h_version(self, request: web.Request) -> web.Response:
        c = self.cluster
        return web.Response(text=dumps({"version": "4", "ray_version": c.config.ray_version,
                                        "ray_commit": RAY_COMMIT, "session_name": c.session}).decode(),
                            content_type="application/json")

    async def h_health(self, request: web.Request) -> web.Response:
        return web.Response(text="success")


def _scrub(obj: Any, drop: set[str], null: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: (None if k in null else _scrub(v, drop, null)) for k, v in obj.items() if k not in drop}
    if isinstance(obj, list):
        return [_scrub(v, drop, null) for v in obj]
    return obj


def make_app(cluster: FakeCluster | None = None, **cluster_kwargs: Any) -> web.Application:
    """A bare aiohttp app for ``aiohttp.test_utils`` clients; ``app["fakeray"]`` is the DashboardApp."""
    d = DashboardApp(cluster or FakeCluster(**cluster_kwargs))
    app = d.make_app()
    app["fakeray"] = d
    return app


# ---------------------------------------------------------------------------------------------- runner


class FakeDashboard:
    """The server on 127.0.0.1:<free port> in a background thread (own event loop).

    ``FakeDashboard(cluster)`` or ``FakeDashboard(nodes=..., gpus_per_node=..., token=..., seed=...)`` (any
    :class:`ClusterConfig` field, plus ``clock=``). Use as a context manager (sync or async) or call
    :meth:`start` / :meth:`stop`. ``prewarm=True`` builds the one-time caches before listening (~1 s at
    10,000 actors) so the first request of a benchmark is not the slow one.
    """

    def __init__(self, cluster: FakeCluster | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 max_state_inflight: int = 100, prewarm: bool = False, **cluster_kwargs: Any) -> None:
        self.cluster = cluster if cluster is not None else FakeCluster(**cluster_kwargs)
        self.prewarm = prewarm  # build the one-time caches in start() (fair first-request timings)
        self.app_state = DashboardApp(self.cluster, max_state_inflight=max_state_inflight)
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._up = False

    # knobs ----------------------------------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self.app_state.faults

    @property
    def fault_rules(self) -> list[Faults]:
        """Extra rules, each with its own ``match``; all matching rules apply together."""
        return self.app_state.fault_rules

    def add_fault(self, **knobs: Any) -> Faults:
        rule = Faults(**knobs)
        self.app_state.fault_rules.append(rule)
        return rule

    def clear_faults(self) -> None:
        self.app_state.faults.reset()
        self.app_state.fault_rules.clear()

    @property
    def stats(self) -> RequestStats:
        return self.app_state.stats

    @property
    def counts(self) -> collections.Counter[str]:
        return self.app_state.stats.counts

    def count(self, path: str, prefix: bool = False) -> int:
        """Requests received for ``path`` (or, with ``prefix``, for every path starting with it)."""
        counts = self.app_state.stats.counts
        if prefix:
            return sum(n for p, n in list(counts.items()) if p.startswith(path))
        return counts.get(path, 0)

    def reset_counts(self) -> None:
        self.app_state.stats.reset()

    @property
    def token(self) -> str | None:
        return self.cluster.token

    @token.setter
    def token(self, value: str | None) -> None:
        self.cluster.token = value

    @property
    def profiling(self) -> bool:
        return self.cluster.profiling

    @profiling.setter
    def profiling(self, value: bool) -> None:
        self.cluster.profiling = value

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header a client needs (empty without a token)."""
        return {"Authorization": f"Bearer {self.cluster.token}"} if self.cluster.token else {}

    # lifecycle ------------------------------------------------------------------------------------

    def start(self) -> FakeDashboard:
        if self._thread is not None:
            return self
        if self.prewarm:
            self.cluster.prewarm()
        started = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._astart())
            except BaseException as e:  # noqa: BLE001  (reported to the starting thread)
                error.append(e)
                started.set()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._acleanup())
                loop.close()

        self._thread = threading.Thread(target=run, name="fakeray-dashboard", daemon=True)
        self._thread.start()
        started.wait(30)
        if error:
            self._thread = None
            raise error[0]
        return self

    async def _astart(self) -> None:
        app = self.app_state.make_app()
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await self._site.start()
        server = self._site._server  # the asyncio server: read the port the OS picked
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        self._up = True

    async def _unlisten(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None
        server = self._runner.server if self._runner is not None else None
        if server is not None:
            for conn in list(server.connections):
                with contextlib.suppress(Exception):
                    conn.force_close()
                    if conn.transport is not None:
                        conn.transport.abort()
        self._up = False

    async def _acleanup(self) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None

    def _call(self, coro: Any, timeout: float = 30) -> Any:
        assert self._loop is not None, "not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def take_down(self, for_s: float | None = None) -> None:
        """Stop listening and drop open connections: clients get 'connection refused' until
        :meth:`bring_up` (called automatically after ``for_s`` seconds when given)."""
        if self._up:
            self._call(self._unlisten())
        if for_s is not None:
            loop = self._loop
            assert loop is not None
            loop.call_soon_threadsafe(loop.call_later, for_s, lambda: loop.create_task(self._relisten()))

    async def _relisten(self) -> None:
        if not self._up:
            await self._listen()

    def bring_up(self) -> None:
        """Listen again on the same port."""
        if not self._up:
            self._call(self._listen())

    @property
    def is_up(self) -> bool:
        return self._up

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        loop = self._loop
        with contextlib.suppress(Exception):
            self._call(self._unlisten(), timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(30)
        self._thread = None
        self._loop = None

    def __enter__(self) -> FakeDashboard:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> FakeDashboard:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.to_thread(self.stop)


__all__ = [
    "JOB_ID",
    "DashboardApp",
    "FakeDashboard",
    "Faults",
    "RequestRecord",
    "RequestStats",
    "list_options",
    "list_result",
    "make_app",
]
