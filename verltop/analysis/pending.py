"""Pending work: placement groups, actors and tasks Ray has not placed, each held against what the cluster
has per node, and the startup rules of actor rows (pending, cannot start, restart loops). Pure.

A verl job that cannot get its resources hangs before its first step: ``RayResourcePool`` asks for one
placement group per node entry (named ``{pool prefix}verl_group_{counts}:{i}``, bundles ``{"CPU":
max_colocate_count, "GPU": 1}``, STRICT_PACK by default) and the controller sits in ``ray.get(pg.ready())``
with no worker actor created yet. Nothing else on screen says why; this module does.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from verltop.analysis import roles as R
from verltop.model import (
    Capacity,
    ClusterLoad,
    Node,
    PendingItem,
    RawActor,
    RawPendingTask,
    RawPlacementGroup,
    Resources,
    Stall,
)

PENDING_ACTOR_STATES = frozenset(("PENDING_CREATION", "DEPENDENCIES_UNREADY"))
_STATE = operator.attrgetter("state")
UNPLACED_PG_STATES = ("PENDING", "RESCHEDULING")
# death contexts that mean the actor never ran its user code (see sources/causes.py)
CANNOT_START_KINDS = ("runtime_env_failed", "creation_task_failure", "actor_unschedulable")
BLOCKED = ("INFEASIBLE", "NO_RESOURCES")
_VERDICT_STATE = {"infeasible": "INFEASIBLE", "busy": "NO_RESOURCES"}
# a placement group's own resources: CPU_group_<pg id>, CPU_group_0_<pg id>, bundle_group_...
_PG_RES = re.compile(r"^(.+?)_group_(?:\d+_)?[0-9a-f]{32,}$")
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class PendingData:
    """What the engine read about pending work; every part may be missing."""

    pgs: tuple[RawPlacementGroup, ...] = ()
    tasks: tuple[RawPendingTask, ...] = ()  # PENDING_NODE_ASSIGNMENT
    load: ClusterLoad | None = None
    first_seen: Mapping[str, float] = field(default_factory=dict)  # id → when verltop first saw it pending
    restarted_at: Mapping[str, float] = field(default_factory=dict)  # actor id → when its restart count rose
    last_cause: Mapping[str, str] = field(default_factory=dict)  # actor id → why its last incarnation ended

    @property
    def any(self) -> bool:
        return any(p.state in UNPLACED_PG_STATES for p in self.pgs) or bool(self.tasks)


# ---------------------------------------------------------------- capacity


@dataclass(frozen=True, slots=True)
class NodeCap:
    ip: str | None
    total: dict[str, float]
    free: dict[str, float] | None  # None: this node's use is unknown


def camel(name: str) -> str:
    """The dashboard's spelling of a resource name in /api/cluster_status (``object_store_memory`` →
    ``objectStoreMemory``): Ray's ``to_camel_case``."""
    parts = name.split("_")
    return parts[0] + "".join(x.title() for x in parts[1:])


def _get(have: Mapping[str, float], r: str) -> float:
    v = have.get(r)
    return v if v is not None else have.get(camel(r), 0.0)


def node_caps(nodes: Sequence[Node], load: ClusterLoad | None) -> list[NodeCap]:
    """Live nodes with their totals (``/api/v0/nodes``) and what is free (``/api/cluster_status``)."""
    by_id = {n.node_id: n for n in load.nodes} if load else {}
    out = []
    for n in nodes:
        if n.state != "ALIVE":
            continue
        total = dict(n.resources_total)
        nl = by_id.pop(n.node_id, None)
        free = None
        if nl is not None:
            free = {name: f for name, _, f in nl.resources}
            for name, t, _ in nl.resources:
                if name not in total and not any(camel(k) == name for k in total):
                    total[name] = t
        out.append(NodeCap(n.ip, total, free))
    for nl in by_id.values():  # nodes the node list has not caught up with
        out.append(NodeCap(None, {k: t for k, t, _ in nl.resources}, {k: f for k, _, f in nl.resources}))
    return out


def _fits(need: Resources, have: Mapping[str, float]) -> bool:
    return all(_get(have, r) + _EPS >= v for r, v in need)


