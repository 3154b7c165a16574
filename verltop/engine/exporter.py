"""``verltop watch --metrics-port``: what verltop works out, as Prometheus metrics (``prometheus_client``'s
text format, read-only). A custom collector reads the latest snapshot, so a scrape costs one pass over it
and never a dashboard request; the families of one snapshot are built once and reused until the next.

Only verl-level meaning: stalls, suspects, deaths, steps, phases, skew, anomalies, slow ranks, verl's own
training metrics, the rollout engines' load and each rank's memory headroom and growth by phase. Nothing Ray
or DCGM already export (GPU use, node memory, Ray's task and actor counts), and no label that grows without
bound (pids, task ids, free text): worker groups, roles, ranks, phases, kinds, metric names and actor names
are the only label values.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from verltop.analysis.incidents import death_is_failure
from verltop.model import PHASES, Snapshot

_BAD = re.compile(r"[^a-zA-Z0-9_]+")


# Prometheus names carry base units (promtool's lint refuses abbreviated units and multiples of a base unit):
# a word of verl's key that is a unit becomes the base unit, and the value is scaled (verl's GB are GiB)
_UNITS = {"s": ("seconds", 1.0), "sec": ("seconds", 1.0), "ms": ("seconds", 1e-3), "us": ("seconds", 1e-6),
          "ns": ("seconds", 1e-9), "m": ("seconds", 60.0), "h": ("seconds", 3600.0), "d": ("seconds", 86400.0),
          "b": ("bytes", 1.0), "kb": ("bytes", 2.0 ** 10), "mb": ("bytes", 2.0 ** 20), "gb": ("bytes", 2.0 ** 30),
          "tb": ("bytes", 2.0 ** 40), "pb": ("bytes", 2.0 ** 50)}
_COUNTER_ONLY = ("_total", "_count", "_sum", "_bucket")  # suffixes a gauge may not end in


def training_metric(key: str) -> tuple[str, float]:
    """verl's metric key as a Prometheus name and the factor to its base unit: ``actor/entropy`` →
    ``verltop_training_actor_entropy``, ``timing_s/gen`` → ``verltop_training_timing_seconds_gen``,
    ``perf/max_memory_allocated_gb`` → ``verltop_training_perf_max_memory_allocated_bytes`` (× 2³⁰)."""
    scale = 1.0
    words = []
    for w in _BAD.sub("_", key).strip("_").lower().split("_"):
        if w in _UNITS:
            w, f = _UNITS[w]
            scale *= f
        if w:
            words.append(w)
    name = "verltop_training_" + ("_".join(words) or "unnamed")
    return (name + "_value" if name.endswith(_COUNTER_ONLY) else name), scale


def training_name(key: str) -> str:
    """The Prometheus name of verl's metric ``key`` (``training_metric``)."""
    return training_metric(key)[0]


class Exporter(Collector):
    """verltop's view as metrics. ``snapshot`` gives the latest snapshot (the engine's); ``suspects`` the
    suspects of the incident under way (a watch), if any. Incidents are counted as the watch opens them
    (``incident``); anomalies as new ones appear in the snapshots (``observe``)."""

    def __init__(self, snapshot: Callable[[], Snapshot | None], suspects: Callable[[], int] = lambda: 0,
                 clock: Callable[[], float] = time.time) -> None:
        self._snapshot = snapshot
        self._suspects = suspects
        self._clock = clock
        self.incidents: Counter[str] = Counter()
        self.anomalies: Counter[tuple[str, str]] = Counter()
        self._seen: set[tuple[int, str, str]] = set()
        self._cached: tuple[Snapshot, list[Metric]] | None = None  # the snapshot itself: ids are reused

    # ---------------------------------------------------------- events

    def incident(self, kind: str) -> None:
        """A new incident of ``kind`` (hang, death, ...)."""
        self.incidents[kind] += 1

    def observe(self, snap: Snapshot) -> None:
        """Count the anomalies not seen before (each step, metric and kind once)."""
        now = {(a.step, a.metric, a.kind) for a in (snap.training.anomalies if snap.training is not None else ())}
        for key in now - self._seen:
            self._seen.add(key)
            self.anomalies[(key[2], key[1])] += 1
        if len(self._seen) > 4 * len(now) + 1000:  # bounded over weeks: only what the window holds can come back
            self._seen &= now

    # ---------------------------------------------------------- Collector

    def describe(self) -> list[Metric]:
        return []  # collect() is cheap but needs a snapshot: never run it at registration

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        up = GaugeMetricFamily("verltop_up", "1 while verltop has a snapshot of the cluster")
        up.add_metric([], 1.0 if snap is not None else 0.0)
        yield up
        if snap is not None:
            if self._cached is None or self._cached[0] is not snap:
                self._cached = (snap, list(snapshot_metrics(snap)))
            yield from self._cached[1]
            age = GaugeMetricFamily("verltop_snapshot_age_seconds", "seconds since the latest snapshot was built")
            age.add_metric([], max(0.0, self._clock() - snap.taken_at))
            yield age
        s = GaugeMetricFamily("verltop_suspects", "processes the incident under way names as suspects "
                              "(from its stack capture; 0 without one)")
        s.add_metric([], float(self._suspects()))
        yield s
        inc = CounterMetricFamily("verltop_incidents", "incidents opened since verltop started, by kind",
                                  labels=["kind"])
        for kind, n in sorted(self.incidents.items()):
            inc.add_metric([kind], float(n))
        yield inc
        an = CounterMetricFamily("verltop_anomalies", "anomalies found in verl's training metrics since verltop "
                                 "started, by kind and metric", labels=["kind", "metric"])
        for (kind, metric), n in sorted(self.anomalies.items()):
            an.add_metric([kind, metric], float(n))
        yield an


