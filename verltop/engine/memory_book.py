"""The engine's memory book: fed from every read of processes (this machine's sample every second, another
node's dashboard report as it comes, every 5 s), read when a snapshot is built. Book-keeping happens in the
event loop and the view in the snapshot thread: a lock keeps them apart (both are short)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

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
)
from verltop.analysis.memory_view import MemorySettings, memory_view
from verltop.model import ActorRow, MemoryView, Node, ProcTree, RawActor, RawTask, RolloutLoad, Step
from verltop.sources.hostmem import memory_threshold
from verltop.sources.local import LocalSample

VERL_PEAK_KEYS = ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb")


class MemoryWatch:
    def __init__(self, settings: MemorySettings | None = None, threshold: float | None = None) -> None:
        self.book = MemoryBook()
        self.settings = settings or MemorySettings()
        self.threshold = memory_threshold() if threshold is None else threshold
        self._lock = threading.Lock()
        self._calls: tuple[int, int, Calls] | None = None  # (id of the tasks list, its length, its calls)
        self._idle_since: float | None = None  # no worker-group call ran since then ("other")
        self._tree: tuple[int, dict[int, int], dict[int, int]] | None = None  # (id of tree, root_of, kids' RSS)
        self.last_feed_ms = 0.0
        self._base: dict[str, tuple[RawActor, str]] = {}  # actor id -> (the row it was worked out of, base role)

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
        if c is None or c[0] != id(tasks) or c[1] != len(tasks):
            c = self._calls = (id(tasks), len(tasks), running_calls(tasks, actors, at, self.base_of))
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
        if t is None or t[0] != id(tree):
            root_of = root_map(tree)
            t = self._tree = (id(tree), root_of, kids_rss(tree, root_of))
        return t[1], t[2]

    def feed_local(self, s: LocalSample, actors: Iterable[RawActor], tasks: list[RawTask] | None,
                   all_actors: Mapping[str, RawActor], host: tuple[int, int, str] | None = None) -> int:
        """This machine's sample: ``actors`` are the live actors here."""
        import time

        t0 = time.perf_counter()
        calls = self.calls(tasks, all_actors, s.taken_at)
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
             verl_peaks: tuple[tuple[str, float], ...] = ()) -> MemoryView:
        rows = list(rows)
        with self._lock:
            kept = steps[-self.settings.keep_steps:]
            if kept:
                self.book.drop_before(kept[0].started_at - 60.0)
            self.book.retain(r.actor_id for r in rows)
            return memory_view(self.book, steps, rows, {x.actor_id: x for x in rollout}, self.settings, verl_peaks)


def verl_peaks(metrics: Mapping[str, tuple[tuple[int, float | None], ...]], last_step: int | None
               ) -> tuple[tuple[str, float], ...]:
    """verl's own ``*/perf/max_memory_*`` (and ``cpu_memory_used_gb``) at its last step."""
    out = []
    for k, series in metrics.items():
        if k.endswith(VERL_PEAK_KEYS) and series and series[-1][0] == last_step and series[-1][1] is not None:
            out.append((k, float(series[-1][1])))
    return tuple(sorted(out))