def _worst(need: Resources, have: Mapping[str, float]) -> tuple[float, str | None]:
    """How much of its most-lacking resource ``have`` holds, as a fraction of ``need``, and which one."""
    out: tuple[float, str | None] = (float("inf"), None)
    for r, v in need:
        if v > 0:
            out = min(out, (_get(have, r) / v, r))
    return out


def _sum(bundles: Sequence[Resources]) -> Resources:
    acc: dict[str, float] = {}
    for b in bundles:
        for r, v in b:
            acc[r] = acc.get(r, 0.0) + v
    return tuple(sorted(acc.items()))


# node, resource, need, bundle number, what the bundles before it take there
_Hit = tuple[NodeCap, str | None, float | None, int | None, float | None]


def _closest(need: Resources, caps: list[NodeCap], have: list[dict[str, float]]) -> tuple[int, str | None]:
    i = max(range(len(caps)), key=lambda j: _worst(need, have[j])[0])
    return i, _worst(need, have[i])[1]


def _check(bundles: Sequence[Resources], strategy: str | None, caps: list[NodeCap], use_free: bool
           ) -> _Hit | tuple[int, int] | None:
    """``None`` if the bundles fit ``caps`` (totals, or what is free); else where they do not."""
    pool = [c for c in caps if not use_free or c.free is not None]
    have = [dict(c.free if use_free and c.free is not None else c.total) for c in pool]
    if not pool:
        return None
    if strategy == "STRICT_PACK":
        need = _sum(bundles)
        if any(_fits(need, h) for h in have):
            return None
        i, r = _closest(need, pool, have)
        return pool[i], r, dict(need).get(r or ""), None, None
    if strategy == "STRICT_SPREAD":
        big = max(bundles, key=lambda b: sum(v for _, v in b))
        ok = sum(1 for h in have if _fits(big, h))
        return None if ok >= len(bundles) else (ok, len(bundles))
    # PACK, SPREAD or unknown: bundle by bundle, largest first, each where it fits
    for k, b in enumerate(sorted(bundles, key=lambda b: -sum(v for _, v in b)), 1):
        j = next((j for j, h in enumerate(have) if _fits(b, h)), None)
        if j is None:
            i, r = _closest(b, pool, have)
            start = pool[i].free if use_free and pool[i].free is not None else pool[i].total
            taken = _get(start, r) - _get(have[i], r) if r else None
            return pool[i], r, dict(b).get(r or ""), k, taken or None
        for r, v in b:
            key = r if r in have[j] else camel(r)
            have[j][key] = _get(have[j], r) - v
    return None


def capacity_of(bundles: Sequence[Resources], strategy: str | None, caps: list[NodeCap],
                scheduling_state: str | None = None) -> Capacity:
    """The demand against the cluster. Ray's own scheduling state, when it has one, decides the verdict
    (INFEASIBLE / NO_RESOURCES); the numbers say why."""
    n = len(caps)
    if not caps or not bundles:
        return Capacity("unknown", nodes=n)
    never = _check(bundles, strategy, caps, use_free=False)
    known_free = any(c.free is not None for c in caps)
    now = _check(bundles, strategy, caps, use_free=True) if known_free else None
    ours = "infeasible" if never else "busy" if now else "fits" if known_free else "unknown"
    verdict = {"INFEASIBLE": "infeasible", "NO_RESOURCES": "busy"}.get(scheduling_state or "", ours)
    hit = never if verdict == "infeasible" else now if verdict == "busy" else None
    if strategy == "STRICT_SPREAD":
        could = sum(1 for c in caps if _fits(max(bundles, key=lambda b: sum(v for _, v in b)), c.total))
        free = _check(bundles, strategy, caps, use_free=True) if known_free else None
        have = free[0] if isinstance(free, tuple) and len(free) == 2 else (len(bundles) if known_free else None)
        return Capacity(verdict, need=float(len(bundles)), node_total=float(could),
                        node_free=None if have is None else float(have), nodes=n, per="nodes")
    if not isinstance(hit, tuple) or len(hit) != 5:
        return Capacity(verdict, nodes=n, per="node" if strategy == "STRICT_PACK" else "bundle")
    node, r, need, k, taken = hit
    return Capacity(verdict, resource=r, need=need, node_ip=node.ip,
                    node_total=_get(node.total, r) if r else None,
                    node_free=_get(node.free, r) if r and node.free is not None else None, nodes=n,
                    per="node" if strategy == "STRICT_PACK" else "bundle", bundle=k if len(bundles) > 1 else None,
                    taken=taken)


