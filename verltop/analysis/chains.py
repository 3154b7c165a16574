"""Wait chains: who waits on whom, from the driver or the controller down to the process holding it up. Pure.

Edges between dumped processes come from four places:
- Ray's task tree: a running task's ``parent_task_id`` is its submitter's running task, or, for a call made
  from an async (or threaded) actor, that actor's creation task (``ffffffffffffffff`` + actor id), or the
  driver's task (``ffff…`` + job id);
- Ray's object table: a pending reference held by process P (owner pid/ip) to the output of task T
  (``object_id[:48]``) says that P waits on T, whatever P's stack shows (awaiting coroutines are invisible);
- the process tree: an actor whose own stack shows nothing running while its task runs, or a process that
  waits on its children (vLLM's engine core in ``collective_rpc``, ``subprocess.communicate``), waits on
  its non-idle children;
- collectives: a rank in a collective waits on the peers of its group that are not in it.

A chain ends in a process that waits on nothing visible: its own code (stuck or slow), an HTTP call, a dead
process, or a ``ray.get`` on tasks that were not dumped. Each end gets the shortest chain that reaches it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

from verltop.analysis.waiters import Activity, parse_title, thread_activity
from verltop.model import Chain, ChainEnd, ChainLink, EndWhy, RankDump, RawObjectRef, RawTask

CREATION = "ffffffffffffffff"
DRIVER_PREFIX = "f" * 40
MAX_CHAINS = 256


def driver_task_id(job_id: str) -> str:
    """The driver's task id as Ray prints it in ``parent_task_id`` (the driver itself is never listed)."""
    return DRIVER_PREFIX + job_id


class Graph:
    """The wait-for graph over the dumped processes (keys: ``RankDump.key``)."""

    def __init__(self, ranks: list[RankDump], acts: dict[str, Activity]) -> None:
        self.ranks = {r.key: r for r in ranks}
        self.acts = acts
        self.edges: dict[str, dict[str, str | None]] = {}  # src → {dst: the task dst runs for src}
        self.task_of: dict[str, str] = {}  # key → the task (name) it runs for the chain
        self.own: dict[str, str] = {}  # actor id → its own process's key
        self.by_pid: dict[tuple[int, str | None], str] = {}
        self.pids: dict[int, list[str]] = {}
        self.children: dict[tuple[str | None, int], list[str]] = {}
        for r in ranks:
            a = r.actor
            if r.process is None and not r.is_driver:
                self.own[a.actor_id] = r.key
            if a.pid is not None:
                self.by_pid[(a.pid, a.node_ip)] = r.key
                self.pids.setdefault(a.pid, []).append(r.key)
            if r.process is not None and r.parent_pid is not None:
                self.children.setdefault((a.node_ip, r.parent_pid), []).append(r.key)

    def add(self, src: str | None, dst: str | None, label: str | None = None) -> None:
        if src is None or dst is None or src == dst:
            return
        self.edges.setdefault(src, {}).setdefault(dst, label)

    def process(self, pid: int | None, ip: str | None) -> str | None:
        if pid is None:
            return None
        k = self.by_pid.get((pid, ip))
        if k is not None:
            return k
        ks = self.pids.get(pid, [])
        return ks[0] if len(ks) == 1 else None

    def act(self, key: str) -> Activity:
        return self.acts.get(key) or Activity("idle")


