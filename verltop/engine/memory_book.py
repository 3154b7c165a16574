"""The engine's memory book: fed from every read of processes (this machine's sample every second, another
node's dashboard report as it comes, every 5 s), read when a snapshot is built. Book-keeping happens in the
event loop and the view in the snapshot thread: a lock keeps them apart (both are short)."""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from verltop.analysis import roles as R
from verltop.analysis.memory import MemoryBook
from verltop.analysis.memory_samples import (
    Calls,
    HostLimit,
    gpu_table,
    kids_rss,
    root_map,
    running_calls,
    samples_of,
    title_phase,
)
from verltop.analysis.memory_view import AMBIENT_ROLES, MemorySettings, actor_entries, memory_view
from verltop.model import (
    PHASES,
    ActorRow,
    MemoryView,
    Node,
    PhaseMemory,
    ProcTree,
    RawActor,
    RawTask,
    RolloutLoad,
    Step,
)
from verltop.sources.hostmem import memory_threshold
from verltop.sources.local import LocalSample

_ID = operator.attrgetter("actor_id")

VERL_PEAK_KEYS = ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb")
VIEW_CPU_SHARE = 0.02  # a costly view is worked out again once its CPU time is this share of the time since
VIEW_COSTLY_S = 0.02  # a view that took less CPU than this is worked out at every snapshot
# a costly view stands at least this long: what it is worked out of comes every 5 s from each node's agent
# (REPORTER_UPDATE_INTERVAL_MS), minutes apart from the nodes off screen
VIEW_COSTLY_EVERY_S = 5.0


