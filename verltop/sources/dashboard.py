"""Fetchers for the Ray dashboard: each returns parsed rows or a ``Problem``, never raises."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from verltop.model import (
    ClusterLoad,
    Node,
    Problem,
    RawActor,
    RawJob,
    RawObjectRef,
    RawPendingTask,
    RawPlacementGroup,
    RawTask,
)
from verltop.sources import node_answers, parse, parse_pending, reads
from verltop.sources.http import DashboardClient, Reply

T = TypeVar("T")

LIMIT = reads.LIMIT
_NOT_WAITING = frozenset({"RUNNING", "FINISHED", "FAILED"})


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    value: T | None
    error: Problem | None
    taken_at: float
    elapsed_s: float = 0.0
    truncated: str | None = None
    retry_after_s: float | None = None
    unchanged: bool = False  # the answer was byte-for-byte the previous one: nothing was parsed

    @property
    def ok(self) -> bool:
        return self.error is None


def _fail(reply: Reply, now: float) -> Result:
    return Result(None, reply.error, now, reply.elapsed_s, retry_after_s=reply.retry_after_s)


DROPPED = "Ray dropped the events of"  # a whole list whose tasks' states may be stale: see ``complete``


def _trunc_note(what: str, lr: parse.ListResult) -> str | None:
    if lr.truncated:
        return f"{what}: Ray returned {lr.total} rows but only the first {LIMIT} (its limit)"
    if lr.dropped:
        return (f"{DROPPED} {lr.dropped:,} tasks (its GCS keeps the last 100,000 task attempts, "
                "RAY_task_events_max_num_task_in_gcs): a task's state may be stale or missing")
    return lr.warning


def complete(r: Result) -> bool:
    """Is a task list all of what Ray holds (not cut at its limit)? Dropped events leave it whole."""
    return r.truncated is None or r.truncated.startswith(DROPPED)


async def _get_parsed(
    client: DashboardClient, path: str, params: list[tuple[str, str]] | None, timeout_s: float,
    parser: Callable[[Any, float], tuple[Any, str | None]], memo_key: str | None = None,
    decode: Callable[[bytes], Any] = parse.loads, digest: bool = False,
) -> Result:
    """GET ``path``, parse its JSON with ``parser(doc, now) -> (value, note)``; one-line errors.

    With ``memo_key``, an answer byte-for-byte equal to the previous one is not parsed again (a running
    job's task list stays the same for as long as a phase lasts; memcmp is far cheaper than 1,000 rows).
    ``digest``: keep the answer's length and hash rather than the answer (one key per node: 128 nodes'
    reports of ~0.6 MB each would be kept otherwise).
    """
    reply = await client.get(path, params, timeout_s)
    now = time.time()
    if not reply.ok:
        return _fail(reply, now)
    mark: Any = None
    if memo_key is not None and reply.body is not None:
        mark = (len(reply.body), hash(reply.body)) if digest else reply.body
        last = client.memo.get(memo_key)
        if last is not None and last[0] == mark:
            value, note = last[1]  # type: ignore[misc]
            return Result(value, None, now, reply.elapsed_s, note, unchanged=True)
    try:
        value, note = parser(decode(reply.body or b""), now)
    except parse.ParseError as e:
        return Result(None, Problem("bad_answer", str(e)), now, reply.elapsed_s)
    if mark is not None:
        client.memo[memo_key] = (mark, (value, note))  # type: ignore[index]
    return Result(value, None, now, reply.elapsed_s, note)


async def fetch_actors(client: DashboardClient, timeout_s: float = 10.0, detail: bool = True
                       ) -> Result[list[RawActor]]:
    """Every actor; with ``detail``, also the runtime env's rank keys and the death cause (5x the bytes).
    Dead actors are included: a dead rank is the first thing a user looks for."""
    def p(body: bytes, now: float) -> tuple[Any, str | None]:
        rows, lr = parse.actors_bytes(body)  # an actor at a time: megabytes at 10,000 actors
        return rows, _trunc_note("actors", lr)

    return await _get_parsed(client, *reads.actors(timeout_s, detail), timeout_s + 2, p, decode=bytes)


async def fetch_actor_states(client: DashboardClient, timeout_s: float = 10.0
                             ) -> Result[list[tuple[str, str, int | None, str | None]]]:
    """``(actor_id, state, pid, node_id)`` of every actor: the base columns only (a fifth of the bytes)."""
    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse.actor_states(doc)
        return rows, _trunc_note("actors", lr)

    return await _get_parsed(client, *reads.actors(timeout_s, False), timeout_s + 2, p,
                             memo_key="actor_states")


async def fetch_running_tasks(client: DashboardClient, timeout_s: float = 10.0, detail: bool = True
                              ) -> Result[list[RawTask]]:
    """RUNNING tasks (the state filter is evaluated in GCS); ``detail`` adds start times (3x the bytes)."""
    key = f"running:{int(detail)}"

    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse.tasks(doc, client.rows.setdefault(key, {}))
        return [t for t in rows if t.state == "RUNNING"], _trunc_note("tasks", lr)

    return await _get_parsed(client, *reads.running_tasks(timeout_s, detail), timeout_s + 2, p, memo_key=key)


async def fetch_finished_tasks(client: DashboardClient, limit: int = 2000, timeout_s: float = 15.0,
                               detail: bool = True, actor_id: str | None = None) -> Result[list[RawTask]]:
    """FINISHED actor tasks (of one actor: the filter is evaluated in GCS, so that read is small), to seed the
    duration history. Without ``detail``: names only (no times), enough to tell which roles a colocated worker
    hosts."""
    return await _get_parsed(client, *reads.finished_tasks(timeout_s, detail, limit, actor_id), timeout_s + 2,
                             lambda doc, now: (parse.tasks(doc)[0], None))


async def fetch_failed_tasks(client: DashboardClient, limit: int = reads.FAILED_LIMIT, timeout_s: float = 10.0,
                             name: str | None = None) -> Result[list[RawTask]]:
    """FAILED tasks (of task ``name``: filtered in GCS), with times and errors."""
    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, _ = parse.tasks(doc)
        return [t for t in rows if t.state == "FAILED" and (not name or t.name == name)], None

    return await _get_parsed(client, *reads.failed_tasks(timeout_s, limit, name), timeout_s + 2, p)


async def fetch_pending_refs(client: DashboardClient, limit: int = LIMIT, timeout_s: float = 10.0
                             ) -> Result[list[RawObjectRef]]:
    """References held to outputs of unfinished tasks (``task_status`` neither FINISHED nor NIL, no actor
    handles): ``owner pid → task`` wait edges for calls made from async actors, whose ``parent_task_id`` is
    only their creation task. Ray asks every worker of every node for this: read it only during a dump."""
    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse.object_refs(doc)
        return rows, _trunc_note("objects", lr)

    return await _get_parsed(client, *reads.pending_refs(timeout_s, limit), timeout_s + 2, p)


async def fetch_jobs(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[RawJob]]:
    """Every job's driver: pid and node address."""
    return await _get_parsed(client, *reads.jobs(timeout_s), timeout_s + 2,
                             lambda doc, now: (parse.jobs(doc), None))


