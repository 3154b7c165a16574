"""Fetchers for the Ray dashboard: each returns parsed rows or a one-line error, never raises."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generic, TypeVar

from verltop.model import Node, RawActor, RawTask
from verltop.sources import parse
from verltop.sources.http import DashboardClient, Reply

T = TypeVar("T")

LIMIT = 10000  # Ray's RAY_MAX_LIMIT_FROM_API_SERVER; larger is a 400


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    value: T | None
    error: str | None
    taken_at: float
    elapsed_s: float = 0.0
    truncated: str | None = None
    retry_after_s: float | None = None
    unchanged: bool = False  # the answer was byte-for-byte the previous one: nothing was parsed

    @property
    def ok(self) -> bool:
        return self.error is None


def _same_as_last(client: DashboardClient, key: str, body: bytes | None) -> tuple[bool, object]:
    """Was this endpoint's answer identical to the last one? A running job's task list is the same for
    as long as a phase lasts; comparing bytes (memcmp) is far cheaper than parsing 1,000 rows again."""
    memo = client.memo
    last = memo.get(key)
    if last is not None and body is not None and last[0] == body:
        return True, last[1]
    return False, None


def _remember(client: DashboardClient, key: str, body: bytes | None, value: object) -> None:
    if body is not None:
        client.memo[key] = (body, value)


def _fail(reply: Reply, now: float) -> Result:
    return Result(None, reply.error, now, reply.elapsed_s, retry_after_s=reply.retry_after_s)


def _trunc_note(what: str, lr: parse.ListResult) -> str | None:
    if lr.truncated:
        return f"{what}: Ray returned {lr.total} rows but only the first {LIMIT} (its limit)"
    return lr.warning


def _filters(*kv: tuple[str, str, str]) -> list[tuple[str, str]]:
    out = []
    for k, pred, v in kv:
        out += [("filter_keys", k), ("filter_predicates", pred), ("filter_values", v)]
    return out


async def fetch_actors(client: DashboardClient, timeout_s: float = 10.0, detail: bool = True
                       ) -> Result[list[RawActor]]:
    """Every actor; with ``detail``, also the runtime env's rank keys and the death cause (5x the bytes).
    Dead actors are included: a dead rank is the first thing a user looks for."""
    params = [("detail", "1" if detail else "0"), ("limit", str(LIMIT)), ("timeout", str(int(max(1, timeout_s))))]
    reply = await client.get("/api/v0/actors", params, timeout_s + 2)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    try:
        rows, lr = parse.actors(parse.loads(reply.body or b""))
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)
    return Result(rows, None, now, reply.elapsed_s, _trunc_note("actors", lr))


async def fetch_actor_states(client: DashboardClient, timeout_s: float = 10.0
                             ) -> Result[list[tuple[str, str, int | None, str | None]]]:
    """``(actor_id, state, pid, node_id)`` of every actor: the base columns only (a fifth of the bytes)."""
    params = [("detail", "0"), ("limit", str(LIMIT)), ("timeout", str(int(max(1, timeout_s))))]
    reply = await client.get("/api/v0/actors", params, timeout_s + 2)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    same, prev = _same_as_last(client, "actor_states", reply.body)
    if same:
        rows, note = prev  # type: ignore[misc]
        return Result(rows, None, now, reply.elapsed_s, note, unchanged=True)
    try:
        rows, lr = parse.actor_states(parse.loads(reply.body or b""))
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)
    note = _trunc_note("actors", lr)
    _remember(client, "actor_states", reply.body, (rows, note))
    return Result(rows, None, now, reply.elapsed_s, note)


async def fetch_running_tasks(client: DashboardClient, timeout_s: float = 10.0, detail: bool = True
                              ) -> Result[list[RawTask]]:
    """RUNNING tasks (the state filter is evaluated in GCS); ``detail`` adds start times (3x the bytes)."""
    params = [("detail", "1" if detail else "0"), ("limit", str(LIMIT)), ("timeout", str(int(max(1, timeout_s))))]
    params += _filters(("state", "=", "RUNNING"))
    reply = await client.get("/api/v0/tasks", params, timeout_s + 2)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    key = f"running_tasks:{int(detail)}"
    same, prev = _same_as_last(client, key, reply.body)
    if same:
        running, note = prev  # type: ignore[misc]
        return Result(running, None, now, reply.elapsed_s, note, unchanged=True)
    try:
        rows, lr = parse.tasks(parse.loads(reply.body or b""))
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)
    running = [t for t in rows if t.state == "RUNNING"]
    note = _trunc_note("tasks", lr)
    _remember(client, key, reply.body, (running, note))
    return Result(running, None, now, reply.elapsed_s, note)


async def fetch_finished_tasks(client: DashboardClient, limit: int = 2000, timeout_s: float = 15.0
                               ) -> Result[list[RawTask]]:
    """FINISHED actor tasks, read once at start to seed the duration history (never on a timer)."""
    params = [("detail", "1"), ("limit", str(limit)), ("timeout", str(int(timeout_s)))]
    params += _filters(("state", "=", "FINISHED"))
    reply = await client.get("/api/v0/tasks", params, timeout_s + 2)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    try:
        rows, _lr = parse.tasks(parse.loads(reply.body or b""))
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)
    return Result(rows, None, now, reply.elapsed_s)


async def fetch_nodes(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[Node]]:
    params = [("limit", str(LIMIT)), ("timeout", str(int(max(1, timeout_s))))]
    reply = await client.get("/api/v0/nodes", params, timeout_s + 2)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    try:
        return Result(parse.state_nodes(parse.loads(reply.body or b"")), None, now, reply.elapsed_s)
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)


async def fetch_nodes_summary(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[Node]]:
    reply = await client.get("/nodes", [("view", "summary")], timeout_s)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    try:
        return Result(parse.nodes_summary(parse.loads(reply.body or b""), now), None, now, reply.elapsed_s)
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)


async def fetch_node_detail(client: DashboardClient, node_id: str, timeout_s: float = 10.0) -> Result[Node]:
    reply = await client.get(f"/nodes/{node_id}", None, timeout_s)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    try:
        node = parse.node_detail(parse.loads(reply.body or b""), now)
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)
    if node is None:
        return Result(None, "node detail without a node id", now, reply.elapsed_s)
    return Result(node, None, now, reply.elapsed_s)


async def fetch_log_tail(
    client: DashboardClient, actor_id: str, suffix: str = "err", lines: int = 200, timeout_s: float = 10.0
) -> Result[str]:
    """The last ``lines`` of an actor's worker log (``out`` or ``err``)."""
    params = [("actor_id", actor_id), ("lines", str(lines)), ("suffix", suffix)]
    reply = await client.get("/api/v0/logs/file", params, timeout_s)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    return Result(reply.text, None, now, reply.elapsed_s)


async def fetch_traceback(
    client: DashboardClient, pid: int, node_id: str, native: bool = False, timeout_s: float = 20.0
) -> Result[str]:
    """py-spy text dump of one process, run by the dashboard agent on its node."""
    params = [("pid", str(pid)), ("node_id", node_id), ("native", "1" if native else "0")]
    reply = await client.get("/worker/traceback", params, timeout_s)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    return Result(reply.text, None, now, reply.elapsed_s)


async def fetch_auth_mode(client: DashboardClient, timeout_s: float = 5.0) -> Result[str]:
    reply = await client.get("/api/authentication_mode", None, timeout_s)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    try:
        return Result(parse.auth_mode(parse.loads(reply.body or b"")), None, now, reply.elapsed_s)
    except parse.ParseError as e:
        return Result(None, str(e), now, reply.elapsed_s)
