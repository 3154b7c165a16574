"""Memory samples for the book (``analysis.memory``) from one read of a node's processes. Pure.

Each live actor whose call of a verl phase runs gets a sample under that call; an actor with no phase of its
own (the controller, a rollout server, an agent loop) gets one under the job's phase running then ("other"
while no worker-group call runs). Bytes are the actor's process and its descendants' (a rollout server's
engine cores, TP workers): GPU memory from the per-process GPU lists (NVML here, the dashboard's
``processesPids`` elsewhere), RSS from psutil or the dashboard's worker list plus the process tree where it was
read. The GPU limit is the total of the GPUs it holds memory on less what every other process holds there; the
host limit is the node's memory at Ray's memory-monitor threshold less what everything else uses."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from verltop.analysis import roles as R
from verltop.analysis.memory import MemSample
from verltop.analysis.memory_view import AMBIENT_ROLES
from verltop.model import PHASES, Gpu, ProcStat, ProcTree, RawActor, RawTask


@dataclass(frozen=True, slots=True)
class Calls:
    """The running calls that give samples their phase: each rank's own (actor id -> (task id, phase, role,
    start)), and the job's phase with its start (the latest phase in step order that a worker group runs)."""

    own: dict[str, tuple[str, str, str | None, float]] = field(default_factory=dict)
    phase: str | None = None
    phase_start: float | None = None


def running_calls(tasks: Iterable[RawTask], actors: Mapping[str, RawActor], at: float,
                  base_of: Callable[[RawActor], str] | None = None) -> Calls:
    """The phase of every running call of a verl worker (``at`` stands in for a start Ray did not give);
    ``base_of``: an actor's base role (``roles.identity``'s, cached by the caller)."""
    base_of = base_of or (lambda a: R.identity(a).base_role)
    own: dict[str, tuple[str, str, str | None, float]] = {}
    starts: dict[str, float] = {}
    methods: dict[str, tuple[str | None, str | None, str | None]] = {}
    for t in tasks:
        a = actors.get(t.actor_id or "")
        if a is None:
            continue
        base = base_of(a)
        if base in AMBIENT_ROLES:
            continue
        m = methods.get(t.func_name)
        if m is None:
            method = R.method_of(t.func_name) or t.name
            m = methods[t.func_name] = (method, R.phase_of_method(method), R.split_role(method)[0])
        phase = m[1]
        if phase is None:
            continue
        start = t.start_time_ms / 1000.0 if t.start_time_ms else at
        cur = own.get(a.actor_id)
        if cur is None or start < cur[3]:
            own[a.actor_id] = (t.task_id, phase, m[2] or base, start)
        if phase not in starts or start < starts[phase]:
            starts[phase] = start
    if not starts:
        return Calls(own)
    phase = max(starts, key=PHASES.index)
    return Calls(own, phase, starts[phase])


def root_map(tree: ProcTree | None) -> dict[int, int]:
    """Each descendant pid -> its root (the actor's process)."""
    if tree is None:
        return {}
    roots = set(tree.roots)
    out: dict[int, int] = {}
    for p in tree.procs:
        pp = p.ppid
        if pp in roots:
            out[p.pid] = pp
        elif pp in out:
            out[p.pid] = out[pp]
    return out


def kids_rss(tree: ProcTree | None, root_of: Mapping[int, int]) -> dict[int, int]:
    """Root pid -> its descendants' RSS."""
    out: dict[int, int] = {}
    if tree is None:
        return out
    for p in tree.procs:
        r = root_of.get(p.pid)
        if r is not None and p.rss_bytes:
            out[r] = out.get(r, 0) + p.rss_bytes
    return out


@dataclass(slots=True)
class GpuTable:
    """Root pid -> {gpu index: its (and its descendants') memory}, and every GPU's total and what its
    processes hold."""

    mine: dict[int, dict[int, int]]
    total: dict[int, int]
    used: dict[int, int]

    def limit(self, held: dict[int, int]) -> int | None:
        try:
            return sum(self.total[i] - (self.used[i] - m) for i, m in held.items())
        except KeyError:
            return None


def gpu_table(gpus: Iterable[Gpu] | None, root_of: Mapping[int, int]) -> GpuTable:
    mine: dict[int, dict[int, int]] = {}
    total: dict[int, int] = {}
    used: dict[int, int] = {}
    for g in gpus or ():
        if g.mem_total_bytes:
            total[g.index] = g.mem_total_bytes
        u = 0
        for pid, mem, _ in g.processes:
            if mem is None:
                continue
            u += mem
            root = root_of.get(pid, pid)
            d = mine.get(root)
            if d is None:
                d = mine[root] = {}
            d[g.index] = d.get(g.index, 0) + mem
        used[g.index] = u
    return GpuTable(mine, total, used)


@dataclass(frozen=True, slots=True)
class HostLimit:
    """A node's memory as Ray's memory monitor sees it: ``total`` (the container's limit where lower),
    ``used``, and the kill threshold (``RAY_memory_usage_threshold``)."""

    total: int
    used: int
    threshold: float = 0.95
    source: str = "ray_memory_threshold"  # or "cgroup": the container's limit is the total

    def left_for(self, mine: int) -> int:
        return int(self.total * self.threshold) - (self.used - mine)


def samples_of(actors: Iterable[tuple[str, int, str]], calls: Calls, ambient: tuple[str, float] | None,
               procs: Mapping[int, ProcStat], kid_rss: Mapping[int, int], table: GpuTable,
               host: HostLimit | None) -> list[MemSample]:
    """One sample per actor ``(actor id, pid, base role)`` that is in a phase; ``ambient``: the job's phase
    and its start for actors with no phase of their own (None: nothing to book them under)."""
    own = calls.own
    amb_key = f"~{ambient[0]}@{ambient[1]:.3f}" if ambient is not None else None
    mine_of = table.mine
    total, used = table.total, table.used
    h_cap = int(host.total * host.threshold) - host.used if host is not None else None
    h_src = host.source if host is not None else None
    out: list[MemSample] = []
    append = out.append
    for aid, pid, base in actors:
        call = own.get(aid)
        if call is not None:
            key, phase, role, start = call
        elif ambient is not None and base in AMBIENT_ROLES:
            key, phase, role, start = amb_key, ambient[0], base, ambient[1]  # type: ignore[assignment]
        else:
            continue
        p = procs.get(pid)
        r = p.rss_bytes if p is not None else None
        if r is not None and kid_rss:
            r += kid_rss.get(pid, 0)
        held = mine_of.get(pid)
        g = glim = None
        if held:
            if len(held) == 1:
                (i, g), = held.items()
                t = total.get(i)
                glim = None if t is None else t - used[i] + g
            else:
                g = sum(held.values())
                glim = table.limit(held)
        append((aid, key, phase, role, start, g, r, glim, None if h_cap is None or r is None else h_cap + r, h_src))
    return out
