"""Join the raw sources into one Snapshot: actors with role, rank, task, GPU, host stats and stalls."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from typing import TYPE_CHECKING, Any

from verltop.analysis import processes as P
from verltop.analysis import roles as R
from verltop.analysis.history import TaskHistory
from verltop.analysis.pending import PendingData, build_pending, startup_stall
from verltop.analysis.stalls import StallSettings, TaskView, stalls_for
from verltop.model import (
    ActorRow,
    Gpu,
    Node,
    ProcStat,
    ProcTree,
    RawActor,
    RawTask,
    Snapshot,
    SourceStatus,
)
from verltop.model.evolve import evolve

if TYPE_CHECKING:
    from verltop.model import RasReport

_NO_STALL_ROLES = ("controller", "other")


@dataclass(frozen=True, slots=True)
class ClusterData:
    """The latest good data of every source (each possibly stale)."""

    address: str
    actors: tuple[RawActor, ...] = ()
    tasks: tuple[RawTask, ...] = ()  # RUNNING tasks
    nodes: tuple[Node, ...] = ()  # identity + stats (+ procs where /nodes/{id} was read)
    local_node_ids: frozenset[str] = frozenset()
    local_procs: dict[int, ProcStat] = field(default_factory=dict)
    local_gpus: tuple[Gpu, ...] | None = None  # None: NVML not available
    local_gpu_error: str | None = None
    sources: tuple[SourceStatus, ...] = ()
    truncated: str | None = None
    ras: RasReport | None = None  # NCCL RAS, read while a stall is suspected
    local_tree: ProcTree | None = None  # this machine's processes below the local actors
    remote_trees: tuple[ProcTree, ...] = ()  # other nodes', read through a probe (node_id set)
    pending: PendingData = field(default_factory=PendingData)


def group_key(ident: R.Identity, class_name: str) -> str:
    return ident.worker_group or R.short_class(class_name)


def running_task_rows(tasks: tuple[RawTask, ...], actors: dict[str, RawActor]) -> list[tuple]:
    """Running tasks as history rows ``(task_id, actor_id, group, method, start_s)``."""
    rows = []
    for t in tasks:
        a = actors.get(t.actor_id or "")
        group = group_key(R.identity(a), a.class_name) if a else "tasks"
        method = R.method_of(t.func_name) or t.name
        start = t.start_time_ms / 1000.0 if t.start_time_ms else None
        rows.append((t.task_id, t.actor_id, group, method, start))
    return rows


def failed_task_rows(tasks: list[RawTask], actors: dict[str, RawActor]) -> list[tuple]:
    """FAILED calls of known actors as history rows ``(task_id, actor_id, group, method, start_s, end_s,
    error)``."""
    rows = []
    for t in tasks:
        a = actors.get(t.actor_id or "")
        if a is None or not t.end_time_ms:
            continue
        start = (t.start_time_ms or t.end_time_ms) / 1000.0
        rows.append((t.task_id, t.actor_id, group_key(R.identity(a), a.class_name), R.method_of(t.func_name) or t.name,
                     start, t.end_time_ms / 1000.0, t.error or ""))
    return rows


def _pick_task(ts: list[RawTask]) -> RawTask:
    return min(ts, key=lambda t: t.start_time_ms or float("inf"))


def _gpu_map(gpus: tuple[Gpu, ...]) -> dict[int, tuple[Gpu, int | None]]:
    """pid → (the GPU where it holds the most memory, that memory)."""
    best: dict[int, tuple[Gpu, int | None]] = {}
    for g in gpus:
        for p, mem, _ in g.processes:
            cur = best.get(p)
            if cur is None or (mem or 0) > (cur[1] or 0):
                best[p] = (g, mem)
    return best


_ID = operator.attrgetter("actor_id")
_NODE_OF = operator.attrgetter("node_id")
_KEY = operator.itemgetter(0)
_ROW = operator.itemgetter(1)

PROBE_CLASS = "VerltopProbe"  # the class of sources/probe.py's actors (they live in namespace verltop-probe)


@dataclass(slots=True)
class BuildMemo:
    """What one build leaves for the next (the caller's, one per live view): the work of whatever did not
    change since. At 10,000 actors most of them are idle and unchanged from one build to the next."""

    rows: dict[str, tuple] = field(default_factory=dict)  # actor id → its inputs and its row (before stalls)
    # node id → (its GPUs, its processes, pid → GPU map, pid → process map, what of it every row reads)
    nodes: dict[str, tuple] = field(default_factory=dict)
    at: dict[tuple, list[int]] | None = None  # (node id, pid) → the actors' indices in ``actors``
    order: tuple[list, list[int]] | None = None  # the last build's sort keys in actor order, and their sorted order
    # the last build's actors in their order, and per actor in that order: what of its node a row reads, its
    # last method and processes, and its (sort key, row) where it was idle and unjudged (None otherwise, a probe)
    actors: tuple[RawActor, ...] = ()
    local: frozenset[str] = frozenset()
    pos: dict[str, int] = field(default_factory=dict)  # actor id → its index in ``actors``
    idents: dict[str, tuple[R.Identity, str]] = field(default_factory=dict)
    group_roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    roles_key: tuple | None = None  # (history, its methods' generation, identities) the roles were worked out of
    inputs: tuple[list, list, list] = ([], [], [])
    quiet: list = field(default_factory=list)


def _node_maps(data: ClusterData, memo: BuildMemo | None) -> tuple[dict, dict, dict, list]:
    """Each node's pid → (GPU, memory) and pid → process maps; what of the node every row on it reads (its
    IP, its memory, the process map) as one object, kept while those are the same; and the nodes whose GPU
    map is new while that object stands, with their last map. Nodes' summaries are read anew every 15 s (new
    GPU figures for the GPUs' ranks): the other rows on them stand."""
    gpus_by_node: dict[str, dict[int, tuple[Gpu, int | None]]] = {}
    procs_by_node: dict[str, dict[int, ProcStat]] = {}
    sig_by_node: dict[str, tuple] = {}
    gpus_moved: list[tuple[str, dict | None, dict | None]] = []
    last = memo.nodes if memo is not None else {}
    kept = {}
    for n in data.nodes:
        m = last.get(n.node_id)
        if m is None or m[1] is not n.procs or m[4][0] != n.ip or m[4][1] != n.mem_total_bytes:
            pm = {p.pid: p for p in n.procs} if n.procs else None
            m = (n.gpus, n.procs, _gpu_map(n.gpus) if n.gpus else None, pm, (n.ip, n.mem_total_bytes, pm))
        elif m[0] is not n.gpus:
            gm = _gpu_map(n.gpus) if n.gpus else None
            gpus_moved.append((n.node_id, m[2], gm))
            m = (n.gpus, m[1], gm, m[3], m[4])
        kept[n.node_id] = m
        sig_by_node[n.node_id] = m[4]
        if m[2] is not None:
            gpus_by_node[n.node_id] = m[2]
        if m[3] is not None:
            procs_by_node[n.node_id] = m[3]
    if memo is not None:
        memo.nodes = kept
    return gpus_by_node, procs_by_node, sig_by_node, gpus_moved