def build(ranks: list[RankDump], acts: dict[str, Activity], tasks: Iterable[RawTask] = (),
          refs: Iterable[RawObjectRef] = (), drivers: dict[str, str] | None = None) -> list[Chain]:
    """Chains over ``ranks`` (actors, their children, drivers) whose activities are ``acts`` (by key).
    ``drivers`` maps a driver's task id to its RankDump key."""
    g = Graph(ranks, acts)
    running = {t.task_id: t for t in tasks}
    drivers = drivers or {}

    def proc_of(t: RawTask) -> str | None:
        if t.actor_id and t.actor_id in g.own and t.type != "ACTOR_CREATION_TASK":
            return g.own[t.actor_id]
        return g.process(t.worker_pid, None) if t.worker_pid else None

    def submitter(parent: str | None) -> str | None:
        if not parent:
            return None
        if parent in drivers:
            return drivers[parent]
        if parent in running:
            return proc_of(running[parent])
        if parent.startswith(CREATION):
            return g.own.get(parent[len(CREATION):])
        return None

    # who submitted a task (or holds a reference to its result) WILL wait on it; whose task thread is in its
    # own code does not wait NOW: its chain ends in it
    busy = {k for k, r in g.ranks.items() if in_own_code(r, g.act(k))}

    def add(src: str | None, dst: str | None, label: str) -> None:
        if src not in busy:
            g.add(src, dst, label)

    for t in running.values():
        dst = proc_of(t)
        if dst is None or t.state != "RUNNING":
            continue
        g.task_of.setdefault(dst, t.name)
        add(submitter(t.parent_task_id), dst, t.name)
    for ref in refs:
        t = running.get(ref.task_id)
        if t is not None and t.state == "RUNNING":
            add(g.process(ref.owner_pid, ref.owner_ip), proc_of(t), t.name)
    _process_edges(g)
    _collective_edges(g)
    return _walk(g)


def in_own_code(r: RankDump, a: Activity) -> bool:
    """An actor whose task thread runs code of its own (not a wait): it waits on nothing it submitted. (A
    driver has no task thread: its ``ray.get`` may be on any thread, so its edges stay.)"""
    return (a.kind == "busy" and r.main is not None and a.thread in (None, r.main.name) and r.process is None
            and not r.is_driver)


def _process_edges(g: Graph) -> None:
    """A process waits on its non-idle children when it waits on children (engine core, subprocess), or when
    it is an actor whose task runs while its own stack shows nothing (an async actor awaiting its engine)."""
    for key, r in g.ranks.items():
        a = g.act(key)
        if r.actor.pid is None:
            continue
        kids = [k for k in g.children.get((r.actor.node_ip, r.actor.pid), []) if g.act(k).kind != "idle"
                and g.ranks[k].actor.state == "ALIVE"]
        waits_on_kids = a.kind == "children" or (r.process is None and bool(r.actor.task)
                                                 and (a.kind == "idle" or _awaits_beside_a_thread(r, a)))
        if not waits_on_kids or not kids:
            continue
        for k in kids:  # peers waiting in a collective lead on to the one at work (collective edges)
            g.add(key, k, g.ranks[k].process)


def _awaits_beside_a_thread(r: RankDump, a: Activity) -> bool:
    """An async actor awaiting (its task thread idle: the coroutines are invisible) while a thread of its own
    runs beside it, not one the task handed work to (an executor's: then the task waits on that work): a
    reader of its engine's pipe, a monitor. What it awaits is its children's, as when no thread runs."""
    if a.kind != "busy" or r.main is None or a.thread in (None, r.main.name) or thread_activity(r.main).kind != "idle":
        return False
    t = next((t for t in r.samples[-1].threads if t.name == a.thread), None) if r.samples else None
    return t is not None and not any(_EXECUTOR.search(f.file) for f in t.frames)


_EXECUTOR = re.compile(r"(^|/)concurrent/futures/thread\.py$")


def _peer_groups(g: Graph) -> dict[tuple, list[str]]:
    """Worker groups (actors' own processes) and TP groups (the Worker_TP*/scheduler children of one parent)."""
    out: dict[tuple, list[str]] = {}
    for key, r in g.ranks.items():
        if r.is_driver:
            continue
        if r.process is None:
            if r.actor.worker_group and r.actor.role != "controller":
                out.setdefault(("wg", r.actor.worker_group), []).append(key)
            continue
        t = parse_title(r.process)
        if t.kind in ("vllm_worker", "sglang_scheduler"):
            out.setdefault(("tp", r.actor.node_ip, r.parent_pid, t.tag("DP")), []).append(key)
    return out


def _collective_edges(g: Graph) -> None:
    for members in _peer_groups(g).values():
        in_coll = [k for k in members if g.act(k).kind == "collective"]
        if not in_coll:
            continue
        inside = set(in_coll)
        outside = [k for k in members if k not in inside and (g.act(k).kind not in ("idle",)
                                                                or g.ranks[k].actor.state != "ALIVE")]
        for src in in_coll:
            for dst in outside:
                g.add(src, dst, g.task_of.get(dst) or g.ranks[dst].process)