class MemoryWatch:
    def __init__(self, settings: MemorySettings | None = None, threshold: float | None = None,
                 view_share: float = VIEW_CPU_SHARE, costly_s: float = VIEW_COSTLY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.book = MemoryBook()
        self.clock = clock  # when views were worked out (a test's own clock: never the process's)
        self.view_share, self.costly_s = view_share, costly_s
        self._last_view: tuple[MemoryView, float, float] | None = None  # (the view, when, its CPU time)
        self.settings = settings or MemorySettings()
        self.threshold = memory_threshold() if threshold is None else threshold
        self._lock = threading.Lock()
        self._calls: tuple[list[RawTask], int, Calls] | None = None  # (the tasks list, its length, its calls)
        self._idle_since: float | None = None  # no worker-group call ran since then ("other")
        self._tree: tuple[ProcTree, dict[int, int], dict[int, int]] | None = None  # (the tree, root_of, kids' RSS)
        self.last_feed_ms = 0.0
        self._base: dict[str, tuple[RawActor, str]] = {}  # actor id -> (the row it was worked out of, base role)
        # this machine's ranks: the call each one's title names (method, episode key, first seen)
        self._title_ep: dict[str, tuple[str, str, float]] = {}
        self._titles: dict[str, tuple[str | None, str | None]] = {}
        self._seq = 0

    def base_of(self, a: RawActor) -> str:
        hit = self._base.get(a.actor_id)
        if hit is not None and hit[0] is a:
            return hit[1]
        if len(self._base) > 65536:
            self._base.clear()
        base = R.identity(a).base_role
        self._base[a.actor_id] = (a, base)
        return base

    def calls(self, tasks: list[RawTask] | None, actors: Mapping[str, RawActor], at: float) -> Calls:
        """The running calls' phases (computed once per tasks list: tasks are polled every 2 s, processes
        every 1 s)."""
        tasks = tasks or []
        c = self._calls
        # the list itself is kept (not its id: a new list of the same length often gets a freed one's address,
        # and the calls of a phase ago would be booked under the next one)
        if c is None or c[0] is not tasks or c[1] != len(tasks):
            c = self._calls = (tasks, len(tasks), running_calls(tasks, actors, at, self.base_of))
        return c[2]

    def _ambient(self, calls: Calls, at: float) -> tuple[str, float]:
        if calls.phase is not None and calls.phase_start is not None:
            self._idle_since = None
            return calls.phase, calls.phase_start
        if self._idle_since is None:
            self._idle_since = at
        return "other", self._idle_since

    def _tree_maps(self, tree: ProcTree | None) -> tuple[dict[int, int], dict[int, int]]:
        t = self._tree
        if tree is None:
            return {}, {}
        if t is None or t[0] is not tree:  # the tree itself, not its id (a freed one's may be reused)
            root_of = root_map(tree)
            t = self._tree = (tree, root_of, kids_rss(tree, root_of))
        return t[1], t[2]

    def feed_local(self, s: LocalSample, actors: Iterable[RawActor], tasks: list[RawTask] | None,
                   all_actors: Mapping[str, RawActor], host: tuple[int, int, str] | None = None) -> int:
        """This machine's sample: ``actors`` are the live actors here."""
        t0 = time.perf_counter()
        actors = list(actors)
        calls = self.calls(tasks, all_actors, s.taken_at)
        if s.titles is not None:
            calls = self._by_titles(s.titles, actors, calls, s.taken_at)
        ambient = self._ambient(calls, s.taken_at)
        root_of, kid_rss = self._tree_maps(s.tree)
        table = gpu_table(s.gpus, root_of)
        hl = HostLimit(host[0], host[1], self.threshold, host[2]) if host is not None else None
        base_of = self.base_of
        who = [(a.actor_id, a.pid, base_of(a)) for a in actors if a.pid]
        samples = samples_of(who, calls, ambient, s.procs, kid_rss, table, hl)
        with self._lock:
            n = self.book.add(s.taken_at, samples)
        self.last_feed_ms = (time.perf_counter() - t0) * 1000
        return n

    def _by_titles(self, titles: Mapping[int, str], actors: list[RawActor], calls: Calls, at: float) -> Calls:
        """The calls of this machine's ranks as their titles name them now: a call that began since the last
        tasks poll is booked from its first second, and one that ended is no longer booked under its phase."""
        own = dict(calls.own)
        started: dict[str, float] = {}
        seen: set[str] = set()
        for a in actors:
            t = titles.get(a.pid or -1)
            if t is None:
                continue
            base = self.base_of(a)
            if base in AMBIENT_ROLES:
                continue
            hit = self._titles.get(t)
            if hit is None:
                if len(self._titles) > 4096:
                    self._titles.clear()
                hit = self._titles[t] = title_phase(t)
            method, phase = hit
            aid = a.actor_id
            if method is None or phase is None:
                own.pop(aid, None)  # between calls, or in one of no phase (init_model)
                continue
            seen.add(aid)
            prev = self._title_ep.get(aid)
            if prev is None or prev[0] != method:
                self._seq += 1
                prev = self._title_ep[aid] = (method, f"@{self._seq}", at)
            task = calls.own.get(aid)
            start = task[3] if task is not None and task[1] == phase and task[3] <= prev[2] + 1.0 else prev[2]
            own[aid] = (prev[1], phase, R.split_role(method)[0] or base, start)
            if phase not in started or start < started[phase]:
                started[phase] = start
        for aid in [k for k in self._title_ep if k not in seen]:
            del self._title_ep[aid]
        if not started:
            return Calls(own, calls.phase, calls.phase_start)
        phase = max(started, key=PHASES.index)
        return Calls(own, phase, started[phase])

    def feed_node(self, node: Node, at: float, actors: Iterable[RawActor], tasks: list[RawTask] | None,
                  all_actors: Mapping[str, RawActor], tree: ProcTree | None = None) -> int:
        """Another node's report (``/nodes/{id}``: its workers' RSS and its GPUs' processes), taken by its agent
        at ``at``; ``tree``: its process tree where a probe read it (the actors' children)."""
        calls = self.calls(tasks, all_actors, at)
        ambient = self._ambient(calls, at)
        root_of, kid_rss = (root_map(tree), {}) if tree is not None else ({}, {})
        if tree is not None:
            kid_rss = kids_rss(tree, root_of)
        table = gpu_table(node.gpus, root_of)
        hl = None
        if node.mem_total_bytes and node.mem_used_bytes is not None:
            hl = HostLimit(node.mem_total_bytes, node.mem_used_bytes, self.threshold)
        procs = {p.pid: p for p in node.procs}
        base_of = self.base_of
        who = [(a.actor_id, a.pid, base_of(a)) for a in actors if a.pid]
        samples = samples_of(who, calls, ambient, procs, kid_rss, table, hl)
        with self._lock:
            return self.book.add(at, samples)

    def view(self, steps: tuple[Step, ...], rows: Iterable[ActorRow], rollout: Iterable[RolloutLoad] = (),
             verl_peaks: tuple[tuple[str, float], ...] = (), phases: bool = True) -> MemoryView:
        """The memory view as booked now (``by_phase`` only with ``phases``). On a job where a view is costly
        (``costly_s`` of CPU: thousands of actors) the last one stands until its cost is ``view_share`` of the
        time since, and at least ``VIEW_COSTLY_EVERY_S``: at 10,000 actors a view took ~90 ms, a third of the
        refresh, for figures that come every 5 s from each node (minutes apart for the helpers' nodes). Samples
        are booked as they come either way; a view without ``by_phase`` never stands for one asked with it."""
        last = self._last_view
        if (last is not None and last[2] >= self.costly_s
                and self.clock() - last[1] < max(last[2] / self.view_share, VIEW_COSTLY_EVERY_S)
                and not (phases and last[0].by_phase_skipped)):
            return last[0]
        rows = list(rows)
        c0 = time.thread_time()
        with self._lock:
            kept = steps[-self.settings.keep_steps:]
            if kept:
                self.book.drop_before(kept[0].started_at - 60.0)
            self.book.retain(map(_ID, rows))
            v = memory_view(self.book, steps, rows, {x.actor_id: x for x in rollout}, self.settings, verl_peaks,
                            phases)
        self._last_view = (v, self.clock(), time.thread_time() - c0)
        return v


    def lead_up(self, steps: tuple[Step, ...], row: ActorRow, phase: str | None = None) -> tuple[PhaseMemory, ...]:
        """The rank's memory in ``phase`` (every phase: None) over the last steps, the running one included, as
        booked now (an OOM verdict's lead-up)."""
        with self._lock:
            return actor_entries(self.book, steps, row, phase, self.settings)


def verl_peaks(metrics: Mapping[str, tuple[tuple[int, float | None], ...]], last_step: int | None
               ) -> tuple[tuple[str, float], ...]:
    """verl's own ``*/perf/max_memory_*`` (and ``cpu_memory_used_gb``) at its last step."""
    out = []
    for k, series in metrics.items():
        if k.endswith(VERL_PEAK_KEYS) and series and series[-1][0] == last_step and series[-1][1] is not None:
            out.append((k, float(series[-1][1])))
    return tuple(sorted(out))