def snapshot_metrics(snap: Snapshot) -> Iterator[Metric]:
    """The families one snapshot makes (pure: the snapshot in, metrics out)."""
    actors_src = next((s for s in snap.sources if s.name == "actors"), None)
    dash = GaugeMetricFamily("verltop_dashboard_up", "1 when the Ray dashboard answered verltop's last actor read")
    dash.add_metric([], 1.0 if actors_src is not None and actors_src.error is None and not actors_src.stale_at()
                    else 0.0)
    yield dash

    stalled: Counter[tuple[str, str]] = Counter()
    dead: Counter[str] = Counter({"failed": 0, "restarting": 0, "ended": 0})
    for a in snap.actors:  # one pass, attributes read directly: it runs on every new snapshot
        if a.worker_group is None and a.role == "other":  # not the job's (job_actor)
            continue
        key = (a.worker_group or a.role, a.role)  # group_of
        stalled[key] += 1 if a.stalls else 0
        if a.state == "RESTARTING":
            dead["restarting"] += 1
        elif a.state == "DEAD":
            dead["failed" if death_is_failure(a) else "ended"] += 1
    g = GaugeMetricFamily("verltop_stalled_actors", "actors of the job whose task looks stuck (verltop's stall "
                          "rules), per worker group and role", labels=["worker_group", "role"])
    for (group, role), n in sorted(stalled.items()):
        g.add_metric([group, role], float(n))
    yield g
    d = GaugeMetricFamily("verltop_dead_actors", "dead actors of the job: failed (crash, OOM, lost node), "
                          "restarting, ended (the job ended them)", labels=["kind"])
    for kind, n in sorted(dead.items()):
        d.add_metric([kind], float(n))
    yield d
    pg = GaugeMetricFamily("verltop_pending_placement_groups", "placement groups Ray has not placed yet")
    pg.add_metric([], float(sum(1 for p in snap.pending if p.kind == "placement_group")))
    yield pg

    yield from _step_metrics(snap)
    yield from _training_metrics(snap)
    yield from _slow_rank_metrics(snap)
    yield from _rollout_metrics(snap)
    yield from _memory_metrics(snap)


def _who(worker_group: str | None, role: str | None, rank: int | None, actor_name: str | None,
         actor_id: str) -> list[str]:
    """Bounded labels of a rank: its worker group (an actor with none: its name), role and rank ("" if none)."""
    return [worker_group or actor_name or actor_id, role or "", "" if rank is None else str(rank)]


def _memory_metrics(snap: Snapshot) -> Iterator[Metric]:
    mem = snap.memory
    labels = ["worker_group", "role", "rank", "kind"]
    peak = GaugeMetricFamily("verltop_memory_peak_bytes", "a rank's memory (its child processes' included) at "
                             "its tightest sample of the last steps, GPU or host", labels=labels)
    limit = GaugeMetricFamily("verltop_memory_limit_bytes", "the limit that would kill the rank then: the GPU's "
                              "total less other processes, or the node's memory at Ray's kill threshold (the "
                              "container's where lower) less other processes", labels=labels)
    left = GaugeMetricFamily("verltop_memory_steps_to_limit", "steps until the rank reaches its limit at the "
                             "growth of its growing phases (only while one grows)", labels=labels)
    grow = GaugeMetricFamily("verltop_memory_growth_bytes_per_step", "memory a phase keeps step after step on "
                             "a rank (a leak), past warm-up, only where consistent and material",
                             labels=[*labels, "phase"])
    for h in mem.headroom if mem is not None else ():
        who = [*_who(h.worker_group, h.role, h.rank, h.actor_name, h.actor_id), h.kind]
        if h.peak_bytes is not None:
            peak.add_metric(who, float(h.peak_bytes))
        if h.limit_bytes is not None:
            limit.add_metric(who, float(h.limit_bytes))
        if h.steps_to_limit is not None:
            left.add_metric(who, float(h.steps_to_limit))
    for g in mem.growth if mem is not None else ():
        grow.add_metric([*_who(g.worker_group, g.role, g.rank, g.actor_name, g.actor_id), g.kind, g.phase],
                        float(g.bytes_per_step))
    yield peak
    yield limit
    yield left
    yield grow