def _walk(g: Graph) -> list[Chain]:
    incoming = {d for dsts in g.edges.values() for d in dsts}
    roots = [k for k in g.edges if k not in incoming]
    # the driver first, then the controller: chains read from the top of the job
    roots.sort(key=lambda k: (not g.ranks[k].is_driver, g.ranks[k].actor.role != "controller", k))
    prev: dict[str, str | None] = {}
    q: deque[str] = deque()
    for r in roots:
        prev[r] = None
        q.append(r)
    while q:
        k = q.popleft()
        for d in sorted(g.edges.get(k, {})):
            if d not in prev:
                prev[d] = k
                q.append(d)
    ends = [k for k in prev if not g.edges.get(k) and prev[k] is not None]
    chains = []
    for end in ends:
        path = [end]
        while (p := prev[path[-1]]) is not None:
            path.append(p)
        path.reverse()
        chains.append(Chain(tuple(_link(g, k, path[i - 1] if i else None) for i, k in enumerate(path)),
                            _end(g, end)))
    chains.sort(key=lambda c: (_end_rank(c.ends_in), -len(c.path), c.ends_in.pid or 0))
    return chains[:MAX_CHAINS]


def _link(g: Graph, key: str, src: str | None) -> ChainLink:
    r = g.ranks[key]
    a = r.actor
    label = g.edges.get(src, {}).get(key) if src is not None else None
    task = label if label and r.process is None else (r.process if r.process is not None else
                                                      g.task_of.get(key) or a.task)
    return ChainLink(None if r.is_driver else a.actor_id, a.actor_name or a.class_name, task, a.pid)


def _end(g: Graph, key: str) -> ChainEnd:
    r = g.ranks[key]
    a = g.act(key)
    return ChainEnd(r.actor.pid, r.process, a.frame, end_why(r, a))


# an Activity's kind → the EndWhy kind of a chain that ends in it (any other: idle)
END_KINDS = {"busy": "own_code", "http": "http", "children": "children", "ipc": "zmq", "ray_wait": "not_dumped",
             "collective": "peers"}


def end_why(r: RankDump, a: Activity) -> EndWhy:
    """Why the chain stops at this process (``verltop.text.chains.end_text`` says it)."""
    if r.actor.state in ("DEAD", "RESTARTING") or (r.error is not None and r.error.kind == "dead"):
        return EndWhy("dead", state=r.actor.state, death=r.death)
    if r.main is None and r.error is not None:
        return EndWhy("unreadable", error=r.error.text)
    kind = END_KINDS.get(a.kind, "idle")
    if kind == "idle":
        return EndWhy(kind)
    return EndWhy(kind, frame=a.frame, what=a.what, stuck=r.stuck)


def _end_rank(e: ChainEnd) -> int:
    """Dead ends and code that did not move first, then HTTP calls, then the rest."""
    w = e.why
    if w.kind == "said":  # a sentence an older verltop recorded
        t = w.text or ""
        return 0 if "did not move" in t or t.startswith(("DEAD", "RESTARTING")) else 1 if "HTTP" in t else 2
    if w.kind == "dead" or (w.stuck and w.kind in STILL_SAID):
        return 0
    return 1 if w.kind == "http" else 2


# the ends whose sentence says whether the stack moved
STILL_SAID = ("own_code", "http", "zmq")


def group_chains(chains: Iterable[Chain]) -> list[tuple[Chain, int]]:
    """Chains that differ only in which peer of a group they pass through, once each with a count (a healthy
    step of 64 ranks computing is 64 ends of one shape)."""
    seen: dict[tuple, list[Chain]] = {}
    for c in chains:
        shape = (tuple((lk.actor_name if lk.actor_id is None else _strip_rank(lk.actor_name), lk.task)
                       for lk in c.path[:-1]), c.ends_in.frame, c.ends_in.process, c.ends_in.why)
        seen.setdefault(shape, []).append(c)
    return [(cs[0], len(cs)) for cs in seen.values()]


def _strip_rank(name: str | None) -> str | None:
    return name.rsplit(":", 1)[0] if name and ":" in name else name


__all__ = ["build", "driver_task_id", "end_why", "group_chains"]
