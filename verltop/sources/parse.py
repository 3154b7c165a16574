"""Dashboard JSON → model rows. Pure and total: any input gives rows or a ``ParseError``, never a crash.

Ray answers in two dialects: the State API (``/api/v0/*``, snake_case, ``data.result.result``) and the
legacy node endpoints (``/nodes``, camelCase, ``data.summary`` / ``data.detail``). Schema drift (missing
fields, nulls, new fields) degrades to ``None`` values, not errors.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

try:  # hashlib would import OpenSSL (4 ms) for the same function
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b

from verltop.convert import to_float, to_int, to_str
from verltop.model import Gpu, Node, ProcStat, RawActor, RawJob, RawObjectRef, RawTask
from verltop.sources.causes import death_parts, redact, telling_line

# The only runtime-env keys verltop ever reads. Everything else in a runtime env (API keys, tokens) is
# dropped here, at the edge, so no later layer can show, log or save it.
RANK_ENV_KEYS = (
    "RANK",
    "WORLD_SIZE",
    "WG_PREFIX",
    "RAY_LOCAL_WORLD_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    "NCCL_RAS_ADDR",
)

MIB = 1024 * 1024


class ParseError(ValueError):
    """The answer was not the JSON shape Ray sends (HTML, truncated, wrong envelope)."""


@dataclass(frozen=True, slots=True)
class ListResult:
    rows: list[Any]
    total: int | None
    truncated: bool
    warning: str | None
    dropped: int = 0  # tasks only: task events the GCS dropped (Ray counts them into ``total``)


TASK_LIMIT = 10000  # RAY_MAX_LIMIT_FROM_DATA_SOURCE: a task list this long was cut by the limit
FAST_FROM_BYTES = 64 << 10  # below this the stdlib parses in well under a millisecond
# from here the stdlib again: orjson holds ~15x the answer's size while it parses (a 7 MB node summary or actor
# list at 10,000 actors: ~100 MB for a moment, the TUI's peak RSS), the stdlib ~4x, for 1.1-1.3x the time
LEAN_FROM_BYTES = 2 << 20
_fast_loads: Any = None


def _fast() -> Any:
    """orjson's loads (1.1-2x faster on the answers of a 1,000-GPU cluster), imported on the first
    big answer: a one-shot command on a small cluster never pays its import (5 ms, with uuid and platform)."""
    global _fast_loads
    if _fast_loads is None:
        try:
            from orjson import loads as fast
        except ImportError:  # pragma: no cover - the stdlib does the same job
            fast = json.loads
        _fast_loads = fast
    return _fast_loads


def loads(text: str | bytes) -> Any:
    try:
        return (_fast() if FAST_FROM_BYTES <= len(text) < LEAN_FROM_BYTES else json.loads)(text)
    except (ValueError, TypeError, RecursionError) as e:  # RecursionError: the stdlib on deep nesting
        snippet = text[:40] if isinstance(text, str) else bytes(text[:40]).decode("utf-8", "replace")
        kind = "HTML, not JSON" if snippet.lstrip().startswith("<") else "invalid JSON (truncated?)"
        raise ParseError(f"dashboard sent {kind} ({e.__class__.__name__})") from None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


_str = to_str
_int = to_int
_float = to_float


def state_api_rows(doc: Any) -> ListResult:
    """Unwrap ``{"result": true, "data": {"result": {"result": [...], "total": N, ...}}}``."""
    if not isinstance(doc, dict):
        raise ParseError("dashboard answer is not a JSON object")
    if doc.get("result") is False:
        raise ParseError(f"dashboard error: {str(doc.get('msg') or 'unknown')[:200]}")
    inner = _dict(_dict(doc.get("data")).get("result"))
    rows = inner.get("result")
    if not isinstance(rows, list):
        raise ParseError("dashboard answer lacks data.result.result (schema changed?)")
    return _list_result(inner, rows)


def _list_result(inner: dict[str, Any], rows: list[Any]) -> ListResult:
    """What the envelope around a list's rows says: its total, whether Ray cut it, a partial failure."""
    total = _int(inner.get("total"))
    after = _int(inner.get("num_after_truncation"))
    truncated = total is not None and after is not None and total > after
    return ListResult(rows=rows, total=total, truncated=truncated,
                      warning=_str(inner.get("partial_failure_warning")) or None)