def _step_metrics(snap: Snapshot) -> Iterator[Metric]:
    last = snap.training.last_step if snap.training is not None else None
    done = [s for s in snap.steps if not s.running]
    if last is None and snap.steps:
        last = snap.steps[-1].index
    step = GaugeMetricFamily("verltop_step", "the training step: verl's own when its metrics are read, else the "
                             "step timeline's count")
    if last is not None:
        step.add_metric([], float(last))
    yield step
    dur = GaugeMetricFamily("verltop_step_duration_seconds", "the last complete step's duration")
    ph = GaugeMetricFamily("verltop_phase_duration_seconds", "seconds each phase took in the last complete step",
                           labels=["phase"])
    sk = GaugeMetricFamily("verltop_phase_skew_seconds", "in the last complete step, how long after the first "
                           "rank the last one ended each phase", labels=["phase"])
    if done:
        s = done[-1]
        if s.duration_s is not None:
            dur.add_metric([], s.duration_s)
        for phase, v in sorted(s.phases, key=lambda kv: PHASES.index(kv[0]) if kv[0] in PHASES else 99):
            ph.add_metric([phase], v)
        for phase, v in s.skew_s:
            sk.add_metric([phase], v)
    yield dur
    yield ph
    yield sk


def _training_metrics(snap: Snapshot) -> Iterator[Metric]:
    metrics = snap.training.metrics if snap.training is not None else {}
    names: set[str] = set()
    for key in sorted(metrics):
        series = metrics[key]
        if not series or series[-1][1] is None:
            continue
        name, scale = training_metric(key)
        if name in names:
            continue  # two keys that sanitise alike: the first (sorted) keeps the name
        names.add(name)
        m = GaugeMetricFamily(name, f"verl's {key} at the last step it was logged" +
                              (f" (× {scale:g} to base units)" if scale != 1.0 else ""))
        m.add_metric([], float(series[-1][1]) * scale)
        yield m


def _slow_rank_metrics(snap: Snapshot) -> Iterator[Metric]:
    m = GaugeMetricFamily("verltop_slow_rank_lag_seconds", "a worker that ends a phase last in most recent steps: "
                          "its median lag behind the one before it", labels=["actor_name", "phase"])
    seen: set[tuple[str, str]] = set()
    for r in snap.slow_ranks:
        key = (r.actor_name or r.actor_id or "?", r.phase)
        if key not in seen:
            seen.add(key)
            m.add_metric(list(key), r.lag_s)
    yield m


def _rollout_metrics(snap: Snapshot) -> Iterator[Metric]:
    specs: list[tuple[str, str, str]] = [
        ("verltop_rollout_running_requests", "running", "requests the rollout server's engine runs now"),
        ("verltop_rollout_waiting_requests", "waiting", "requests waiting in the rollout server's engine queue"),
        ("verltop_rollout_kv_cache_usage_ratio", "kv_cache_usage", "the rollout server's KV-cache use (0 to 1)"),
        ("verltop_rollout_generation_tokens_per_second", "gen_tokens_per_s",
         "tokens the rollout server generated per second between verltop's last two reads"),
    ]
    loads = [r for r in snap.rollout if r.read_at is not None]
    for name, field, doc in specs:
        m = GaugeMetricFamily(name, doc, labels=["actor_name"])
        for r in loads:
            v = getattr(r, field)
            if v is not None and math.isfinite(v):
                m.add_metric([r.actor_name or r.actor_id], float(v))
        yield m
    p = CounterMetricFamily("verltop_rollout_preemptions", "preemptions the rollout server's engine reports "
                            "(vLLM's num_preemptions, SGLang's retracted requests)", labels=["actor_name"])
    for r in loads:
        if r.preemptions_total is not None:
            p.add_metric([r.actor_name or r.actor_id], float(r.preemptions_total))
    yield p


def registry(exporter: Exporter) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exporter)
    return reg


def exposition(reg: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The body and content type of one scrape (OpenMetrics when the scraper asks for it)."""
    from prometheus_client.exposition import choose_encoder

    encoder, ctype = choose_encoder(accept)
    return encoder(reg), ctype


async def serve(reg: CollectorRegistry, host: str, port: int) -> Any:
    """``GET /metrics`` on ``host:port`` (aiohttp, in the running loop); other paths answer 404. Returns the
    runner (``await runner.cleanup()`` to stop). OSError when the address cannot be bound."""
    from aiohttp import web

    async def metrics(request: web.Request) -> web.Response:
        body, ctype = exposition(reg, request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": ctype})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