# ---------------------------------------------------------------- items


def clean_demand(req: Resources) -> Resources:
    """An actor's or task's demand without Ray's placement-group bookkeeping: ``CPU_group_0_<pg>: 1`` →
    ``CPU: 1``; ``bundle_group_*`` dropped."""
    out: dict[str, float] = {}
    plain = []
    for r, v in req:
        m = _PG_RES.match(r)
        if m is None:
            plain.append((r, v))
        elif m.group(1) != "bundle":
            out[m.group(1)] = max(out.get(m.group(1), 0.0), v)
    return tuple(sorted(plain)) if plain else tuple(sorted(out.items()))


def pool_prefix(pg_name: str | None) -> str | None:
    """``global_poolverl_group_8:0`` → ``global_pool``: the resource pool a verl placement group belongs to."""
    if not pg_name or "verl_group_" not in pg_name:
        return None
    return pg_name.split("verl_group_", 1)[0] or None


def strategy_of(pg: RawPlacementGroup, load: ClusterLoad | None) -> str | None:
    """The strategy of a pending placement group: the autoscaler's pending demands are the only place Ray
    shows it; matched by the bundles (``None`` when two demands of that shape disagree)."""
    if load is None:
        return None
    key = tuple(sorted(pg.bundles))
    found = {s for b, s in load.pg_strategies if b == key}
    return found.pop() if len(found) == 1 else None


def _since(created_s: float | None, key: str, first_seen: Mapping[str, float]) -> float | None:
    return created_s if created_s else first_seen.get(key)


def _waited(since: float | None, now: float) -> float | None:
    return None if since is None else max(0.0, now - since)


def build_pending(pd: PendingData, actors: Sequence[RawActor], nodes: Sequence[Node], now: float
                  ) -> tuple[PendingItem, ...]:
    """Every unplaced placement group, pending actor and task waiting for a node, with why."""
    unplaced = {p.pg_id: p for p in pd.pgs if p.state in UNPLACED_PG_STATES}
    if not unplaced and not pd.tasks and PENDING_ACTOR_STATES.isdisjoint(map(_STATE, actors)):
        return ()  # the usual answer, checked in C: 10,000 actors every build
    caps = node_caps(nodes, pd.load)
    wg_of_pg: dict[str, str] = {}
    for a in actors:
        if a.placement_group_id in unplaced and a.placement_group_id not in wg_of_pg:
            g = R.identity(a).worker_group
            if g:
                wg_of_pg[a.placement_group_id] = g
    items = []
    for pg in unplaced.values():
        strategy = strategy_of(pg, pd.load)
        since = _since(pg.created_s, pg.pg_id, pd.first_seen)
        items.append(PendingItem(
            "placement_group", pg.pg_id, pg.name, wg_of_pg.get(pg.pg_id) or pool_prefix(pg.name), pg.state,
            pg.scheduling_state, pg.bundles, strategy, _waited(since, now), since,
            capacity_of(pg.bundles, strategy, caps, pg.scheduling_state), job_id=pg.job_id))
    created = {t.actor_id: t.created_s for t in pd.tasks if t.actor_id and t.type == "ACTOR_CREATION_TASK"}
    for a in actors:
        if a.state in PENDING_ACTOR_STATES:
            items.append(_actor_item(a, unplaced, caps, _since(created.get(a.actor_id), a.actor_id, pd.first_seen),
                                     now))
    for t in pd.tasks:
        if t.type == "ACTOR_CREATION_TASK" or t.actor_id:
            continue  # an actor's creation: the actor's own item says it
        items.append(_task_item(t, unplaced, caps, _since(t.created_s, t.task_id, pd.first_seen), now))
    order = {"placement_group": 0, "actor": 1, "task": 2}
    items.sort(key=lambda p: (order[p.kind], -(p.waiting_s or 0.0), p.name or "", p.id))
    return tuple(items)


