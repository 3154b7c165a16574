"""Ray's object store, read on demand: the object references of every worker (``/api/v0/objects?detail=1``)
and each node's store stats (``/nodes?view=summary``, ``raylet.storeStats``).

Facts, from Ray 2.60's sources (``dashboard/state_aggregator.py`` ``list_objects``, ``memory_utils.py``,
``node_manager.proto`` ``ObjectStoreStats``) and its live answers (tests/fixtures/ray-2.60/F_objects):

- The objects list fans out ``GetObjectsInfo`` to every alive raylet, each of which asks every worker on
  its node; filters apply after that; rows are sorted by object id and cut at ``limit`` (so a cut keeps the
  smallest ids, not the largest objects). ``total`` counts the references of every raylet; a cut shows as
  ``total > num_after_truncation`` or ``num_filtered > limit``. Never polled: only when asked.
- A row is one reference (``object_id``, ``object_size`` in bytes or -1, ``reference_type``, ``call_site``
  — ``"disabled"`` when not recorded — ``task_status``, ``type`` WORKER|DRIVER, and the holder's ``pid``
  and ``ip``). One object held by its owner and a borrower is two rows.
- Without ``RAY_record_ref_creation_sites=1`` in the dashboard's environment (``ray start``), ``warnings``
  holds "Callsite is not being recorded. …"; a raylet that did not answer, ``partial_failure_warning``.
- ``storeStats``: int64 fields as strings, zero fields omitted (``spilledBytesTotal``, ``restoredBytesTotal``
  absent until the first spill or restore, then cumulative); ``objectStoreBytesAvail`` is the capacity.
"""

from __future__ import annotations

from typing import Any

from verltop.convert import to_int, to_str
from verltop.model import ObjectRef, Problem, StoreNode
from verltop.sources import parse, reads
from verltop.sources.dashboard import Result, _get_parsed
from verltop.sources.http import DashboardClient

DEFAULT_LIMIT = 10000  # Ray's RAY_MAX_LIMIT_FROM_API_SERVER: larger is a 400
NOT_RECORDED = "Callsite is not being recorded"


def objects(doc: Any) -> tuple[list[ObjectRef], int | None, int, bool, tuple[str, ...]]:
    """``(refs, references Ray holds, rows returned, call sites recorded, Ray's other warnings)`` of one
    objects answer."""
    lr = parse.state_api_rows(doc)
    inner = parse._dict(parse._dict(doc.get("data")).get("result"))
    out = []
    for r in lr.rows:
        r = parse._dict(r)
        oid = to_str(r.get("object_id"))
        if not oid:
            continue
        size = to_int(r.get("object_size"))
        site = to_str(r.get("call_site"))
        out.append(ObjectRef(
            object_id=oid, size_bytes=size if size is not None and size >= 0 else None,
            reference_type=to_str(r.get("reference_type")) or None,
            call_site=None if not site or site in ("disabled", "<Unknown>") else site,
            task_status=to_str(r.get("task_status")) or None, pid=to_int(r.get("pid")) or None,
            ip=to_str(r.get("ip")) or None, worker_type=(to_str(r.get("type")) or "").upper() or None))
    warnings = [w for w in parse._list(inner.get("warnings")) if isinstance(w, str)]
    recorded = not any(NOT_RECORDED in w for w in warnings)
    others = [w for w in warnings if NOT_RECORDED not in w]
    if lr.warning:
        others.append(lr.warning)
    # a cut by ``limit`` shows as fewer rows than ``num_filtered``; a raylet's own cap as ``total`` above
    # ``num_after_truncation``: what Ray holds is the larger count
    held = max(x for x in (lr.total, to_int(inner.get("num_filtered")), len(lr.rows)) if x is not None)
    return out, held, len(lr.rows), recorded, tuple(others)


def store_nodes(doc: Any) -> list[StoreNode]:
    """``/nodes?view=summary`` → each node's store: used, capacity, spilled and restored (cumulative)."""
    if not isinstance(doc, dict) or doc.get("result") is False:
        raise parse.ParseError("dashboard answer is not a node summary")
    out = []
    for n in parse._list(parse._dict(doc.get("data")).get("summary")):
        n = parse._dict(n)
        raylet = parse._dict(n.get("raylet"))
        nid = to_str(raylet.get("nodeId"))
        if not nid:
            continue
        if (to_str(raylet.get("state")) or "ALIVE").upper() != "ALIVE":
            continue
        used, total, spilled = parse.object_store(raylet)
        stats = raylet.get("storeStats")
        s = stats if isinstance(stats, dict) else None
        restored = (to_int(s.get("restoredBytesTotal")) or 0) if s is not None else None
        out.append(StoreNode(
            node_id=nid, ip=to_str(n.get("ip")) or to_str(raylet.get("nodeManagerAddress")) or None,
            hostname=to_str(n.get("hostname")) or None, used_bytes=used, total_bytes=total,
            spilled_bytes=spilled, restored_bytes=restored,
            spilled_objects=(to_int(s.get("spilledObjectsTotal")) or 0) if s is not None else None,
            restored_objects=(to_int(s.get("restoredObjectsTotal")) or 0) if s is not None else None,
            primary_copy_bytes=(to_int(s.get("objectStoreBytesPrimaryCopy"))
                                or 0) if s is not None else None,
            fallback_bytes=(to_int(s.get("objectStoreBytesFallback")) or 0) if s is not None else None,
            local_objects=(to_int(s.get("numLocalObjects")) or 0) if s is not None else None))
    return out


ObjectsAnswer = tuple[list[ObjectRef], int | None, int, bool, tuple[str, ...]]


async def fetch_objects(client: DashboardClient, limit: int = DEFAULT_LIMIT, timeout_s: float = 30.0
                        ) -> Result[ObjectsAnswer]:
    """Every worker's object references, at most ``limit`` rows; Ray's own timeout is ``timeout_s`` (it
    waits for every raylet), ours a little longer."""
    params = reads.list_params(timeout_s, True, max(1, min(limit, DEFAULT_LIMIT)))
    return await _get_parsed(client, "/api/v0/objects", params, timeout_s + 5,
                             lambda doc, now: (objects(doc), None))


async def fetch_store_nodes(client: DashboardClient, timeout_s: float = 10.0) -> Result[list[StoreNode]]:
    path, params = reads.nodes_summary()
    return await _get_parsed(client, path, params, timeout_s, lambda doc, now: (store_nodes(doc), None))


def failed(what: str, r: Result) -> Problem:
    return r.error or Problem("unknown", f"{what}: no answer")

