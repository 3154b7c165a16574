"""``verltop watch``'s training incidents: kind ``anomaly`` (a metric's anomaly, from verl's logged metrics)
and kind ``slow`` (a worker ending a phase last, step after step), one per episode
(``analysis.episodes``). Each gets a directory beside the hang incidents: ``summary.txt``, ``incident.json``
and ``recording.vtr`` (the recording around it), and the same telling as a hang (stdout, the watch log,
``--on-incident``, ``--webhook``). No stacks are taken: nothing is stuck.

``incident.json``: ``{"kind": "anomaly" | "slow", "id", "detected_at", "closed_at", "summary", "anomaly":
null | {"step", "metric", "kind", "value", "baseline", "detail"}, "slow_rank": null | {slow_ranks[] of snapshot
--json}, "count", "recording"}``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verltop.analysis.episodes import Episode, EpisodeTracker
from verltop.engine import recording_format as rf
from verltop.engine.incident import incident_dir, make_dir, write_atomic, write_with_recording
from verltop.model import Snapshot, TrainingView
from verltop.text.contract import slow_rank_json, training_json
from verltop.text.training import episode_summary

log = logging.getLogger("verltop.watch")


@dataclass(slots=True)
class TrainingIncident:
    """One anomaly or slow episode on disk (the attributes the watcher's telling reads)."""

    id: str
    dir: Path
    detected_at: float
    episode: Episode
    summary: str
    closed_at: float | None = None
    recording_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        ep = self.episode
        anomaly = None
        if ep.anomaly is not None:
            anomaly = training_json(TrainingView("", None, None, {}, (ep.anomaly,)))["anomalies"][0]
        return {"kind": ep.kind, "id": self.id, "detected_at": self.detected_at, "closed_at": self.closed_at,
                "summary": self.summary, "anomaly": anomaly,
                "slow_rank": slow_rank_json(ep.slow) if ep.slow is not None else None, "count": ep.count,
                "recording": "recording.vtr" if self.recording_bytes is not None else None}

    def write(self) -> None:
        make_dir(self.dir)
        write_atomic(self.dir / "summary.txt", self.summary + "\n")
        write_atomic(self.dir / "incident.json", json.dumps(self.to_json(), indent=1) + "\n")

    def meta(self) -> dict[str, Any]:
        return {"incident": {"id": self.id, "kind": self.episode.kind, "started_at": self.detected_at,
                             "detected_at": self.detected_at, "groups": []}}


class TrainingIncidents:
    """The watcher's anomaly and slow incidents."""

    def __init__(self, watcher: Any) -> None:
        """``watcher``: the ``engine.watch.Watcher`` (its settings, recorder, task spawning and telling)."""
        self.w = watcher
        self.tracker = EpisodeTracker(clear_after_s=watcher.cfg.clear_after_s)
        self.open: dict[tuple, TrainingIncident] = {}

    def update(self, snap: Snapshot) -> None:
        opened, closed = self.tracker.update(snap)
        for ep in opened:
            self.w._spawn(self._open(ep, snap))
        for ep in closed:
            self.w._spawn(self._close(ep, snap.taken_at))

    async def _open(self, ep: Episode, snap: Snapshot) -> None:
        t = snap.training
        where = None
        if t is not None:
            where = {"actor_log": f"{t.actor_name or 'the trainer'}'s log", "job_log": "the driver's log",
                     "file": "the file logger's JSONL"}.get(t.source)
        name = (f"anomaly-{ep.anomaly.metric}" if ep.anomaly is not None else
                f"slow-{ep.slow.actor_name or ep.slow.phase}" if ep.slow is not None else ep.kind)
        d = incident_dir(self.w.cfg.dir, snap.taken_at, name)
        inc = TrainingIncident(d.name, d, snap.taken_at, ep, episode_summary(ep.kind, ep.anomaly, ep.slow, where))
        self.open[ep.key] = inc
        await self._write(inc)
        self._record(inc, "opened")
        self.w.incidents.append(inc.id)
        self.w._notify(inc)  # type: ignore[arg-type]  # the same attributes as a hang's Incident

    async def _close(self, ep: Episode, at: float) -> None:
        inc = self.open.pop(ep.key, None)
        if inc is None:
            return
        inc.closed_at = at
        await self._write(inc)
        self._record(inc, "closed")
        self.w.say(f"incident {inc.id} over ({ep.kind}, {ep.count} time{'s' if ep.count != 1 else ''})")

    async def _write(self, inc: TrainingIncident) -> None:
        t0 = inc.detected_at - self.w.cfg.before_s
        t1 = min(time.time(), (inc.closed_at or inc.detected_at) + 5)
        await write_with_recording(inc, self.w.recorder, self.w.cfg.dir, t0, t1)

    def _record(self, inc: TrainingIncident, stage: str) -> None:
        if self.w.recorder is not None:
            self.w.recorder.event(inc.detected_at, rf.INCIDENT, {
                "id": inc.id, "kind": inc.episode.kind, "stage": stage, "started_at": inc.detected_at,
                "detected_at": inc.detected_at, "closed_at": inc.closed_at, "groups": [], "summary": inc.summary,
                "dir": str(inc.dir)})
