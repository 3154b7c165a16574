"""Ray's object store in words: each node's store (used, spilled, restored) and the references each process
holds, by call site, largest first — what ``ray memory --stats-only`` and ``ray memory`` print, with verl's
names on the holders. Shared by ``verltop memory`` and the TUI's object-store screen."""

from __future__ import annotations

from verltop.model import ObjectGroup, ObjectStoreReport, StoreNode
from verltop.text.cells import duration, plural, size, table, utc_time

NOT_RECORDED = ("call sites are not recorded: start Ray with RAY_record_ref_creation_sites=1 (`ray start` and the "
                "driver) to see where each object was created")
NOTHING = "no object references are held"


def holder_text(g: ObjectGroup, with_name: bool = True) -> str:
    """Who holds the references: ``actor_rollout rank 1 (…WorkerDict_0:1)``, ``agent_loop_worker_0``,
    ``driver``, ``task worker``; with pid when nothing else names it."""
    if g.actor_id:
        if g.rank is not None:
            who = f"{g.role or g.worker_group or 'rank'} rank {g.rank}"
            return f"{who} ({g.actor_name})" if g.actor_name and with_name else who
        return g.actor_name or g.class_name or f"actor pid {g.pid}"
    if g.worker_type == "DRIVER":
        return f"driver pid {g.pid}" if g.pid else "driver"
    if g.worker_type in ("SPILL_WORKER", "RESTORE_WORKER"):
        return f"{g.worker_type.lower().replace('_', ' ')} pid {g.pid}"
    return f"task worker pid {g.pid}" if g.pid else "unknown worker"


_RAY_FRAMES = ("/ray/_private/", "/ray/util/", "/ray/actor.py", "/ray/remote_function.py", "/ray/_raylet")


def call_site_text(site: str | None) -> str:
    """Ray's call site (``(put object)  | <frame> | <frame> | …``, innermost first) as its kind and the
    first frame outside Ray: ``(put object) holders.py:<listcomp>:20``; ``(not recorded)`` without one."""
    if not site:
        return "(not recorded)"
    parts = [p.strip() for p in site.split("|") if p.strip()]
    kind = parts[0] if parts and parts[0].startswith("(") else None
    frames = parts[1:] if kind else parts
    user = next((f for f in frames if not any(r in f for r in _RAY_FRAMES)), frames[-1] if frames else "")
    user = user.rsplit("/", 1)[-1]
    return f"{kind} {user}".strip() if kind else user or site


def group_size(g: ObjectGroup) -> str:
    """Its bytes; ``-`` when Ray knows none of its objects' sizes (actor handles)."""
    return "-" if g.unknown_size == g.objects and not g.bytes else size(g.bytes)


def types_text(g: ObjectGroup) -> str:
    """``LOCAL_REFERENCE 3, PINNED_IN_MEMORY 1``."""
    return ", ".join(f"{t} {n}" for t, n in g.reference_types)


def store_line(n: StoreNode) -> str:
    """``10.0.0.2: 60.0M of 80.0M used (75%), spilled 60.0M (2 objects), restored 0B``."""
    where = n.ip or n.hostname or n.node_id[:12]
    if n.used_bytes is None and n.total_bytes is None:
        return f"{where}: store stats not reported yet (the raylet sends them every 15 s)"
    share = f" ({100 * n.used_bytes / n.total_bytes:.0f}%)" if n.used_bytes is not None and n.total_bytes else ""
    out = f"{where}: {size(n.used_bytes)} of {size(n.total_bytes)} used{share}"
    if n.spilled_bytes is not None:
        out += f", spilled {size(n.spilled_bytes)}"
        if n.spilled_objects:
            out += f" ({plural(n.spilled_objects, 'object')})"
    if n.restored_bytes is not None:
        out += f", restored {size(n.restored_bytes)}"
        if n.restored_objects:
            out += f" ({plural(n.restored_objects, 'object')})"
    if n.fallback_bytes:
        out += f", {size(n.fallback_bytes)} on disk (fallback allocation: the shared memory was full)"
    return out


def summary_line(r: ObjectStoreReport) -> str:
    """``9 references to 7 objects, 24.0M, held by 3 processes (read in 0.4 s)``."""
    if r.total_refs is None:
        return "object references: not read"
    if not r.returned_refs:
        return NOTHING
    procs = len({(g.ip, g.pid) for g in r.groups})
    took = f" (read in {duration(r.elapsed_s)})" if r.elapsed_s is not None else ""
    held = f"{procs} process" if procs == 1 else f"{procs} processes"
    return f"{plural(r.returned_refs, 'reference')} to {plural(r.objects, 'object')}, {size(r.bytes)}, held by {held}{took}"


def notes(r: ObjectStoreReport) -> list[str]:
    """What is missing or cut, each a line: the problem, the truncation, unrecorded call sites, Ray's
    warnings."""
    out = []
    if r.problem:
        out.append(r.problem)
    if r.truncated:
        out.append(r.truncated)
    if r.call_sites_recorded is False:
        out.append(NOT_RECORDED)
    out.extend(r.warnings)
    return out


def object_store_text(r: ObjectStoreReport, top: int = 50) -> str:
    """``verltop memory``: the stores, the groups (``top`` largest), then the notes."""
    lines = [f"object store at {utc_time(r.taken_at)}", ""]
    lines.append("STORE PER NODE")
    lines += [f"  {store_line(n)}" for n in r.nodes] or ["  no node reported its store"]
    lines += ["", f"OBJECTS: {summary_line(r)}"]
    if r.groups:
        rows = [[group_size(g), str(g.objects), str(g.refs), holder_text(g), g.ip or "-", call_site_text(g.call_site),
                 types_text(g)] for g in r.groups[:top]]
        lines.append(table(["SIZE", "OBJECTS", "REFS", "HOLDER", "NODE", "CALL SITE", "REFERENCE TYPES"], rows))
        if len(r.groups) > top:
            lines.append(f"… and {len(r.groups) - top} smaller groups (--json has them all)")
    for n in notes(r):
        lines.append(f"note: {n}")
    return "\n".join(lines)
