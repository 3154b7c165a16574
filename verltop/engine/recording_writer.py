"""Writing recordings (``verltop --record FILE``, ``verltop watch``): ``RecordingWriter`` appends snapshots
(keyframes and deltas), dumps, incidents and dashboard outages to one file or to rotating segment files in a
directory; ``Recorder`` feeds it what an engine publishes, off the event loop.

One thread owns the ``RecordingWriter``; the loop only puts immutable objects on a queue. A full queue (a
disk slower than the polls) drops snapshots, counted; events are never dropped. Encoding a 1,000-actor
snapshot takes ~15 ms and a keyframe ~200 ms on a busy 2-core machine: none of it on the UI's loop.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verltop.codec import to_data
from verltop.engine import recording_format as rf
from verltop.engine.base import Engine
from verltop.engine.frames import DeltaEncoder
from verltop.engine.recording_format import SUFFIX
from verltop.model import DumpReport, Problem, Snapshot
from verltop.text.cells import utc_stamp

log = logging.getLogger("verltop.recorder")

_STOP = object()


@dataclass(frozen=True, slots=True)
class Limits:
    """How a recording is cut and bounded. ``keep_s``/``max_bytes`` apply to segmented recordings."""

    keyframe_s: float = 120.0  # a whole snapshot at least this often (seeking decodes at most this much)
    segment_s: float = 3600.0
    segment_bytes: int = 64 << 20
    keep_s: float | None = None  # segments whose last write is older are deleted
    max_bytes: int | None = None  # oldest segments are deleted while all of them weigh more
    fsync_s: float = 30.0  # against power loss; a killed writer loses at most the frame being written


def base_meta(source: str, address: str, **extra: Any) -> dict[str, Any]:
    """What a recording says about itself (the caller adds ``"verltop"``: its version)."""
    return {"source": source, "address": address, "host": socket.gethostname(), "started_at": time.time(), **extra}


class RecordingWriter:
    """Appends snapshots and events. One thread writes (the engine's ``Recorder``)."""

    def __init__(self, path: str | Path, meta: dict[str, Any], limits: Limits | None = None,
                 segmented: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.meta = meta
        self.limits = limits or Limits()
        self.segmented = segmented
        self.clock = clock
        self.file: rf.FrameFile | None = None
        self.enc = DeltaEncoder()
        self._last_key = float("-inf")
        self._last_sync = time.monotonic()
        self.bytes_written = 0
        self.frames_written = 0
        self.keyframes_written = 0
        self.deleted: list[str] = []  # segments pruned (the caller logs them)
        if segmented:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        elif self.path.exists():
            raise FileExistsError(f"{self.path} exists")

    def _open(self, t: float) -> rf.FrameFile:
        if self.file is not None:
            lim = self.limits
            if not self.segmented or (t - self.file.first_t < lim.segment_s and self.file.size < lim.segment_bytes):
                return self.file
            self.file.close()
            self.file = None
        if self.segmented:
            stamp = utc_stamp(t)
            p, n = self.path / f"rec-{stamp}{SUFFIX}", 1
            while p.exists():
                n += 1
                p = self.path / f"rec-{stamp}-{n}{SUFFIX}"
        else:
            p = self.path
        self.file = rf.FrameFile(str(p), self.meta, t)
        self.enc.reset()  # a file never depends on another: it starts with a keyframe
        if self.segmented:
            self.prune()
        return self.file

    def snapshot(self, s: Snapshot) -> int:
        """Write one snapshot (a keyframe every ``keyframe_s``, else a delta). Returns the bytes written."""
        f = self._open(s.taken_at)
        key = s.taken_at - self._last_key >= self.limits.keyframe_s or self.enc.prev is None
        is_key, frame = self.enc.encode(s, key)
        if is_key:
            self._last_key = s.taken_at
            self.keyframes_written += 1
        n = f.append(s.taken_at, rf.KEY if is_key else rf.DELTA, frame)
        self._wrote(n)
        return n

    def event(self, t: float, sub: int, data: dict[str, Any]) -> int:
        """A dump (``rf.DUMP``), an incident (``rf.INCIDENT``) or a status change (``rf.STATUS``)."""
        n = self._open(t).append(t, rf.EVENT, data, sub)
        self._wrote(n)
        return n

    def _wrote(self, n: int) -> None:
        self.bytes_written += n
        self.frames_written += 1
        if time.monotonic() - self._last_sync > self.limits.fsync_s and self.file is not None:
            self._last_sync = time.monotonic()
            self.file.sync()
            if self.segmented:
                self.prune()

    def prune(self) -> list[str]:
        """Delete the oldest segments beyond ``keep_s`` or ``max_bytes`` (never the one being written)."""
        lim = self.limits
        if not self.segmented or (lim.keep_s is None and lim.max_bytes is None):
            return []
        cur = self.file.path if self.file else None
        segs = []
        for p in sorted(self.path.glob(f"rec-*{SUFFIX}")):
            try:
                st = p.stat()
            except OSError:
                continue
            segs.append((p, st.st_size, st.st_mtime))
        total = sum(s for _, s, _ in segs)
        now = self.clock()
        gone = []
        for p, size, mtime in segs:
            if str(p) == cur:
                break
            old = lim.keep_s is not None and mtime < now - lim.keep_s
            big = lim.max_bytes is not None and total > lim.max_bytes
            if not (old or big):
                break
            try:
                p.unlink()
            except OSError:
                continue
            total -= size
            gone.append(p.name)
        self.deleted += gone
        return gone

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class Recorder:
    """Feeds a ``RecordingWriter`` from a thread. ``problem`` holds the last write error (disk full...)."""

    def __init__(self, writer: RecordingWriter, max_queue: int = 64) -> None:
        self.writer = writer
        self._q: queue.Queue[Any] = queue.Queue()
        self._max = max_queue
        self._snaps_queued = 0
        self._lock = threading.Lock()
        self.dropped = 0
        self.written = 0
        self.problem: Problem | None = None
        self._unsub: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name="verltop-recorder", daemon=True)
        self._thread.start()

    def attach(self, engine: Engine) -> Recorder:
        """Record every snapshot and finished dump of ``engine``."""
        self._unsub.append(engine.subscribe(self.snapshot))
        self._unsub.append(engine.subscribe_dumps(lambda r, g: self.dump(r, g)))
        return self

    # ---------------------------------------------------------- producers (any thread)

    def snapshot(self, s: Snapshot) -> None:
        with self._lock:
            if self._snaps_queued >= self._max:
                self.dropped += 1
                return
            self._snaps_queued += 1
        self._q.put(("snap", s))

    def dump(self, report: DumpReport, scope: str | None, incident: str | None = None) -> None:
        self._q.put(("event", report.taken_at, rf.DUMP, lambda: {"group": scope, "incident": incident,
                                                                  "report": to_data(report)}))

    def event(self, t: float, sub: int, data: dict[str, Any]) -> None:
        self._q.put(("event", t, sub, lambda: data))

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued so far is written."""
        done = threading.Event()
        self._q.put(("mark", done))
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        for u in self._unsub:
            u()
        self._unsub.clear()
        if self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join(timeout_s)

    # ---------------------------------------------------------- the writer thread

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is _STOP:
                break
            try:
                if item[0] == "snap":
                    with self._lock:
                        self._snaps_queued -= 1
                    self.writer.snapshot(item[1])
                elif item[0] == "event":
                    _, t, sub, make = item
                    self.writer.event(t, sub, make())
                elif item[0] == "mark":
                    item[1].set()
                    continue
                self.written += 1
                if self.problem is not None:
                    log.warning("recording works again")
                self.problem = None
            except OSError as e:
                if self.problem is None:
                    log.error("cannot write the recording %s: %s", self.writer.path, e.strerror or e)
                self.problem = Problem("record", f"cannot write the recording: {e.strerror or e}",
                                       "free disk space or pick another directory")
            except Exception:
                log.error("recording a frame failed", exc_info=True)
        try:
            self.writer.close()
        except OSError as e:
            log.error("closing the recording failed: %s", e)