def _sorted(rows: list[tuple[tuple, ActorRow]], memo: BuildMemo | None) -> list[ActorRow]:
    """The rows in table order. Where every sort key is the very object of the last build's, in the same
    actor order, the last order stands without comparing 10,000 keys again."""
    keys = list(map(_KEY, rows))
    last = memo.order if memo is not None else None
    if last is not None and len(last[0]) == len(keys) and all(map(operator.is_, keys, last[0])):
        order = last[1]
    else:
        order = sorted(range(len(keys)), key=keys.__getitem__)
    if memo is not None:
        memo.order = (keys, order)
    return list(map(_ROW, map(rows.__getitem__, order)))


def build_snapshot(
    data: ClusterData, hist: TaskHistory, now: float, cfg: StallSettings | None = None,
    memo: BuildMemo | None = None,
) -> Snapshot:
    """Everything the table shows, from raw data and history. Pure: no I/O, no clock.

    ``memo`` (the caller's, kept between builds): an actor whose inputs are the same objects (or equal) as at
    the last build keeps its row (before stalls), not built again: at 10,000 actors most of them are idle
    and unchanged, and a row of 40 fields is most of a build's cost."""
    cfg = cfg or StallSettings()
    actors = data.actors
    rmemo = memo.rows if memo is not None else None
    nodes = {n.node_id: n for n in data.nodes}
    tasks_by_actor: dict[str, list[RawTask]] = {}
    for t in data.tasks:
        if t.actor_id:
            tasks_by_actor.setdefault(t.actor_id, []).append(t)
    gpus_by_node, procs_by_node, sig_by_node, gpus_moved = _node_maps(data, memo)
    local_gpu_map = _gpu_map(data.local_gpus) if data.local_gpus else {}
    trees = P.tree_views(data.local_tree, data.local_node_ids, data.local_gpus, data.remote_trees, nodes)
    attach = P.by_actor(actors, trees, nodes)

    ids = list(map(_ID, actors))
    # each actor's inputs that may change while the actor object does not, in actor order, looked up in C
    node_ins = list(map(sig_by_node.get, map(_NODE_OF, actors)))  # what of its node the row reads
    lms = list(map(hist.last_method.get, ids))
    atts = list(map(attach.get, ids))
    # the very actor objects of the last build, in its order: only the actors whose inputs changed are looked
    # at (at 10,000 actors, an idle cluster changes a few hundred of them between two builds)
    same_local = memo is not None and memo.local == data.local_node_ids  # else a row may have this machine's
    same_actors = same_local and len(memo.actors) == len(actors) and all(map(operator.is_, actors, memo.actors))

    # Roles of colocated workers are shared by their worker group: ranks run the same methods.
    # (identity, group) of each actor; the memo's when it is the same actor object as last time
    if same_actors:
        idents = memo.idents
    else:
        idents = {}
        for a in actors:
            last = rmemo.get(a.actor_id) if rmemo is not None else None
            if last is not None and last[0] is a:
                idents[a.actor_id] = (last[1], last[2])
            else:
                ident = R.identity(a)
                idents[a.actor_id] = (ident, group_key(ident, a.class_name))
    # the last build's roles while the actors' identities and their methods are the same
    last_roles = memo.roles_key if memo is not None else None
    if last_roles is not None and last_roles[0] is hist and last_roles[1] == hist.methods_gen and last_roles[2] is idents:
        group_roles = memo.group_roles
    else:
        group_methods: dict[str, list] = {}
        for aid, ms in hist.methods_by_actor.items():
            ig = idents.get(aid)
            if ms and ig is not None:
                group_methods.setdefault(ig[1], []).append(ms)
        # one union per group, in C (a thousand ranks' method lists are mostly the same few names)
        group_roles = {g: R.roles_from_methods(set().union(*mss)) for g, mss in group_methods.items()}
    if same_actors and group_roles != memo.group_roles:
        same_actors = False  # a group's roles changed: every rank of it shows them
    pending = build_pending(data.pending, actors, data.nodes, now)
    pending_actor = {p.id: p for p in pending if p.kind == "actor"}
    stall_memo: dict = {}
    running_roles: list[tuple[str, str | None]] = []
    n = len(actors)
    if same_actors:
        # an idle row stands where its node, processes and last method are the objects of the last build;
        # the rest (and every rank with a call) is looked at below
        old_node_ins, old_lms, old_atts = memo.inputs
        todo = set(compress(range(n), map(operator.is_not, node_ins, old_node_ins)))
        todo.update(compress(range(n), map(operator.ne, lms, old_lms)))
        todo.update(compress(range(n), map(operator.is_not, atts, old_atts)))
        todo.update(compress(range(n), map(operator.is_, memo.quiet, repeat(None))))
        pos = memo.pos
        todo.update(pos[aid] for aid in tasks_by_actor if aid in pos)
        if gpus_moved:  # the actors on a GPU of a node whose GPU figures moved
            if memo.at is None:
                memo.at = {}
                for i, a in enumerate(actors):
                    if a.pid is not None:
                        memo.at.setdefault((a.node_id, a.pid), []).append(i)
            for nid, old_gm, gm in gpus_moved:
                for pid in {*(old_gm or ()), *(gm or ())}:
                    todo.update(memo.at.get((nid, pid), ()))
        idx: Iterable[int] = sorted(todo)
        emitted = list(memo.quiet)  # (sort key, row) in actor order; None: a probe
        quiet = list(memo.quiet)
        kept: dict[str, tuple] | None = dict(rmemo)
    else:
        pos = dict(zip(ids, range(n), strict=True))
        if memo is not None:
            memo.at = None  # (node, pid) → actor indices: worked out when a build needs it
        idx = range(n)
        emitted = [None] * n
        quiet = [None] * n
        kept = {} if memo is not None else None
    for i in idx:
        a = actors[i]
        quiet[i] = None
        if a.class_name.endswith(PROBE_CLASS):
            continue  # verltop's own dump probes (sources/probe.py) are not the job's actors
        ident, gk = idents[a.actor_id]
        roles: tuple[str, ...]
        if ident.base_role == "colocated":
            roles = group_roles.get(gk, ())
        else:
            roles = (ident.base_role,)
        roles_in = roles
        alive = a.state == "ALIVE"
        last = rmemo.get(a.actor_id) if rmemo is not None else None
        sig, lm, att = node_ins[i], lms[i], atts[i]
        node = nodes.get(a.node_id)
        ts = tasks_by_actor.get(a.actor_id, []) if alive else []
        t = (ts[0] if len(ts) == 1 else _pick_task(ts)) if ts else None
        local = a.node_id in data.local_node_ids
        gpu_hit = None
        if alive and a.pid is not None:
            if local:
                gpu_hit = local_gpu_map.get(a.pid)
            if gpu_hit is None:
                gpu_hit = gpus_by_node.get(a.node_id or "", {}).get(a.pid)
        # the same actor object, alive, not on this machine, no restart, on the same node, history, roles and
        # processes as at the last build: its row stands, or moves only its call's age
        same = (last is not None and same_local and last[0] is a and alive and not a.num_restarts and not local
                and last[6][0] is sig and last[6][1] == lm and last[6][2] == roles_in and last[6][3] is att
                and last[6][4] == gpu_hit)
        if same and t is None and last[3][1] is None:
            # idle then and now: most of 10,000 actors, most of the time; no stall rule applies (stalls_for
            # answers ())
            if kept is not None:
                kept[a.actor_id] = last
            emitted[i] = quiet[i] = (last[5], last[4])
            continue
        if same and t is not None and last[3][1] is t and t.start_time_ms:
            # the same call on the same inputs as last time: only its age moved (a running rank's row
            # is built anew for it every build; copied with the one field changed, not worked out)
            method, role, start_s = last[8]
            running_s = max(0.0, now - start_s)
            row = evolve(last[4], task_running_s=running_s)
            entry = (a, last[1], gk, (*last[3][:2], running_s, *last[3][3:]), row, last[5], last[6], last[7],
                     last[8])
            if kept is not None:
                kept[a.actor_id] = entry
            if method:
                running_roles.append((role, method))
            if role not in _NO_STALL_ROLES:
                st = stalls_for(_view(a, gk, method, row, running_s, start_s, last[7]), hist, now, cfg,
                                stall_memo)
                if st:
                    row = evolve(row, stalls=st)
            emitted[i] = (last[5], row)
            continue
        method = R.method_of(t.func_name) if t else None
        role = R.active_role(ident.base_role, roles, method, lm)
        if not roles:
            roles = (role,)
        if method:
            running_roles.append((role, method))
        running_s = None
        start_s = None
        if t and t.start_time_ms:
            start_s = t.start_time_ms / 1000.0
            running_s = max(0.0, now - start_s)

        proc = dash_proc = None
        if alive and a.pid is not None:
            dash_proc = procs_by_node.get(a.node_id or "", {}).get(a.pid)
            proc = data.local_procs.get(a.pid) if local else None
            if proc is None:
                proc = dash_proc
        cpu = proc.cpu_percent if proc else None
        if cpu is None and dash_proc is not None:  # a first local sample measures no CPU yet
            cpu = dash_proc.cpu_percent
        gpu, gpu_mem = gpu_hit if gpu_hit else (None, None)
        gpu_total = gpu.mem_total_bytes if gpu else None
        if att is not None and att.gpu_mem_bytes:
            # its children's GPU memory is the actor's too (a rollout server's engine holds it, not the actor)
            used = {id(g): g for g in (gpu, *att.gpus) if g is not None}
            gpu_mem = (gpu_mem or 0) + att.gpu_mem_bytes
            gpu = gpu or att.gpu
            gpu_total = sum(g.mem_total_bytes or 0 for g in used.values()) or None

        key = (a, t, running_s, node.ip if node else None, node.mem_total_bytes if node else None, proc, cpu,
               gpu, gpu_mem, gpu_total, att, role, roles)
        pre = (sig, lm, roles_in, att, gpu_hit)
        if last is not None and last[3] == key:
            # the same inputs: the same row (and, where they are the same objects too, no new objects to keep)
            entry = last if last[6][0] is sig and last[6][3] is att else (*last[:6], pre, *last[7:])
        else:
            row = _row(a, ident, node, t, method, role, roles, running_s, start_s, proc, cpu, gpu, gpu_mem, gpu_total,
                       att)
            sk = sort_key(row)
            if last is not None and last[5] == sk:
                sk = last[5]  # the same key object: the last build's order may stand (``_sorted``)
            entry = (a, ident, gk, key, row, sk, pre, gpu is not None, (method, role, start_s))
        if kept is not None:
            kept[a.actor_id] = entry
        row, sk = entry[4], entry[5]
        startup = None if alive and not a.num_restarts else startup_stall(
            a, pending_actor.get(a.actor_id), data.pending, now, cfg.pending_after_s, cfg.startup_after_s,
            cfg.restart_window_s)
        if startup is not None and not alive:
            row = evolve(row, stalls=(startup,))
        elif not alive or (role not in _NO_STALL_ROLES and method is not None and running_s is not None):
            # (an alive rank with no call running has no stall: ``stalls_for`` answers () for it)
            st = stalls_for(_view(a, gk, method, row, running_s, start_s, gpu is not None), hist, now, cfg,
                            stall_memo)
            if st or startup is not None:
                row = evolve(row, stalls=(startup, *st) if startup is not None else st)
        elif startup is not None:  # a controller or helper actor in a restart loop
            row = evolve(row, stalls=(startup,))
        emitted[i] = (sk, row)
        if t is None and alive and not a.num_restarts and not local and row is entry[4]:
            quiet[i] = emitted[i]  # idle, unjudged: the next build may take it as it is

    rows: list[tuple[tuple, ActorRow]] = list(filter(None, emitted))  # (sort key, row); probes left out
    if memo is not None and kept is not None:
        memo.rows, memo.actors, memo.local, memo.pos = kept, actors, data.local_node_ids, pos
        memo.idents, memo.group_roles, memo.inputs, memo.quiet = idents, group_roles, (node_ins, lms, atts), quiet
        memo.roles_key = (hist, hist.methods_gen, idents)
    if data.ras is not None:
        from verltop.analysis import ras as RAS  # its model loads with RAS's first answer

        by_actor = RAS.stalls(data.ras, [r for _, r in rows if r.state == "ALIVE"])
        if by_actor:
            rows = [(k, evolve(r, stalls=(by_actor[r.actor_id], *r.stalls))) if r.actor_id in by_actor else (k, r)
                    for k, r in rows]
    ordered = _sorted(rows, memo)
    progress = now - hist.last_finish_s if hist.last_finish_s is not None else None
    merged_nodes = _local_gpus_into_nodes(data)
    return Snapshot(
        taken_at=now,
        address=data.address,
        nodes=merged_nodes,
        actors=tuple(ordered),
        phase=R.step_phase(running_roles),
        sources=data.sources,
        progress_s=progress,
        truncated=data.truncated,
        gpu_note=data.local_gpu_error,
        orphans=P.orphans(trees, data.actors, nodes) if trees else None,
        pending=pending,
    )


