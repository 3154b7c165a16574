"""Pending work: what Ray has not placed yet, raw rows and the analysed items with the numbers of why."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.model.raw import Resources


@dataclass(frozen=True, slots=True)
class RawPlacementGroup:
    """One row of /api/v0/placement_groups?detail=1. Ray gives no strategy here (see ``ClusterLoad``)."""

    pg_id: str
    name: str | None
    state: str  # PENDING | RESCHEDULING | CREATED | REMOVED
    scheduling_state: str | None  # stats.scheduling_state: INFEASIBLE | NO_RESOURCES | QUEUED | ... | FINISHED
    bundles: tuple[Resources, ...]  # unit_resources of each bundle
    job_id: str | None = None
    created_s: float | None = None  # stats.creation_request_received_ns, as wall-clock seconds


@dataclass(frozen=True, slots=True)
class RawPendingTask:
    """A task Ray has not given a node yet (PENDING_NODE_ASSIGNMENT): a normal task or an actor's creation."""

    task_id: str
    name: str
    func_name: str
    type: str | None  # NORMAL_TASK | ACTOR_CREATION_TASK | ACTOR_TASK
    state: str
    job_id: str | None = None
    actor_id: str | None = None
    placement_group_id: str | None = None
    demand: Resources = ()
    created_s: float | None = None  # creation_time_ms, as seconds


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node's logical resources: ``(name, total, available)`` per resource."""

    node_id: str
    resources: tuple[tuple[str, float, float], ...]


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """What /api/cluster_status says: per-node use of logical resources and the strategies of the pending
    placement-group demands (``(bundles, strategy)``, bundles as in ``RawPlacementGroup.bundles``, sorted)."""

    nodes: tuple[NodeLoad, ...] = ()
    pg_strategies: tuple[tuple[tuple[Resources, ...], str], ...] = ()


@dataclass(frozen=True, slots=True)
class Capacity:
    """A demand against the cluster, as numbers: the resource that does not fit, how much of it one node
    would need, and the node that comes closest (its total and what is free on it)."""

    verdict: str  # "infeasible" (no node could ever hold it) | "busy" (held by others) | "fits" | "unknown"
    resource: str | None = None
    need: float | None = None
    node_ip: str | None = None
    node_total: float | None = None
    node_free: float | None = None
    nodes: int = 0  # live nodes compared
    # what ``need`` is for: "node" (all bundles together, STRICT_PACK) | "bundle" (the ``bundle``-th one to
    # place) | "nodes" (STRICT_SPREAD: ``need`` nodes; ``node_total``/``node_free`` count those that could / can)
    per: str = "node"
    bundle: int | None = None
    taken: float | None = None  # per "bundle": how much of ``resource`` the bundles before it take on that node


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A placement group, actor or task that Ray has not placed yet, with why as numbers (the sentence is
    made from them in ``verltop.text.pending``)."""

    kind: str  # "placement_group" | "actor" | "task"
    id: str
    name: str | None
    worker_group: str | None
    state: str | None
    scheduling_state: str | None
    demand: tuple[Resources, ...]  # per bundle for a placement group; one entry for an actor or task
    strategy: str | None
    waiting_s: float | None
    since_s: float | None = None  # wall-clock start of the wait (lets a view tick it)
    capacity: Capacity | None = None
    waits_for: str | None = None  # actors: "placement_group" | "resources" | "runtime_env" | "worker"
    target: str | None = None  # actors: the placement group (name) they wait for
    detail: str | None = None  # an extra fact for the reason (the runtime env kinds being set up)
    job_id: str | None = None  # the Ray job that asked for it (its driver may be the one waiting)

    def waited_s(self, now: float) -> float | None:
        return self.waiting_s if self.since_s is None else max(0.0, now - self.since_s)
