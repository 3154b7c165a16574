"""A one-shot ``snapshot`` has no history of its own; a running ``verltop watch`` has: its recording. This
reads the watch's latest recorded snapshot from its directory and lends the one-shot snapshot the figures
that need history — ``memory`` (by phase, growth, headroom, OOM verdicts) and each actor's memory peaks and
growth — or says why it cannot (``note``)."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, replace
from pathlib import Path

from verltop.model import Snapshot

RECENT_S = 900.0  # segments last written this long ago are not read (a watch writes its segment every poll)
STALE_S = 120.0  # a latest frame older than this: the watch has stopped, or lost the dashboard
_ACTOR_HISTORY = ("gpu_mem_peak_bytes", "rss_peak_bytes", "gpu_mem_growth_bytes_per_min", "rss_growth_bytes_per_min")


@dataclass(frozen=True, slots=True)
class Borrowed:
    snapshot: Snapshot
    note: str | None  # why memory is missing, or where it came from when it is old


def watch_running(d: Path) -> bool:
    """Does a ``verltop watch`` hold ``d/watch.lock`` now? (It holds an exclusive flock while it runs.)"""
    try:
        fd = os.open(d / "watch.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def latest_recorded(d: Path, now: float) -> tuple[Snapshot | None, str | None, str | None]:
    """``(snapshot, recorded address, problem)``: the newest snapshot of the watch's recording in ``d``."""
    # only when a watch runs: a plain `snapshot` does not pay the recording reader's import
    from verltop.engine.recording_format import RecordingError
    from verltop.engine.recording_reader import Recording

    try:
        rec = Recording.open(d, since=now - RECENT_S)
    except (RecordingError, OSError) as e:
        return None, None, str(e)
    try:
        if not rec.snaps:
            return None, None, f"{d}: the watch has recorded no snapshot yet"
        snap = rec.cursor().goto(len(rec.snaps) - 1)
        if snap is None:
            return None, None, f"{d}: its latest snapshot cannot be read ({'; '.join(rec.damage[:1]) or 'damaged'})"
        return snap, rec.meta.get("address"), None
    finally:
        rec.close()


def borrow(snap: Snapshot, d: Path | None, explicit: bool, now: float) -> Borrowed:
    """``snap`` with the watch's history-needing figures, when a watch's recording in ``d`` is fresh and of
    the same dashboard; else ``snap`` unchanged (its ``memory`` None) and the reason."""
    if d is None:
        return Borrowed(snap, "memory needs history: a one-shot snapshot has none (run `verltop watch`, then "
                        "`snapshot --watch-dir DIR`)")
    if not explicit and not watch_running(d):
        return Borrowed(snap, f"memory needs history: no `verltop watch` runs in {d} (start one there, or pass "
                        "--watch-dir DIR of a running watch)")
    rec, address, problem = latest_recorded(d, now)
    if rec is None:
        return Borrowed(snap, f"memory needs history: {problem}")
    if address and snap.address and address.rstrip("/") != snap.address.rstrip("/"):
        return Borrowed(snap, f"memory needs history: the watch in {d} watches {address}, not {snap.address}")
    age = now - rec.taken_at
    if age > STALE_S:
        return Borrowed(snap, f"memory needs history: the watch's latest snapshot in {d} is {age:.0f} s old (is it "
                        "still running?)")
    mine = {a.actor_id: a for a in rec.actors}
    actors = []
    for a in snap.actors:
        r = mine.get(a.actor_id)
        if r is not None:
            kw = {f: getattr(r, f) for f in _ACTOR_HISTORY if getattr(a, f) is None and getattr(r, f) is not None}
            a = replace(a, **kw) if kw else a
        actors.append(a)
    note = None if rec.memory is None else rec.memory.note
    if rec.memory is None:
        note = f"memory: the watch in {d} has none yet (it fills in as the job runs its steps)"
    out = replace(snap, memory=rec.memory, actors=tuple(actors),
                  slow_ranks=snap.slow_ranks or rec.slow_ranks)
    return Borrowed(out, note)
