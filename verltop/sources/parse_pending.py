"""Pending work in Ray's answers → model rows: placement groups, tasks waiting for a node, cluster load.

Shapes (Ray 2.60, captured): ``/api/v0/placement_groups?detail=1`` rows carry ``bundles[].unit_resources``,
``bundles[].node_id`` ("" until placed) and ``stats`` (``scheduling_state``, ``creation_request_received_ns``
as a string) but no strategy; ``/api/cluster_status`` has it in ``loadMetricsReport.pgDemand`` (whose
bundle dicts keep Ray's resource names) next to ``usageByNode`` (``{node_id: {resource: [used, total]}}``,
resource names camelCased by the dashboard: ``object_store_memory`` → ``objectStoreMemory``).
"""

from __future__ import annotations

import re
from typing import Any

from verltop.convert import to_float, to_int, to_str
from verltop.model import ClusterLoad, NodeLoad, RawPendingTask, RawPlacementGroup, Resources
from verltop.sources.parse import ListResult, ParseError, legacy_data, resources, state_api_rows

# the camelCased forms of a placement group's own resources (CPUGroup0<pg id>, bundleGroup<pg id>) and node markers
_PG_CAMEL = re.compile(r"Group\d*[0-9A-Fa-f]{28,}$")
_UNCAMEL = {"objectStoreMemory": "object_store_memory"}


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def placement_group(row: Any) -> RawPlacementGroup | None:
    r = _dict(row)
    pg_id = to_str(r.get("placement_group_id"))
    if not pg_id:
        return None
    stats = _dict(r.get("stats"))
    bundles = [_dict(b) for b in _list(r.get("bundles"))]
    ns = to_int(stats.get("creation_request_received_ns"))
    return RawPlacementGroup(
        pg_id=pg_id,
        name=to_str(r.get("name")) or None,
        state=(to_str(r.get("state")) or "UNKNOWN").upper(),
        scheduling_state=(to_str(stats.get("scheduling_state")) or "").upper() or None,
        bundles=tuple(resources(b.get("unit_resources")) for b in bundles),
        job_id=to_str(r.get("creator_job_id")) or None,
        created_s=ns / 1e9 if ns else None,
    )


def placement_groups(doc: Any) -> tuple[list[RawPlacementGroup], ListResult]:
    lr = state_api_rows(doc)
    out = [p for p in (placement_group(r) for r in lr.rows) if p is not None]
    if lr.rows and not out:
        raise ParseError("dashboard placement group rows lack placement_group_id (schema changed?)")
    return out, lr


def pending_task(row: Any) -> RawPendingTask | None:
    r = _dict(row)
    task_id = to_str(r.get("task_id"))
    if not task_id:
        return None
    name = to_str(r.get("name")) or to_str(r.get("func_or_class_name")) or "?"
    ms = to_float(r.get("creation_time_ms"))
    return RawPendingTask(
        task_id=task_id,
        name=name,
        func_name=to_str(r.get("func_or_class_name")) or name,
        type=to_str(r.get("type")),
        state=(to_str(r.get("state")) or "UNKNOWN").upper(),
        job_id=to_str(r.get("job_id")) or None,
        actor_id=to_str(r.get("actor_id")) or None,
        placement_group_id=to_str(r.get("placement_group_id")) or None,
        demand=resources(r.get("required_resources")),
        created_s=ms / 1000 if ms else None,
    )


def pending_tasks(doc: Any) -> tuple[list[RawPendingTask], ListResult]:
    lr = state_api_rows(doc)
    out = [t for t in (pending_task(r) for r in lr.rows) if t is not None]
    if lr.rows and not out:
        raise ParseError("dashboard task rows lack task_id (schema changed?)")
    return out, lr


def _bundle_list(v: Any) -> tuple[Resources, ...]:
    """pgDemand's ``[[{res: amt}, count], ...]`` → one entry per bundle, sorted."""
    out: list[Resources] = []
    for item in _list(v):
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], dict):
            n = to_int(item[1]) or 0
            out += [resources(item[0])] * max(0, min(n, 100_000))
    return tuple(sorted(out))


def uncamel(name: str) -> str:
    return _UNCAMEL.get(name, name)


def cluster_load(doc: Any) -> ClusterLoad | None:
    """``/api/cluster_status`` → per-node load and pending PG strategies; ``None`` when the autoscaler has
    written no status (autoscaler v2 clusters, or the first seconds of a cluster)."""
    data = legacy_data(doc)
    cs = data.get("clusterStatus")
    if not isinstance(cs, dict):
        return None
    lm = _dict(cs.get("loadMetricsReport"))
    nodes = []
    for nid, usage in _dict(lm.get("usageByNode")).items():
        res = []
        for name, ut in _dict(usage).items():
            if not isinstance(name, str) or name.startswith("node:") or _PG_CAMEL.search(name):
                continue
            pair = _list(ut)
            used = to_float(pair[0]) if len(pair) > 0 else None
            total = to_float(pair[1]) if len(pair) > 1 else None
            if used is None or total is None:
                continue
            res.append((uncamel(name), total, max(0.0, total - used)))
        if isinstance(nid, str) and nid:
            nodes.append(NodeLoad(nid, tuple(sorted(res))))
    strategies = []
    for entry in _list(lm.get("pgDemand")):
        if isinstance(entry, list) and entry and isinstance(entry[0], dict):
            strat = to_str(entry[0].get("strategy"))
            bundles = _bundle_list(entry[0].get("bundles"))
            if strat and bundles:
                strategies.append((bundles, strat.upper()))
    return ClusterLoad(nodes=tuple(nodes), pg_strategies=tuple(strategies))