def streamed(body: bytes, path: tuple[str, ...], take: Any) -> list[dict[str, Any]] | None:
    """``take`` each element of the array at ``path``, one at a time (``jsonstream``); the envelope's levels
    (top first), or None for an answer of another shape (an error's answer, a changed schema, not JSON): the
    caller parses that whole, whose errors say what is wrong with it."""
    from verltop.sources.jsonstream import each

    try:
        levels = each(body.decode("utf-8"), path, take)
    except (ValueError, UnicodeDecodeError):
        return None
    return None if levels[0].get("result") is False else levels


# What an actor's runtime env says, by a digest of it: each actor's is the same string poll after poll, and the
# strings themselves (which may hold secrets) are not kept past the parse.
_ENV_MEMO: dict[bytes, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {}
_ENV_MEMO_MAX = 32768


def runtime_env(serialized_runtime_env: Any) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """``(rank_env, env_setup)`` of ``serialized_runtime_env`` (a JSON string, parsed once per distinct one, or
    an already parsed value)."""
    env: Any = serialized_runtime_env
    if not isinstance(env, str):
        return rank_env(env), env_setup(env)
    if not env or env == "{}":
        return (), ()
    digest = blake2b(env.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    hit = _ENV_MEMO.get(digest)
    if hit is None:
        try:
            doc = json.loads(env)
        except (ValueError, RecursionError):
            doc = None
        hit = (rank_env(doc), env_setup(doc)) if doc is not None else ((), ())
        if len(_ENV_MEMO) >= _ENV_MEMO_MAX:
            _ENV_MEMO.clear()
        _ENV_MEMO[digest] = hit
    return hit


def rank_env(env: Any) -> tuple[tuple[str, str], ...]:
    """The rank keys of a parsed runtime env; everything else is dropped."""
    env_vars = _dict(_dict(env).get("env_vars"))
    out = []
    for key in RANK_ENV_KEYS:
        v = env_vars.get(key)
        if isinstance(v, (str, int)) and not isinstance(v, bool):
            out.append((key, str(v)[:256]))
    return tuple(out)


def death_cause_text(dc: Any) -> str | None:
    """The line of Ray's nested death_cause that says why (see ``sources.causes``)."""
    kind, text, _ = death_parts(dc)
    return telling_line(kind, text)


# runtime-env fields that make Ray install something before the worker can start (minutes, and where it
# fails); only these NAMES are kept. working_dir/py_modules are left out: every `ray job submit` has them.
ENV_SETUP_KEYS = ("pip", "uv", "conda", "container", "image_uri")


def env_setup(env: Any) -> tuple[str, ...]:
    """Which set-up steps a parsed runtime env asks for (``("pip",)``); names only, values are dropped here."""
    env = _dict(env)
    return tuple(k for k in ENV_SETUP_KEYS if env.get(k))


def resources(d: Any) -> tuple[tuple[str, float], ...]:
    """A resource dict (``{"CPU": 10.0}``) as sorted ``(name, amount)`` pairs; non-numbers are dropped."""
    out = []
    for k, v in _dict(d).items():
        f = _float(v)
        if isinstance(k, str) and f is not None:
            out.append((k, f))
    return tuple(sorted(out))


def _redacted(text: str | None) -> str | None:
    return redact(text) if text else None


def death_cause_full(dc: Any) -> str | None:
    """Everything Ray says about a death, uncut: each context's message (a creation task's formatted
    traceback, a runtime env's pip output) and, for a worker death, Ray's reason code (``[WORKER_DIED]``)."""
    if dc is None:
        return None
    if isinstance(dc, str):
        return dc or None
    if not isinstance(dc, dict):
        return None
    parts = []
    for ctx in dc.values():
        if not isinstance(ctx, dict):
            continue
        msg = (ctx.get("formatted_exception_string") or ctx.get("error_message") or ctx.get("errorMessage")
               or ctx.get("reason"))
        reason = ctx.get("reason")
        text = msg.strip() if isinstance(msg, str) else ""
        if isinstance(reason, str) and reason and reason != msg:
            text = f"[{reason}] {text}".rstrip()
        if text:
            parts.append(text)
    return "\n".join(parts) or None


def actor(row: Any) -> RawActor | None:
    r = _dict(row)
    actor_id = _str(r.get("actor_id"))
    if not actor_id:
        return None
    kind, detail, _ = death_parts(r.get("death_cause"))
    env, setup = runtime_env(r.get("serialized_runtime_env"))
    return RawActor(
        actor_id=actor_id,
        class_name=_str(r.get("class_name")) or "?",
        state=(_str(r.get("state")) or "UNKNOWN").upper(),
        name=_str(r.get("name")) or None,
        node_id=_str(r.get("node_id")) or None,
        pid=_int(r.get("pid")) or None,
        job_id=_str(r.get("job_id")),
        env=env,
        death_cause=telling_line(kind, detail),
        num_restarts=_int(r.get("num_restarts")),
        placement_group_id=_str(r.get("placement_group_id")) or None,
        death_text=_redacted(death_cause_full(r.get("death_cause"))),
        death_kind=kind,
        required_resources=resources(r.get("required_resources")),
        env_setup=setup,
    )


def actor_states(doc: Any) -> tuple[list[tuple[str, str, int | None, str | None]], ListResult]:
    """The cheap per-cycle read: ``(actor_id, state, pid, node_id)`` of every actor (``detail=0`` rows)."""
    lr = state_api_rows(doc)
    out = []
    for r in lr.rows:
        if isinstance(r, dict):
            aid = r.get("actor_id")
            if isinstance(aid, str) and aid:
                st = r.get("state")
                out.append((aid, st.upper() if isinstance(st, str) else "UNKNOWN", _int(r.get("pid")) or None,
                            _str(r.get("node_id")) or None))
    if lr.rows and not out:  # as in actors(): a changed schema must not read as "every actor is gone"
        raise ParseError("dashboard actor rows lack actor_id (schema changed?)")
    return out, lr


def actors(doc: Any) -> tuple[list[RawActor], ListResult]:
    lr = state_api_rows(doc)
    out = [a for a in (actor(r) for r in lr.rows) if a is not None]
    if lr.rows and not out:  # rows came, none usable: a changed schema, not an empty cluster
        raise ParseError("dashboard actor rows lack actor_id (schema changed?)")
    return out, lr


def actors_bytes(body: bytes) -> tuple[list[RawActor], ListResult]:
    """``actors`` of the answer as sent, one actor parsed at a time (``jsonstream``): at 10,000 actors the
    detail rows are ~7 MB of JSON, ~20 MB as Python objects parsed whole (more while parsing), every 30 s the
    TUI's peak RSS. An answer of another shape is parsed whole."""
    out: list[RawActor] = []
    seen = [0]

    def take(r: Any) -> None:
        seen[0] += 1
        a = actor(r)
        if a is not None:
            out.append(a)

    levels = streamed(body, ("data", "result", "result"), take)
    if levels is None:
        return actors(loads(body))
    if seen[0] and not out:
        raise ParseError("dashboard actor rows lack actor_id (schema changed?)")
    return out, _list_result(levels[-1], [])


def task(row: Any) -> RawTask | None:
    r = _dict(row)
    task_id = _str(r.get("task_id"))
    if not task_id:
        return None
    name = _str(r.get("name")) or _str(r.get("func_or_class_name")) or "?"
    return RawTask(
        task_id=task_id,
        name=name,
        func_name=_str(r.get("func_or_class_name")) or name,
        state=(_str(r.get("state")) or "UNKNOWN").upper(),
        actor_id=_str(r.get("actor_id")) or None,
        node_id=_str(r.get("node_id")) or None,
        worker_pid=_int(r.get("worker_pid")) or None,
        start_time_ms=_float(r.get("start_time_ms")),
        end_time_ms=_float(r.get("end_time_ms")),
        attempt=_int(r.get("attempt_number")) or 0,
        parent_task_id=_str(r.get("parent_task_id")) or None,
        type=_str(r.get("type")) or None,
        error=_error_line(r) if (_str(r.get("state")) or "").upper() == "FAILED" else None,
    )



def _error_line(r: dict[str, Any]) -> str | None:
    """A FAILED task's error: the last real exception of Ray's message (not Ray's wrapper around it), else
    Ray's error type."""
    line = telling_line("task", redact(_str(r.get("error_message")) or ""))
    out = line or _str(r.get("error_type"))
    return out[:300] if out else None


_TASK_FIELDS = ("task_id", "state", "worker_pid", "start_time_ms", "end_time_ms", "attempt_number", "name",
                "func_or_class_name", "actor_id", "node_id", "parent_task_id", "type", "error_message", "error_type")


def _task_rows(rows: list[Any], memo: dict[tuple, RawTask]) -> list[RawTask]:
    """``task`` of each row, a row whose fields ``task`` reads are those of a row of the last answer taking
    that row's object (at 1,000 running tasks most rows of a changed list are; the parse was 5x the JSON's).
    ``memo`` is left holding this answer's rows."""
    out: list[RawTask] = []
    fresh: dict[tuple, RawTask] = {}
    for r in rows:
        t = sig = None
        if type(r) is dict:
            sig = tuple(map(r.get, _TASK_FIELDS))
            try:
                t = memo.get(sig)
            except TypeError:  # a list or an object where a value belongs: parsed, not kept
                sig = None
        if t is None:
            t = task(r)
        if t is not None:
            out.append(t)
            if sig is not None:
                fresh[sig] = t
    memo.clear()
    memo.update(fresh)
    return out


def tasks(doc: Any, memo: dict[tuple, RawTask] | None = None) -> tuple[list[RawTask], ListResult]:
    """The rows of a task list; with ``memo`` (``_task_rows``), the last answer's row objects where they fit."""
    lr = state_api_rows(doc)
    out = [t for t in map(task, lr.rows) if t is not None] if memo is None else _task_rows(lr.rows, memo)
    if lr.rows and not out:
        raise ParseError("dashboard task rows lack task_id (schema changed?)")
    if lr.truncated and len(lr.rows) < TASK_LIMIT:
        # Ray's total of tasks is what it returned plus the task events its GCS dropped (it keeps the last
        # 100,000 attempts; workers drop events when their buffer is full): a list under the limit is whole
        inner = _dict(_dict(doc.get("data")).get("result"))
        after = _int(inner.get("num_after_truncation")) or len(lr.rows)
        lr = ListResult(lr.rows, lr.total, False, lr.warning, dropped=max(0, (lr.total or 0) - after))
    return out, lr


def object_refs(doc: Any) -> tuple[list[RawObjectRef], ListResult]:
    """/api/v0/objects → the references to outputs of tasks not finished yet (who waits on which task)."""
    lr = state_api_rows(doc)
    out = []
    for r in lr.rows:
        r = _dict(r)
        oid = _str(r.get("object_id"))
        if not oid or len(oid) < 48:
            continue
        out.append(RawObjectRef(object_id=oid, owner_pid=_int(r.get("pid")) or None,
                                owner_ip=_str(r.get("ip")) or None))
    return out, lr


def jobs(doc: Any) -> list[RawJob]:
    """/api/v0/jobs → each job's driver (pid, node). Only these fields are read: a job row also carries its
    entrypoint, metadata and runtime env, which verltop never shows."""
    out = []
    for r in state_api_rows(doc).rows:
        r = _dict(r)
        jid = _str(r.get("job_id"))
        if not jid:
            continue
        d = _dict(r.get("driver_info"))
        out.append(RawJob(job_id=jid, status=(_str(r.get("status")) or "").upper() or None,
                          driver_pid=_int(d.get("pid")) or None, driver_ip=_str(d.get("node_ip_address")) or None,
                          submission_id=_str(r.get("submission_id")) or None))
    return out


def state_nodes(doc: Any) -> list[Node]:
    """/api/v0/nodes → nodes with identity and state only (stats come from /nodes)."""
    out = []
    for r in state_api_rows(doc).rows:
        r = _dict(r)
        nid = _str(r.get("node_id"))
        if not nid:
            continue
        out.append(
            Node(
                node_id=nid,
                ip=_str(r.get("node_ip")),
                hostname=_str(r.get("node_name")),
                state=(_str(r.get("state")) or "UNKNOWN").upper(),
                is_head=bool(r.get("is_head_node")),
                resources_total=tuple(kv for kv in resources(r.get("resources_total")) if _schedulable(kv[0])),
            )
        )
    return out


_PG_RESOURCE = re.compile(r"_group_(?:\d+_)?[0-9a-f]{32,}$")


def _schedulable(name: str) -> bool:
    """Resources a demand can ask for: not ``node:<ip>`` markers, nor a placement group's own
    ``CPU_group_<pg>`` / ``bundle_group_<i>_<pg>`` resources."""
    return not name.startswith("node:") and not _PG_RESOURCE.search(name)


def _gpu(g: Any) -> Gpu | None:
    g = _dict(g)
    idx = _int(g.get("index"))
    if idx is None:
        return None
    util = _float(g.get("utilizationGpu"))
    if util is not None and util < 0:
        util = None
    procs = []
    for p in _list(g.get("processesPids")):
        p = _dict(p)
        pid = _int(p.get("pid"))
        if pid is None:
            continue
        mem = _float(p.get("gpuMemoryUsage"))
        procs.append((pid, int(mem * MIB) if mem is not None else None, _float(p.get("gpuUtilization"))))
    used = _float(g.get("memoryUsed"))
    total = _float(g.get("memoryTotal"))
    power_mw = _float(g.get("powerMw"))
    return Gpu(
        index=idx,
        name=_str(g.get("name")),
        util_percent=util,
        mem_used_bytes=int(used * MIB) if used is not None else None,
        mem_total_bytes=int(total * MIB) if total is not None else None,
        uuid=_str(g.get("uuid")),
        processes=tuple(procs),
        power_w=power_mw / 1000.0 if power_mw is not None and power_mw >= 0 else None,
    )


def object_store(raylet: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """``(used, total, spilled)`` bytes of a node's object store from its raylet stats.

    Ray 2.60: ``objectStoreUsedMemory`` and ``objectStoreAvailableMemory`` (= capacity - used) are ints;
    ``storeStats`` holds int64s as strings and omits zero fields (``spilledBytesTotal`` is absent until the
    first spill, and cumulative after). In the first ~15 s of a raylet there is no ``storeStats`` and both
    memory fields read 0: unknown, not empty.
    """
    stats = raylet.get("storeStats")
    used = _int(raylet.get("objectStoreUsedMemory"))
    avail = _int(raylet.get("objectStoreAvailableMemory"))
    total = _int(_dict(raylet.get("resourcesTotal")).get("objectStoreMemory"))
    if not isinstance(stats, dict):
        if not used and not avail:
            return None, total or None, None
        return used, total or ((used or 0) + (avail or 0)) or None, None
    if used is None:
        used = _int(stats.get("objectStoreBytesUsed")) or 0
    if not total:
        # storeStats' objectStoreBytesAvail is the capacity, despite its name
        total = _int(stats.get("objectStoreBytesAvail")) or ((used + avail) if avail is not None else None)
    return used, total or None, _int(stats.get("spilledBytesTotal")) or 0


def _procs(workers: Any) -> tuple[ProcStat, ...]:
    out = []
    for w in _list(workers):
        w = _dict(w)
        pid = _int(w.get("pid"))
        if pid is None:
            continue
        cmd = _list(w.get("cmdline"))
        out.append(
            ProcStat(
                pid=pid,
                cpu_percent=_float(w.get("cpuPercent")),
                rss_bytes=_int(_dict(w.get("memoryInfo")).get("rss")),
                create_time_s=_float(w.get("createTime")),
                title=_str(cmd[0]) if cmd else None,
            )
        )
    return tuple(out)


def node_stats(d: Any, now: float | None = None) -> Node | None:
    """One node dict of ``/nodes?view=summary`` (or ``/nodes/{id}`` detail)."""
    d = _dict(d)
    raylet = _dict(d.get("raylet"))
    nid = _str(raylet.get("nodeId"))
    if not nid:
        return None
    mem = _list(d.get("mem"))
    total = _int(mem[0]) if len(mem) > 0 else None
    avail = _int(mem[1]) if len(mem) > 1 else None
    used = _int(mem[3]) if len(mem) > 3 else (total - avail if total is not None and avail is not None else None)
    agent_now = _float(d.get("now"))
    age = max(0.0, now - agent_now) if now is not None and agent_now is not None else None
    store_used, store_total, spilled = object_store(raylet)
    return Node(
        node_id=nid,
        ip=_str(d.get("ip")) or _str(raylet.get("nodeManagerAddress")),
        hostname=_str(d.get("hostname")) or _str(raylet.get("nodeManagerHostname")),
        state=(_str(raylet.get("state")) or "ALIVE").upper(),
        is_head=bool(raylet.get("isHeadNode")),
        cpu_percent=_float(d.get("cpu")),
        mem_used_bytes=used,
        mem_total_bytes=total,
        gpus=tuple(g for g in (_gpu(x) for x in _list(d.get("gpus"))) if g is not None),
        stats_age_s=age,
        procs=_procs(d.get("workers")),
        object_store_used_bytes=store_used,
        object_store_total_bytes=store_total,
        object_store_spilled_bytes=spilled,
    )


def legacy_data(doc: Any) -> dict[str, Any]:
    """The ``data`` of an answer in the dashboard's own envelope (``result``, ``msg``, ``data``: the node
    endpoints, not the State API's); ParseError for an error's answer or another shape."""
    if not isinstance(doc, dict):
        raise ParseError("dashboard answer is not a JSON object")
    if doc.get("result") is False:
        raise ParseError(f"dashboard error: {str(doc.get('msg') or 'unknown')[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise ParseError("dashboard answer lacks data (schema changed?)")
    return data


def nodes_summary(doc: Any, now: float | None = None) -> list[Node]:
    """``/nodes?view=summary`` → per-node CPU, memory and GPUs."""
    summary = legacy_data(doc).get("summary")
    if not isinstance(summary, list):
        raise ParseError("dashboard answer lacks data.summary (schema changed?)")
    return [n for n in (node_stats(d, now) for d in summary) if n is not None]


def node_detail(doc: Any, now: float | None = None) -> Node | None:
    """``/nodes/{id}`` → the node with its worker processes (CPU %, RSS)."""
    detail = legacy_data(doc).get("detail")
    if not isinstance(detail, dict):
        raise ParseError("dashboard answer lacks data.detail (schema changed?)")
    return node_stats(detail, now)