def _view(a: RawActor, group: str, method: str | None, row: ActorRow, running_s: float | None,
          start_s: float | None, has_gpu: bool) -> TaskView:
    """What the stall rules need of the actor's running call."""
    return TaskView(a.actor_id, group, method, row.task_id, running_s, start_s, has_gpu, row.gpu_util_percent,
                    a.state, a.death_cause)


def _row(a: RawActor, ident: R.Identity, node: Node | None, t: RawTask | None, method: str | None, role: str,
         roles: tuple[str, ...], running_s: float | None, start_s: float | None, proc: ProcStat | None,
         cpu: float | None, gpu: Gpu | None, gpu_mem: int | None, gpu_total: int | None, att: Any) -> ActorRow:
    # positional, in the fields' order: a keyword call of 33 fields costs 3x (600 new rows a build)
    return ActorRow(
        a.actor_id,  # actor_id
        a.name,  # actor_name
        a.class_name,  # class_name
        a.pid,  # pid
        a.node_id,  # node_id
        node.ip if node else None,  # node_ip
        a.state,  # state
        ident.worker_group,  # worker_group
        ident.rank,  # rank
        ident.world_size,  # world_size
        role,  # role
        roles,  # roles
        method or (t.name if t else None),  # task
        t.task_id if t else None,  # task_id
        running_s,  # task_running_s
        gpu.index if gpu else None,  # gpu_index
        gpu.util_percent if gpu else None,  # gpu_util_percent
        gpu_mem,  # gpu_mem_bytes
        gpu_total,  # gpu_mem_total_bytes
        cpu,  # cpu_percent
        proc.rss_bytes if proc else None,  # rss_bytes
        node.mem_total_bytes if node else None,  # host_mem_total_bytes
        (),  # stalls
        a.death_cause,  # death_cause
        a.job_id,  # job_id
        ident.fr_dump_prefix,  # fr_dump_prefix
        ident.fr_pipe_prefix,  # fr_pipe_prefix
        start_s,  # task_start_s
        ident.ras_addr,  # ras_addr
        att.processes if att else (),  # processes
        att.read_at if att else None,  # processes_read_at
        a.death_text,  # death_text
        a.num_restarts,  # num_restarts
        gpu.power_w if gpu else None,  # gpu_power_w
    )


_ROLE_ORDER = {r: i for i, r in enumerate(("controller", *R._ROLE_PREFERENCE, "rollout_server", "agent_loop",
                                               "reward_loop", "other"))}


def sort_key(r: ActorRow) -> tuple:
    """Controller first, then worker groups, then by rank."""
    return (
        0 if r.role == "controller" else 1 if r.worker_group else 2,
        r.worker_group or "",
        _ROLE_ORDER.get(r.roles[0] if r.roles else r.role, 99),
        r.rank if r.rank is not None else 1 << 30,
        r.actor_name or "",
        r.actor_id,
    )


def _local_gpus_into_nodes(data: ClusterData) -> tuple[Node, ...]:
    """Local NVML is fresher than the dashboard's (seen 55 s stale in a hang): prefer it on local nodes."""
    if not data.local_gpus:
        return data.nodes
    out = []
    for n in data.nodes:
        if n.node_id in data.local_node_ids and (n.gpus or len(data.local_node_ids) == 1):
            n = replace(n, gpus=data.local_gpus)
        out.append(n)
    return tuple(out)