async def fetch_finished_runs(client: DashboardClient, *, name: str | None = None, actor_id: str | None = None,
                              task_id: str | None = None, limit: int = LIMIT, timeout_s: float = 10.0
                              ) -> Result[tuple[list[RawTask], int | None]]:
    """FINISHED runs with their exact times (detail rows), narrowed by filters Ray applies inside the GCS
    (task ``name``, ``actor_id``, ``task_id``): ``(rows, how many Ray holds that match)``. Ray cannot filter
    by time and sorts by task id before cutting at ``limit``, so a name filter returns every run it still
    holds: the caller keeps such reads small (see analysis/timeline.py)."""
    kv = [("state", "=", "FINISHED")]
    if name:
        kv.append(("name", "=", name))
    if actor_id:
        kv.append(("actor_id", "=", actor_id))
    if task_id:
        kv.append(("task_id", "=", task_id))

    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse.tasks(doc)
        # the filters again, here: a proxy or an older dashboard that ignores one must not mix in other runs
        keep = [t for t in rows if t.state == "FINISHED" and (not name or t.name == name)
                and (not actor_id or t.actor_id == actor_id) and (not task_id or t.task_id == task_id)]
        return (keep, lr.total), None

    return await _get_parsed(client, *reads.finished_runs(timeout_s, limit, kv), timeout_s + 2, p)


async def fetch_waiting_tasks(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[RawTask]]:
    """Tasks submitted and not running yet (waiting for arguments, a node, a worker, or their actor's queue),
    as base rows: the per-group pending counts. Every state filter is applied in the GCS, so this costs what
    waits, not the history."""

    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse.tasks(doc)
        return [t for t in rows if t.state not in _NOT_WAITING], _trunc_note("waiting tasks", lr)

    return await _get_parsed(client, *reads.waiting_tasks(timeout_s), timeout_s + 2, p, memo_key="waiting")


async def fetch_nodes(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[Node]]:
    return await _get_parsed(client, *reads.nodes(timeout_s), timeout_s + 2,
                             lambda doc, now: (parse.state_nodes(doc), None))


