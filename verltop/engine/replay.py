"""The engine of ``verltop replay``: plays a recording through the ``Engine`` interface, so the screens
that show a live cluster show the recording the same way. Its clock is the recorded time: ages, the
progress clock and stale-data warnings read as they did when the snapshot was taken.

Time controls: pause, step one snapshot, speed (×1/8 … ×256), seek, next incident. Recorded dumps and
incidents are events of the recording; a view asks for the dump nearest to where it stands.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verltop.codec import from_data
from verltop.engine import recording_format as rf
from verltop.engine.base import Engine, Playback
from verltop.engine.dumps import DumpJob, ProgressFn
from verltop.engine.recording_format import FrameRef, RecordingError
from verltop.engine.recording_reader import Recording
from verltop.model import DumpReport, Problem, Snapshot
from verltop.sources.aio import cancel_all
from verltop.sources.pyspy import DumpOptions

SPEEDS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
TICK_S = 0.1  # how often the player looks at its clock
MIN_PUBLISH_S = 0.2  # at high speed, show at most this often (the frames between are still applied)
GAP_S = 60.0  # recorded time without snapshots that playback skips over
LEAD_S = 15.0  # `next incident` starts this long before the hang began
NO_LOGS = Problem("replay", "a recording holds no logs", "the worker's logs are on the cluster (ray logs)")


@dataclass(frozen=True, slots=True)
class RecordedIncident:
    id: str
    started_at: float | None
    detected_at: float
    groups: tuple[str, ...]
    summary: str

    @property
    def begins_s(self) -> float:
        return self.started_at if self.started_at is not None else self.detected_at


@dataclass(frozen=True, slots=True)
class RecordedDump:
    t: float
    group: str | None
    incident: str | None
    report: DumpReport


class ReplayEngine(Engine):
    live = False

    def __init__(self, rec: Recording, start_at: float | None = None, speed: float = 1.0, paused: bool = False,
                 name: str = "") -> None:
        super().__init__(self._now)
        self.rec = rec
        self.name = name or Path(rec.files[0]).name
        self.address = str(rec.meta.get("address") or "")
        self.cur = rec.cursor()
        self.start_s = rec.start_s or 0.0
        self.end_s = rec.end_s or self.start_s
        self.speed = speed
        self.playing = not paused
        self._pos = self._clamp(start_at if start_at is not None else self.start_s)
        self._anchor = time.monotonic()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._last_publish = 0.0
        self._dumps = rec.events_of(rf.DUMP)
        self._dump_cache: dict[int, RecordedDump] = {}
        self.incidents = self._load_incidents()
        self.statuses = self._load_statuses()
        self.skipped_s = 0.0

    # ---------------------------------------------------------- loading

    def _events(self, sub: int) -> list[tuple[FrameRef, dict[str, Any]]]:
        out = []
        for ref in self.rec.events_of(sub):
            try:
                d = self.rec.payload(ref)
            except RecordingError as e:
                self.rec.damage.append(str(e))
                continue
            if isinstance(d, dict):
                out.append((ref, d))
        return out

    def _load_incidents(self) -> list[RecordedIncident]:
        seen: dict[str, RecordedIncident] = {}
        for ref, d in self._events(rf.INCIDENT):
            iid = str(d.get("id") or ref.t)
            if iid in seen and d.get("stage") != "opened":
                continue  # an incident's later updates keep its first facts
            seen[iid] = RecordedIncident(iid, d.get("started_at"), float(d.get("detected_at") or ref.t),
                                         tuple(d.get("groups") or ()), str(d.get("summary") or ""))
        return sorted(seen.values(), key=lambda i: i.begins_s)

    def _load_statuses(self) -> list[tuple[float, Problem | None]]:
        return [(ref.t, from_data(Problem, d.get("problem"))) for ref, d in self._events(rf.STATUS)]

    # ---------------------------------------------------------- the clock

    def _clamp(self, t: float) -> float:
        return min(max(t, self.start_s), self.end_s)

    def _now(self) -> float:
        if not self.playing:
            return self._pos
        return self._clamp(self._pos + (time.monotonic() - self._anchor) * self.speed)

    def _set(self, t: float) -> None:
        self._pos = self._clamp(t)
        self._anchor = time.monotonic()

    def playback(self) -> Playback:
        now = self._now()
        return Playback(now, self.start_s, self.end_s, self.speed, not self.playing, now >= self.end_s, self.name)

    # ---------------------------------------------------------- Engine

    def start(self) -> None:
        self._anchor = time.monotonic()
        self._show(force=True)
        self._task = asyncio.create_task(self._play(), name="verltop-replay")

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await cancel_all((self._task,))
            self._task = None
        self.rec.close()

    @property
    def has_data(self) -> bool:
        return self.latest is not None

    def connection_problem(self) -> Problem | None:
        """What the dashboard said when the recording has no snapshot yet at this time."""
        if self.latest is not None:
            return None
        now = self._now()
        last = None
        for t, p in self.statuses:
            if t > now:
                break
            last = p
        return last or Problem("replay", "no snapshot recorded yet at this time")

    def dump(self, snap: Snapshot, scope: str | None, opts: DumpOptions,
             on_progress: ProgressFn | None = None) -> DumpJob:
        """A recording cannot take new stacks: a job with nothing to dump (views check ``live`` first)."""
        return DumpJob(None, frozenset(), [], opts, on_progress)

    async def log_tail(self, actor_id: str, stream: str = "err", lines: int = 200) -> tuple[str | None, Problem | None]:
        return None, NO_LOGS

    # ---------------------------------------------------------- playing

    async def _play(self) -> None:
        while not self._stopping:
            if self.playing:
                self._skip_gap()
                if self._now() >= self.end_s:
                    self._set(self.end_s)
                    self.playing = False
            self._show()
            self._wake.clear()
            # not asyncio.wait_for: before Python 3.12 it can swallow a cancel that lands as the event fires
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({waiter}, timeout=TICK_S if self.playing else 1.0)
            finally:
                waiter.cancel()

    def _skip_gap(self) -> None:
        """Hours without snapshots (verltop was not running) pass in an instant."""
        now = self._now()
        i = bisect.bisect_right(self.rec.times, now)
        if i < len(self.rec.times) and self.rec.times[i] - now > GAP_S:
            self.skipped_s += self.rec.times[i] - now
            self._set(self.rec.times[i])

    def _show(self, force: bool = False) -> None:
        """Publish the snapshot at the clock's time, if it is not the one shown (at most every
        ``MIN_PUBLISH_S`` while playing fast)."""
        if not self.rec.snaps:
            return
        i = self.rec.index_at(self._now())
        if self.rec.times[i] > self._now() and not force:
            return  # before the first snapshot
        if i == self.cur.i and self.latest is not None and not force:
            return
        if not force and self.playing and time.monotonic() - self._last_publish < MIN_PUBLISH_S:
            return
        snap = self.cur.goto(i)
        if snap is not None:
            self._last_publish = time.monotonic()
            self._publish(snap)

    def _changed(self) -> None:
        self._show(force=True)
        self._wake.set()

    # ---------------------------------------------------------- controls

    def toggle_pause(self) -> bool:
        """Pause or play; True when playing now."""
        self._set(self._now())
        self.playing = not self.playing
        if self.playing and self._pos >= self.end_s:
            self._set(self.start_s)  # play again from the start
        self._changed()
        return self.playing

    def step(self, n: int) -> Snapshot | None:
        """Pause and move ``n`` snapshots (back when negative)."""
        if not self.rec.snaps:
            return None
        self.playing = False
        base = self.cur.i if self.cur.i >= 0 else self.rec.index_at(self._now())
        i = max(0, min(len(self.rec.snaps) - 1, base + n))
        self._set(self.rec.times[i])
        self._changed()
        return self.latest

    def faster(self, up: bool = True) -> float:
        """Double or halve the speed (within ``SPEEDS``)."""
        self._set(self._now())
        if up:
            self.speed = next((x for x in SPEEDS if x > self.speed), SPEEDS[-1])
        else:
            self.speed = next((x for x in reversed(SPEEDS) if x < self.speed), SPEEDS[0])
        self._wake.set()
        return self.speed

    def seek(self, t: float) -> None:
        self._set(t)
        self._changed()

    def next_incident(self) -> RecordedIncident | None:
        """Jump to shortly before the next incident began (from the start again after the last)."""
        if not self.incidents:
            return None
        now = self._now()
        nxt = next((i for i in self.incidents if i.begins_s - LEAD_S > now + 1.0), self.incidents[0])
        self.seek(nxt.begins_s - LEAD_S)
        return nxt

    def incident_at(self, t: float | None = None) -> RecordedIncident | None:
        """The incident under way at ``t`` (its hang began and the next one has not)."""
        t = self._now() if t is None else t
        cur = None
        for i in self.incidents:
            if i.begins_s <= t:
                cur = i
        return cur

    # ---------------------------------------------------------- recorded dumps

    def dumps(self) -> list[float]:
        """When each recorded dump was taken."""
        return [r.t for r in self._dumps]

    def recorded_dump(self, scope: str | None = None, t: float | None = None) -> RecordedDump | None:
        """The recorded dump to show at ``t``: the last one taken by then (of ``scope`` when there is one),
        else the first one after."""
        if not self._dumps:
            return None
        t = self._now() if t is None else t
        order = sorted(range(len(self._dumps)), key=lambda k: (self._dumps[k].t > t, abs(self._dumps[k].t - t)))
        best = None
        for k in order:
            d = self._dump(k)
            if d is None:
                continue
            if scope is None or d.group in (scope, None):
                return d
            best = best or d
        return best

    def _dump(self, k: int) -> RecordedDump | None:
        if k in self._dump_cache:
            return self._dump_cache[k]
        ref = self._dumps[k]
        try:
            d = self.rec.payload(ref)
            out = RecordedDump(ref.t, d.get("group"), d.get("incident"), from_data(DumpReport, d["report"]))
        except (RecordingError, KeyError, ValueError, TypeError) as e:
            self.rec.damage.append(f"the dump recorded at {ref.t:.0f} cannot be read: {e}")
            return None
        if len(self._dump_cache) > 8:
            self._dump_cache.pop(next(iter(self._dump_cache)))
        self._dump_cache[k] = out
        return out
