"""``verltop watch``'s memory incidents, beside the hangs:

- kind ``oom``, AT ONCE when a snapshot brings a new OOM verdict (a call that failed with CUDA's OOM, a rank that
  died of one, Ray's memory monitor's kill, a SIGKILL near the limit: ``analysis.oom``): no stall rule to wait
  for, a failed call is news. The rank, its phase and step, GPU or host, the error's line and the lead-up;
  its peers still in a call are named as waiting for it, not as suspects;
- kind ``memory``, when a rank's forecast says it has ``memory_steps`` steps or fewer before its limit, or less
  than ``MEMORY_FREE`` of it left (``analysis.memory_reads.low_headroom``, as the main screen marks it); one per
  rank until it has been clear for ``clear_after_s``.

Each is a directory beside the others: ``summary.txt``, ``incident.json`` and ``recording.vtr``; the telling is a
hang's (stdout, the watch log, ``--on-incident``, ``--webhook``). No stacks are taken here: a hang that follows
(its peers stuck in their collective) opens a hang incident of its own, whose dump names the OOM.

``incident.json``: ``{"kind": "oom" | "memory", "id", "detected_at", "closed_at", "summary", "oom": null |
{memory.oom[] of snapshot --json}, "headroom": null | {memory.headroom[]}, "suspects": [{"worker_group",
"rank", "actor_name", "pid", "reason"}], "waiting": [{"worker_group", "rank", "actor_name", "task"}],
"memory": {memory of snapshot --json} | null, "recording"}``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verltop.analysis.memory_reads import low_headroom
from verltop.engine import recording_format as rf
from verltop.engine.incident import incident_dir, make_dir, write_atomic, write_with_recording
from verltop.model import ActorRow, Snapshot
from verltop.model.memory import Headroom, MemoryView, OomVerdict
from verltop.text.contract import headroom_json, memory_json, oom_json
from verltop.text.oom import headroom_summary, verdict_line, verdict_reason, waiting_text, who

log = logging.getLogger("verltop.watch")

MEMORY_STEPS = 10  # a forecast of this many steps or fewer before the limit opens a ``memory`` incident
MEMORY_FREE = 0.05  # ... and so does less than this share of the limit left
OLD_S = 60.0  # a call that failed this long before the watch began is old news


@dataclass(slots=True)
class MemoryIncident:
    """One ``oom`` or ``memory`` incident on disk (the attributes the watcher's telling reads)."""

    id: str
    dir: Path
    kind: str  # "oom" | "memory"
    detected_at: float
    summary: str
    oom: OomVerdict | None = None
    headroom: Headroom | None = None
    waiting: list[ActorRow] = field(default_factory=list)
    memory: dict[str, Any] | None = None
    closed_at: float | None = None
    recording_bytes: int | None = None
    groups: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        v = self.oom
        suspects = [] if v is None else [{"worker_group": v.worker_group, "rank": v.rank,
                                          "actor_name": v.actor_name, "pid": v.pid, "reason": verdict_reason(v)}]
        return {"kind": self.kind, "id": self.id, "detected_at": self.detected_at, "closed_at": self.closed_at,
                "summary": self.summary, "oom": oom_json(v) if v is not None else None,
                "headroom": headroom_json(self.headroom) if self.headroom is not None else None,
                "suspects": suspects,
                "waiting": [{"worker_group": a.worker_group, "rank": a.rank, "actor_name": a.actor_name,
                             "task": a.task} for a in self.waiting],
                "memory": self.memory,
                "recording": "recording.vtr" if self.recording_bytes is not None else None}

    def write(self) -> None:
        make_dir(self.dir)
        write_atomic(self.dir / "summary.txt", self.summary + "\n")
        write_atomic(self.dir / "incident.json", json.dumps(self.to_json(), indent=1) + "\n")

    def meta(self) -> dict[str, Any]:
        return {"incident": {"id": self.id, "kind": self.kind, "started_at": self.detected_at,
                             "detected_at": self.detected_at, "groups": list(self.groups)}}


def oom_key(v: OomVerdict) -> tuple:
    """One OOM: a rank's failed call (its time), or its death."""
    return (v.actor_id, v.how, v.method, round(v.at, 1) if v.how == "task_error" else None)


def waiting_peers(v: OomVerdict, actors: tuple[ActorRow, ...]) -> list[ActorRow]:
    """Its peers (same worker group) still in a call: they wait for it in their collective."""
    if v.worker_group is None:
        return []
    return [a for a in actors if a.worker_group == v.worker_group and a.actor_id != v.actor_id
            and a.state == "ALIVE" and a.task]


class MemoryIncidents:
    """The watcher's ``oom`` and ``memory`` incidents."""

    def __init__(self, watcher: Any, memory_steps: float = MEMORY_STEPS, memory_free: float = MEMORY_FREE) -> None:
        """``watcher``: the ``engine.watch.Watcher`` (its settings, recorder, task spawning and telling)."""
        self.w = watcher
        self.memory_steps = memory_steps
        self.memory_free = memory_free
        self.seen: set[tuple] = set()  # OOMs told
        # old news (as a hang's deaths before the watch looked): ranks dead at its first snapshot, calls that
        # failed more than OLD_S before it
        self.started: float | None = None
        self.dead_at_start: set[str] = set()
        self.low: dict[str, MemoryIncident | None] = {}  # open ``memory`` incidents by actor id (None: opening)
        self.clear_since: dict[str, float] = {}

    def update(self, snap: Snapshot) -> None:
        if self.started is None:
            self.started = snap.taken_at
            self.dead_at_start = {a.actor_id for a in snap.actors if a.state in ("DEAD", "RESTARTING")}
        m = snap.memory
        if m is None:
            return
        for v in m.oom:
            k = oom_key(v)
            if k in self.seen:
                continue
            self.seen.add(k)
            if self.old_news(v):
                log.info("not an incident: %s (before the watch began)", verdict_line(v))
                continue
            self.w._spawn(self._open_oom(v, snap))
        self._headroom(snap)

    def old_news(self, v: OomVerdict) -> bool:
        """An OOM from before the watch began: a rank already dead at its first snapshot, a call that failed
        more than ``OLD_S`` before it."""
        assert self.started is not None
        if v.how == "task_error":
            return v.at < self.started - OLD_S
        return v.actor_id in self.dead_at_start

    def low_headroom(self, h: Headroom) -> bool:
        """A forecast of ``memory_steps`` steps or fewer, or less than ``memory_free`` of the limit left."""
        return bool(low_headroom(MemoryView(headroom=(h,)), self.memory_steps, self.memory_free))

    def _headroom(self, snap: Snapshot) -> None:
        now = snap.taken_at
        low = low_headroom(snap.memory, self.memory_steps, self.memory_free)  # the tightest kind of each rank
        for k, h in low.items():
            self.clear_since.pop(k, None)
            if k not in self.low:
                self.low[k] = None  # opening
                self.w._spawn(self._open_low(k, h, snap))
        for k in [k for k in self.low if k not in low]:
            since = self.clear_since.setdefault(k, now)
            if now - since >= self.w.cfg.clear_after_s:
                inc = self.low.pop(k)
                self.clear_since.pop(k, None)
                if inc is not None:
                    self.w._spawn(self._close(inc, now))

    async def _open_oom(self, v: OomVerdict, snap: Snapshot) -> None:
        waiting = waiting_peers(v, snap.actors)
        summary = verdict_line(v)
        if waiting:
            summary += f" {waiting_text(v, waiting)}"
        d = incident_dir(self.w.cfg.dir, snap.taken_at, f"oom-{who(v)}")
        inc = MemoryIncident(d.name, d, "oom", snap.taken_at, summary, oom=v, waiting=waiting,
                             memory=memory_json(snap.memory) if snap.memory else None,
                             groups=[v.worker_group] if v.worker_group else [])
        await self._write(inc)
        self._record(inc, "opened")
        self.w.incidents.append(inc.id)
        self.w._notify(inc)  # type: ignore[arg-type]  # the same attributes as a hang's Incident

    async def _open_low(self, k: str, h: Headroom, snap: Snapshot) -> None:
        growth = next((g for g in snap.memory.growth if g.actor_id == h.actor_id and g.kind == h.kind), None) \
            if snap.memory is not None else None
        summary = headroom_summary(h, growth, self.memory_steps, self.memory_free)
        name = f"memory-{h.worker_group}_{h.rank}" if h.rank is not None else f"memory-{h.actor_name or 'actor'}"
        d = incident_dir(self.w.cfg.dir, snap.taken_at, name)
        inc = MemoryIncident(d.name, d, "memory", snap.taken_at, summary, headroom=h,
                             memory=memory_json(snap.memory) if snap.memory else None,
                             groups=[h.worker_group] if h.worker_group else [])
        self.low[k] = inc
        await self._write(inc)
        self._record(inc, "opened")
        self.w.incidents.append(inc.id)
        self.w._notify(inc)  # type: ignore[arg-type]

    async def _close(self, inc: MemoryIncident, at: float) -> None:
        inc.closed_at = at
        await self._write(inc)
        self._record(inc, "closed")
        self.w.say(f"incident {inc.id} over (memory headroom back above the line)")

    async def _write(self, inc: MemoryIncident) -> None:
        t0 = inc.detected_at - self.w.cfg.before_s
        t1 = min(time.time(), (inc.closed_at or inc.detected_at) + 5)
        await write_with_recording(inc, self.w.recorder, self.w.cfg.dir, t0, t1)

    def _record(self, inc: MemoryIncident, stage: str) -> None:
        if self.w.recorder is not None:
            self.w.recorder.event(inc.detected_at, rf.INCIDENT, {
                "id": inc.id, "kind": inc.kind, "stage": stage, "started_at": inc.detected_at,
                "detected_at": inc.detected_at, "closed_at": inc.closed_at, "groups": list(inc.groups),
                "summary": inc.summary, "dir": str(inc.dir)})
