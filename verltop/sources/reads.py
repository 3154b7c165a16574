"""The dashboard reads verltop makes, as ``(path, params)``: built once here, for the fetchers of
``dashboard.py`` and for a one-shot command's prefetch (``wire.Prefetch``). Imports nothing."""

from __future__ import annotations

LIMIT = 10000  # Ray's RAY_MAX_LIMIT_FROM_API_SERVER; larger is a 400
FAILED_LIMIT = 500  # failed calls read at a time (the engine's seed, and per method after)

Read = tuple[str, list[tuple[str, str]]]


def filters(*kv: tuple[str, str, str]) -> list[tuple[str, str]]:
    out = []
    for k, pred, v in kv:
        out += [("filter_keys", k), ("filter_predicates", pred), ("filter_values", v)]
    return out


def list_params(timeout_s: float, detail: bool | None = None, limit: int = LIMIT) -> list[tuple[str, str]]:
    p = [("limit", str(limit)), ("timeout", str(int(max(1, timeout_s))))]
    return ([("detail", "1" if detail else "0"), *p]) if detail is not None else p


def actors(timeout_s: float, detail: bool) -> Read:
    return "/api/v0/actors", list_params(timeout_s, detail)


def running_tasks(timeout_s: float, detail: bool) -> Read:
    return "/api/v0/tasks", list_params(timeout_s, detail) + filters(("state", "=", "RUNNING"))


def finished_tasks(timeout_s: float, detail: bool, limit: int, actor_id: str | None = None) -> Read:
    flt = [("state", "=", "FINISHED")] + ([("actor_id", "=", actor_id)] if actor_id else [])
    return "/api/v0/tasks", list_params(timeout_s, detail, limit) + filters(*flt)


def failed_tasks(timeout_s: float, limit: int, name: str | None = None) -> Read:
    """FAILED tasks with their times and errors (detail rows), of one task name when given: a peer whose
    collective timed out failed its call while the straggler's runs on."""
    flt = [("state", "=", "FAILED")] + ([("name", "=", name)] if name else [])
    return "/api/v0/tasks", list_params(timeout_s, True, limit) + filters(*flt)


def pending_refs(timeout_s: float, limit: int = LIMIT) -> Read:
    """References to outputs of unfinished tasks (no actor handles): the wait edges of a dump."""
    return "/api/v0/objects", list_params(timeout_s, False, limit) + filters(
        ("task_status", "!=", "FINISHED"), ("task_status", "!=", "NIL"), ("reference_type", "!=", "ACTOR_HANDLE"))


def jobs(timeout_s: float) -> Read:
    return "/api/v0/jobs", list_params(timeout_s, None, 1000)


def nodes(timeout_s: float) -> Read:
    return "/api/v0/nodes", list_params(timeout_s)


def nodes_summary() -> Read:
    return "/nodes", [("view", "summary")]


def unplaced_placement_groups(timeout_s: float) -> Read:
    """Placement groups not (or no longer) placed: the filter leaves out CREATED and REMOVED rows."""
    return "/api/v0/placement_groups", list_params(timeout_s, True, 1000) + filters(
        ("state", "!=", "CREATED"), ("state", "!=", "REMOVED"))


def pending_tasks(timeout_s: float, limit: int = 500) -> Read:
    return "/api/v0/tasks", list_params(timeout_s, True, limit) + filters(("state", "=", "PENDING_NODE_ASSIGNMENT"))


def finished_runs(timeout_s: float, limit: int, kv: list[tuple[str, str, str]]) -> Read:
    """FINISHED runs with exact times, narrowed by ``kv`` filters (name, actor_id, task_id): the timeline."""
    return "/api/v0/tasks", list_params(timeout_s, True, limit) + filters(*kv)


def waiting_tasks(timeout_s: float) -> Read:
    """Tasks submitted and not running, finished or failed: waiting for arguments, a node or their actor."""
    return "/api/v0/tasks", list_params(timeout_s, False) + filters(
        ("state", "!=", "RUNNING"), ("state", "!=", "FINISHED"), ("state", "!=", "FAILED"))


FIRST_LOG_LINES = 5000  # the first read of the trainer's log: its history of steps


def actor_log(actor_id: str, lines: int, suffix: str = "err") -> Read:
    """The last ``lines`` of an actor's worker log (``out`` or ``err``)."""
    return "/api/v0/logs/file", [("actor_id", actor_id), ("lines", str(lines)), ("suffix", suffix)]


def node_detail(node_id: str) -> Read:
    """One node's stats as its agent last reported them, with each worker's CPU and memory."""
    return f"/nodes/{node_id}", []


def profiling_enabled() -> Read:
    """Is the dashboard's profiling (``/worker/traceback``) on? Ray ≥ 2.56; older ones answer 404."""
    return "/api/profiling_enabled", []