async def fetch_profiling_enabled(client: DashboardClient, timeout_s: float = 5.0) -> Result[bool | None]:
    """Is the dashboard's profiling (``/worker/traceback``: py-spy run by each node's agent) on? Ray ≥ 2.56
    answers ``GET /api/profiling_enabled``; an older one (404) has it on, always."""
    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        data = doc.get("data") if isinstance(doc, dict) else None
        on = data.get("profilingEnabled") if isinstance(data, dict) else None
        return (on if isinstance(on, bool) else None), None

    r = await _get_parsed(client, *reads.profiling_enabled(), timeout_s, p)
    if not r.ok and r.error is not None and r.error.status == 404:
        return Result(True, None, r.taken_at, r.elapsed_s)
    return r


async def fetch_nodes_summary(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[Node]]:
    # read a node at a time: the answer is mostly each worker's stats, which this does not use
    return await _get_parsed(client, *reads.nodes_summary(), timeout_s,
                             lambda body, now: (node_answers.nodes_summary_bytes(body, now), None), decode=bytes)


async def fetch_node_detail(client: DashboardClient, node_id: str, timeout_s: float = 10.0) -> Result[Node]:
    """One node's report with its workers. The agent reports every 5 s and the dashboard caches answers 2 s:
    a node on screen, read every poll, is the same report about half the time; then the last node object
    stands (``unchanged``: its ``stats_age_s`` is as of the first read)."""
    def p(body: bytes, now: float) -> tuple[Any, str | None]:
        node = node_answers.node_detail_bytes(body, now)
        if node is None:
            raise parse.ParseError("node detail without a node id")
        return node, None

    return await _get_parsed(client, *reads.node_detail(node_id), timeout_s, p, memo_key=f"node:{node_id}",
                             digest=True, decode=bytes)


async def fetch_unplaced_placement_groups(client: DashboardClient, timeout_s: float = 10.0
                                          ) -> Result[list[RawPlacementGroup]]:
    """Placement groups not (or no longer) placed: PENDING and RESCHEDULING. The filter leaves out the
    CREATED and REMOVED rows, so with nothing pending the answer is ~170 bytes."""
    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse_pending.placement_groups(doc)
        return rows, _trunc_note("placement groups", lr)

    path, params = reads.unplaced_placement_groups(timeout_s)
    return await _get_parsed(client, path, params, timeout_s + 2, p, memo_key="pgs")


async def fetch_pending_tasks(client: DashboardClient, timeout_s: float = 10.0, limit: int = 500
                              ) -> Result[list[RawPendingTask]]:
    """Tasks (and actor creations) waiting for a node: state PENDING_NODE_ASSIGNMENT, with their demand."""
    def p(doc: Any, now: float) -> tuple[Any, str | None]:
        rows, lr = parse_pending.pending_tasks(doc)
        note = (f"{lr.total} tasks wait for a node; the first {len(rows)} are shown"
                if lr.total is not None and lr.total > len(rows) else lr.warning)
        return [t for t in rows if t.state == "PENDING_NODE_ASSIGNMENT"], note  # the filter ran in GCS; be sure

    path, params = reads.pending_tasks(timeout_s, limit)
    return await _get_parsed(client, path, params, timeout_s + 2, p, memo_key="pending_tasks")


async def fetch_cluster_load(client: DashboardClient, timeout_s: float = 10.0) -> Result[ClusterLoad | None]:
    """Per-node logical resources in use and the pending PG strategies (the autoscaler's status)."""
    return await _get_parsed(client, "/api/cluster_status", None, timeout_s,
                             lambda doc, now: (parse_pending.cluster_load(doc), None), memo_key="cluster_load")


async def fetch_log_tail(
    client: DashboardClient, actor_id: str, suffix: str = "err", lines: int = 200, timeout_s: float = 10.0
) -> Result[str]:
    """The last ``lines`` of an actor's worker log (``out`` or ``err``)."""
    return await _log_file(client, reads.actor_log(actor_id, lines, suffix)[1], timeout_s)


async def fetch_process_log_tail(
    client: DashboardClient, pid: int, node_id: str, suffix: str = "err", lines: int = 60, timeout_s: float = 10.0
) -> Result[str]:
    """The last ``lines`` of a worker process's log by pid: an actor's earlier incarnation, after a restart."""
    return await _log_file(client, [("pid", str(pid)), ("node_id", node_id), ("lines", str(lines)), ("suffix", suffix)],
                           timeout_s)


async def fetch_job_log_tail(client: DashboardClient, submission_id: str, lines: int = 200,
                             timeout_s: float = 10.0) -> Result[str]:
    """The last ``lines`` of a submitted job's driver log (``job-driver-<submission id>.log``)."""
    return await _log_file(client, [("submission_id", submission_id), ("lines", str(lines))], timeout_s)


async def _log_file(client: DashboardClient, params: list[tuple[str, str]], timeout_s: float) -> Result[str]:
    """The tail of one log file, as text (the dashboard picks the file from ``params``)."""
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
