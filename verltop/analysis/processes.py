"""Process trees joined to actors: each actor's descendant processes with their GPU memory, and the orphans.

Pure. Inputs: the trees the sources read (``ProcTree``: this machine's from /proc, other nodes' through a
probe) and the GPU process lists (local NVML, or the dashboard's ``gpus[].processesPids``, which lists every
process that holds GPU memory on the node, children included). A child's GPU memory is shown on its own row
and added to its actor's; an actor that holds no GPU memory itself gets the GPU its children use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from verltop.model import Gpu, Node, ProcRow, ProcStat, ProcTree, RawActor

# pid -> [(the GPU, the process's memory there)]
GpuUse = dict[int, list[tuple[Gpu, int | None]]]


@dataclass(frozen=True, slots=True)
class Attach:
    """What an actor gets from its process tree."""

    processes: tuple[ProcRow, ...]
    read_at: float
    gpu: Gpu | None = None  # where its descendants hold the most memory
    gpu_mem_bytes: int | None = None  # its descendants' memory on every GPU (None: none known)
    gpus: tuple[Gpu, ...] = ()  # every GPU they hold memory on


def gpu_use(gpus: Iterable[Gpu]) -> GpuUse:
    out: GpuUse = {}
    for g in gpus:
        for pid, mem, _ in g.processes:
            out.setdefault(pid, []).append((g, mem))
    return out


def _gpu_of(use: list[tuple[Gpu, int | None]] | None) -> tuple[Gpu | None, int | None]:
    if not use:
        return None, None
    best = max(use, key=lambda u: u[1] or 0)[0]
    known = [m for _, m in use if m is not None]
    return best, sum(known) if known else None


def _row(p: ProcStat, depth: int, use: GpuUse, node: Node | None, actor_id: str | None,
         node_id: str | None) -> ProcRow:
    g, mem = _gpu_of(use.get(p.pid))
    return ProcRow(pid=p.pid, ppid=p.ppid, title=p.title, cpu_percent=p.cpu_percent, rss_bytes=p.rss_bytes,
                   gpu_index=g.index if g else None, gpu_mem_bytes=mem, depth=depth, node_id=node_id,
                   node_ip=node.ip if node else None, actor_id=actor_id,
                   gpu_mem_total_bytes=g.mem_total_bytes if g else None)


@dataclass(frozen=True, slots=True)
class TreeView:
    """One tree with what it applies to: the nodes whose actors' pids are its roots, and their GPUs."""

    tree: ProcTree
    node_ids: frozenset[str]
    gpus: tuple[Gpu, ...]
    use: GpuUse = field(default_factory=dict, compare=False)  # gpu_use(gpus)


def tree_views(local: ProcTree | None, local_node_ids: frozenset[str], local_gpus: tuple[Gpu, ...] | None,
               remote: Iterable[ProcTree], nodes: Mapping[str, Node]) -> list[TreeView]:
    """The trees with their GPUs: this machine's NVML where it works, else the dashboard's per-node lists."""
    out = []
    if local is not None and local_node_ids:
        gpus = local_gpus if local_gpus is not None else tuple(
            g for nid in sorted(local_node_ids) for g in (nodes[nid].gpus if nid in nodes else ()))
        out.append(TreeView(local, local_node_ids, tuple(gpus), gpu_use(gpus)))
    for t in remote:
        if t.node_id and t.node_id not in local_node_ids:
            n = nodes.get(t.node_id)
            g = n.gpus if n else ()
            out.append(TreeView(t, frozenset((t.node_id,)), g, gpu_use(g)))
    return out


def by_actor(actors: Iterable[RawActor], views: list[TreeView], nodes: Mapping[str, Node]) -> dict[str, Attach]:
    """Each live actor whose process was a root of a tree: its descendants (tree order, with depth), their
    GPU memory on their rows, and the totals for the actor's row."""
    out: dict[str, Attach] = {}
    if not views:
        return out
    view_of: dict[str, TreeView] = {nid: v for v in views for nid in v.node_ids}
    per_view: dict[int, tuple[frozenset[int], dict[int, list[tuple[ProcStat, int]]], Attach]] = {}
    for a in actors:
        if a.state != "ALIVE" or a.pid is None or a.node_id not in view_of:
            continue
        v = view_of[a.node_id]
        key = id(v)
        if key not in per_view:
            per_view[key] = (frozenset(v.tree.roots), _by_root(v.tree), Attach((), v.tree.taken_at))
        roots, kids, childless = per_view[key]
        if a.pid not in roots:
            continue  # the actor is newer than the tree: unknown yet
        mine = kids.get(a.pid)
        if not mine:  # most actors: one shared answer
            out[a.actor_id] = childless
            continue
        use = v.use
        node = nodes.get(a.node_id or "")
        rows = tuple(_row(p, d, use, node, a.actor_id, a.node_id) for p, d in mine)
        held = [(u, m) for p in rows for u, m in use.get(p.pid, ())]
        g, mem = _gpu_of(held)
        gpus = tuple({id(u): u for u, _ in held}.values())
        out[a.actor_id] = Attach(rows, v.tree.taken_at, g, mem, gpus)
    return out


def _by_root(t: ProcTree) -> dict[int, list[tuple[ProcStat, int]]]:
    """root pid -> its descendants with their depth, in the tree's order (parents before children)."""
    roots = set(t.roots)
    root_of: dict[int, int] = {}
    depth: dict[int, int] = {}
    out: dict[int, list[tuple[ProcStat, int]]] = {}
    for p in t.procs:
        pp = p.ppid
        if pp in roots:
            r, d = pp, 1
        elif pp in root_of:
            r, d = root_of[pp], depth[pp] + 1
        else:
            continue  # its parent was not listed before it: not in this tree's order
        root_of[p.pid] = r
        depth[p.pid] = d
        out.setdefault(r, []).append((p, d))
    return out


def orphans(views: list[TreeView], actors: Iterable[RawActor], nodes: Mapping[str, Node]) -> tuple[ProcRow, ...]:
    """The loose processes of every tree: left behind by an actor that died, an engine's title with no live
    Ray worker above it, or GPU memory held under no live actor. Each names the actor it was last seen
    under, when verltop saw it there."""
    by_pid: dict[tuple[str, int], RawActor] = {}
    for a in actors:
        if a.pid is not None and a.node_id:
            key = (a.node_id, a.pid)
            # a dead actor's pid may be reused by a live one: the live one wins
            if key not in by_pid or a.state == "ALIVE":
                by_pid[key] = a
    out: list[ProcRow] = []
    for v in views:
        use = v.use
        left = dict(v.tree.left_by)
        node_id = v.tree.node_id or _first_node(v.node_ids, nodes)
        node = nodes.get(node_id or "")
        depth: dict[int, int] = {}
        for p in v.tree.loose:
            depth[p.pid] = depth.get(p.ppid or 0, 0) + 1
            was = None
            if p.pid in left:
                root = left[p.pid]
                was = next((by_pid[(nid, root)] for nid in sorted(v.node_ids) if (nid, root) in by_pid), None)
            out.append(_row(p, depth[p.pid], use, node, was.actor_id if was else None, node_id))
    return tuple(out)


def _first_node(node_ids: frozenset[str], nodes: Mapping[str, Node]) -> str | None:
    """This machine's node to name a local orphan by: the head node if it is here, else the first."""
    ids = sorted(node_ids)
    head = next((n for n in ids if n in nodes and nodes[n].is_head), None)
    return head or (ids[0] if ids else None)
