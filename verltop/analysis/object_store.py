"""Ray's object references grouped as ``ray memory`` groups them, but by who holds them in verl's terms:
each process (an actor with its worker group and rank, a driver, a task worker) and call site, largest
first. Pure: the references, the actor rows and the store nodes in, a report out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from verltop.model import ActorRow, ObjectGroup, ObjectRef, ObjectStoreReport, StoreNode


def group_refs(refs: Iterable[ObjectRef], actors: Iterable[ActorRow]) -> tuple[ObjectGroup, ...]:
    """One group per (holder process, call site): references, distinct objects and their bytes (an object
    counted once per group), largest first, then most references. A holder is matched to its actor by
    ``(node ip, pid)``; an actor's DEAD incarnation never claims a live pid."""
    by_proc: dict[tuple[str | None, int | None], ActorRow] = {}
    for a in actors:
        if a.pid is None:
            continue
        key = (a.node_ip, a.pid)
        if key not in by_proc or (by_proc[key].state != "ALIVE" and a.state == "ALIVE"):
            by_proc[key] = a
    acc: dict[tuple[str | None, int | None, str | None], list[ObjectRef]] = {}
    for r in refs:
        acc.setdefault((r.ip, r.pid, r.call_site), []).append(r)
    out = []
    for (ip, pid, site), rs in acc.items():
        a = by_proc.get((ip, pid))
        sizes: dict[str, int | None] = {}
        for r in rs:
            sizes.setdefault(r.object_id, r.size_bytes)
        types = Counter(r.reference_type or "UNKNOWN_STATUS" for r in rs)
        out.append(ObjectGroup(
            worker_group=a.worker_group if a else None, role=a.role if a else None, rank=a.rank if a else None,
            actor_name=a.actor_name if a else None, actor_id=a.actor_id if a else None,
            class_name=a.class_name if a else None, pid=pid, ip=ip,
            worker_type=next((r.worker_type for r in rs if r.worker_type), None), call_site=site, refs=len(rs),
            objects=len(sizes), bytes=sum(s for s in sizes.values() if s is not None),
            unknown_size=sum(1 for s in sizes.values() if s is None),
            reference_types=tuple(sorted(types.items(), key=lambda kv: (-kv[1], kv[0])))))
    out.sort(key=lambda g: (-g.bytes, -g.refs, g.ip or "", g.pid or 0, g.call_site or ""))
    return tuple(out)


def truncation(held: int | None, returned: int, limit: int) -> str | None:
    """A line when Ray holds more references than came back (its answer is cut at ``limit`` after sorting
    by object id, so the missing ones are not the smallest)."""
    if held is None or held <= returned:
        return None
    return (f"only {returned:,} of {held:,} object references came back (limit {limit:,}; Ray cuts by object "
            "id, not by size): the groups below are partial")


def object_store_report(taken_at: float, refs: Sequence[ObjectRef] | None, held: int | None, recorded: bool | None,
                        actors: Iterable[ActorRow], nodes: Sequence[StoreNode], limit: int,
                        warnings: Sequence[str] = (), problem: str | None = None,
                        elapsed_s: float | None = None) -> ObjectStoreReport:
    """The report of one read: the nodes' stores, the groups, what was cut, why something is missing."""
    rs = list(refs or ())
    groups = group_refs(rs, actors)
    sizes: dict[str, int | None] = {}
    for r in rs:
        sizes.setdefault(r.object_id, r.size_bytes)
    return ObjectStoreReport(
        taken_at=taken_at, nodes=tuple(sorted(nodes, key=lambda n: (n.ip or "", n.node_id))), groups=groups,
        total_refs=held if refs is not None else None, returned_refs=len(rs), objects=len(sizes),
        bytes=sum(s for s in sizes.values() if s is not None), limit=limit,
        truncated=truncation(held, len(rs), limit) if refs is not None else None,
        call_sites_recorded=recorded if refs is not None else None, warnings=tuple(warnings), problem=problem,
        elapsed_s=elapsed_s)