def _actor_item(a: RawActor, unplaced: Mapping[str, RawPlacementGroup], caps: list[NodeCap],
                since: float | None, now: float) -> PendingItem:
    demand = clean_demand(a.required_resources)
    sched = target = None
    cap = None
    if a.state == "DEPENDENCIES_UNREADY":
        waits = "dependencies"
    elif a.placement_group_id and a.placement_group_id in unplaced:
        pg = unplaced[a.placement_group_id]
        waits, target, sched = "placement_group", pg.name or pg.pg_id, pg.scheduling_state
    elif a.placement_group_id:  # its bundle is reserved: what is left is starting the worker
        waits = "runtime_env" if a.env_setup else "worker"
        target = ", ".join(a.env_setup) or None
    else:
        cap = capacity_of((demand,), None, caps) if demand else None
        if cap is not None and cap.verdict in ("infeasible", "busy"):
            waits = "resources"
        else:
            waits = "runtime_env" if a.env_setup else "worker"
            target = ", ".join(a.env_setup) or None
            cap = None
    return PendingItem("actor", a.actor_id, a.name, R.identity(a).worker_group, a.state, sched, (demand,) if demand
                       else (), None, _waited(since, now), since, cap, waits, target, job_id=a.job_id)


def _task_item(t: RawPendingTask, unplaced: Mapping[str, RawPlacementGroup], caps: list[NodeCap],
               since: float | None, now: float) -> PendingItem:
    demand = clean_demand(t.demand)
    if t.placement_group_id and t.placement_group_id in unplaced:
        pg = unplaced[t.placement_group_id]
        return PendingItem("task", t.task_id, t.name, None, t.state, pg.scheduling_state, (demand,), None,
                           _waited(since, now), since, None, "placement_group", pg.name or pg.pg_id, job_id=t.job_id)
    cap = capacity_of((demand,), None, caps) if demand else None
    return PendingItem("task", t.task_id, t.name, None, t.state, None, (demand,) if demand else (), None,
                       _waited(since, now), since, cap, "resources", job_id=t.job_id)


# ---------------------------------------------------------------- actor rows


def blocked(p: PendingItem) -> bool:
    """Ray cannot place it now (or ever): not merely starting up."""
    return (p.scheduling_state in BLOCKED) or (p.capacity is not None and p.capacity.verdict in ("infeasible", "busy"))


def startup_stall(a: RawActor, item: PendingItem | None, pd: PendingData, now: float, pending_after_s: float,
                  startup_after_s: float, restart_window_s: float) -> Stall | None:
    """The startup rules of an actor row: pending too long, cannot start, restarting again and again;
    ``None`` leaves the row to the running-task rules."""
    if a.state in PENDING_ACTOR_STATES:
        if item is None:
            return None
        waited = item.waited_s(now)
        limit = pending_after_s if blocked(item) else startup_after_s
        if waited is None or waited < limit:
            return None
        sched = item.scheduling_state
        if item.waits_for == "resources" and item.capacity is not None:
            sched = _VERDICT_STATE.get(item.capacity.verdict, sched)
        res = item.waits_for == "resources"
        return Stall("pending", state=a.state, waits_for=item.waits_for, target=None if res else item.target,
                     scheduling_state=sched, waiting_s=waited, demand=item.demand[0] if res and item.demand else ())
    restarts = a.num_restarts or None
    if a.state == "DEAD":
        if a.death_kind in CANNOT_START_KINDS:
            return Stall("cannot_start", state="DEAD", cause=a.death_cause, restarts=restarts)
        if restarts:
            return Stall("dead", state="DEAD", cause=a.death_cause, restarts=restarts)
        return None
    if restarts and (a.state == "RESTARTING" or now - pd.restarted_at.get(a.actor_id, float("-inf")) < restart_window_s):
        return Stall("restarting", state=a.state, restarts=restarts, cause=pd.last_cause.get(a.actor_id))
    return None
