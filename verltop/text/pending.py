"""Pending work in words: resource amounts and demands, why a demand does not fit, what a pending actor
waits for, and the PENDING section of the text snapshot."""

from __future__ import annotations

from verltop.model import Capacity, PendingItem, Resources, Snapshot
from verltop.text.cells import age, duration, plural, size, table

WAIT_TAG = {"placement_group": "PG", "runtime_env": "env set-up", "worker": "starting", "dependencies": "args"}
_BYTES = ("memory", "object_store_memory")
_VERDICT = {"infeasible": "infeasible", "busy": "waits for resources held by others"}
_RAY_SAYS = {"INFEASIBLE": "no node can ever hold it (Ray: INFEASIBLE)",
             "NO_RESOURCES": "not enough free resources (Ray: NO_RESOURCES)"}


def amount(resource: str | None, v: float | None) -> str:
    """A resource amount: ``10``, ``0.5``, memory as ``8.0G``."""
    if v is None:
        return "-"
    if resource in _BYTES:
        return size(v)
    return f"{v:.0f}" if v == int(v) else f"{v:g}"


def resources(r: Resources) -> str:
    """``{CPU: 10, GPU: 1}``."""
    return "{" + ", ".join(f"{k}: {amount(k, v)}" for k, v in r) + "}"


def demand(bundles: tuple[Resources, ...], kind: str = "placement_group") -> str:
    """``2 bundles × {CPU: 10}``; mixed bundles as ``3 bundles: {CPU: 1, GPU: 1} + 2 × {CPU: 1}``."""
    if kind != "placement_group":
        return resources(bundles[0]) if bundles else "{}"
    counts: dict[Resources, int] = {}
    for b in bundles:
        counts[b] = counts.get(b, 0) + 1
    n = len(bundles)
    if len(counts) == 1:
        (b, _), = counts.items()
        return f"{plural(n, 'bundle')} × {resources(b)}" if n != 1 else f"1 bundle {resources(b)}"
    parts = [resources(b) if c == 1 else f"{c} × {resources(b)}" for b, c in counts.items()]
    return f"{n} bundles: " + " + ".join(parts)


def capacity(c: Capacity, scheduling_state: str | None = None) -> str:
    """Why a demand does not fit, against the node that comes closest: ``no node has 10 CPU free (node
    192.0.2.2: 16 CPU, 13 free)``."""
    if c.per == "nodes" and c.need is not None:  # STRICT_SPREAD: one bundle per node
        free = "" if c.node_free is None else f", {c.node_free:.0f} with room now"
        return (f"needs {plural(int(c.need), 'node')} that each hold one bundle; {c.node_total or 0:.0f} of "
                f"{plural(c.nodes, 'node')} could{free}")
    if c.resource is None:
        return _RAY_SAYS.get(scheduling_state or "", f"Ray: {scheduling_state or 'pending'}")
    res = c.resource
    where = "node" if c.nodes <= 1 else "largest node" if c.verdict == "infeasible" else "freest node"
    free = f", {amount(res, c.node_free)} free" if c.node_free is not None else ""
    if c.taken:
        free += f", {amount(res, c.taken)} of it for the bundles before"
    node = f" ({where} {c.node_ip or '?'}: {amount(res, c.node_total)} {res}{free})" if c.node_total is not None else ""
    need = f"{amount(res, c.need)} {res}"
    for_ = (" for all bundles together" if c.per == "node" else " for even one bundle" if c.bundle == 1
            else f" for bundle {c.bundle}" if c.bundle else "")
    if c.verdict == "infeasible":
        return f"no node has {need}{' left' if c.taken else ''}{for_}{node}"
    if c.verdict == "busy":
        return f"no node has {need} free{for_}{node}"
    return f"room for {need}{node}; Ray: {scheduling_state or 'pending'}"


def actor_wait(waits_for: str | None, target: str | None, scheduling_state: str | None) -> str:
    """What a pending actor waits for, as a phrase."""
    if waits_for == "placement_group":
        return f"waits for placement group {target or '?'}" + (f" ({scheduling_state})" if scheduling_state else "")
    if waits_for == "resources":
        how = {"INFEASIBLE": ", which no node has (infeasible)", "NO_RESOURCES": ", held by others now"}
        return f"needs {target or 'resources'}{how.get(scheduling_state or '', '')}"
    if waits_for == "runtime_env":
        return f"runtime env set-up in progress ({target})" if target else "runtime env set-up in progress"
    if waits_for == "dependencies":
        return "waits for its arguments (objects not ready yet)"
    return "waits for its worker process to start"


def pending_reason(p: PendingItem) -> str:
    """One sentence: what is pending, against what the cluster has, and the verdict."""
    if p.kind == "actor" and p.waits_for != "resources":
        return actor_wait(p.waits_for, p.target, p.scheduling_state) + (f"; {p.detail}" if p.detail else "")
    what = demand(p.demand, p.kind)
    if p.kind == "placement_group" and p.strategy:
        what += f" {p.strategy}"
    c = p.capacity
    if c is None:
        return f"{what}: " + _RAY_SAYS.get(p.scheduling_state or "", f"Ray: {p.scheduling_state or 'pending'}")
    verdict = _VERDICT.get(c.verdict)
    return f"{what}: {capacity(c, p.scheduling_state)}" + (f" — {verdict}" if verdict else "")


def not_placed(p: PendingItem, detail: bool = False) -> str:
    """``placement group NAME is not placed: why``; ``detail`` adds its worker group and how long it waited
    (``placement group NAME (worker group G) is not placed for 5m00s: why``)."""
    what = f"placement group {p.name or p.id}"
    if not detail:
        return f"{what} is not placed: {pending_reason(p)}"
    what += f" (worker group {p.worker_group})" if p.worker_group else ""
    waited = f" for {duration(p.waiting_s)}" if p.waiting_s is not None else ""
    return f"{what} is not placed{waited}: {pending_reason(p)}"


def pending_lines(s: Snapshot) -> list[str]:
    """The PENDING section: what Ray has not placed yet, and why (nothing when nothing waits)."""
    if not s.pending:
        return []
    rows = [[p.kind.replace("placement_group", "placement group"), p.name or p.id[:12], p.worker_group or "-",
             p.scheduling_state or p.state or "-", age(p.waiting_s), pending_reason(p)] for p in s.pending]
    return ["", "PENDING (not placed by Ray yet)",
            *("  " + ln for ln in table(["KIND", "NAME", "GROUP", "STATE", "WAITED", "WHY"], rows).splitlines())]
