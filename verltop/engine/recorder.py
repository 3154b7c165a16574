"""Write what an engine publishes into a recording, off the event loop: snapshots as they come, dumps when
they finish, and the events the caller adds (incidents, dashboard outages).

One thread owns the ``RecordingWriter``; the loop only puts immutable objects on a queue. A full queue (a
disk slower than the polls) drops snapshots, counted; events are never dropped. Encoding a 1,000-actor
snapshot takes ~15 ms and a keyframe ~200 ms on a busy 2-core machine: none of it on the UI's loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from verltop.codec import to_data
from verltop.engine import recfile as rf
from verltop.engine.base import Engine
from verltop.engine.recording import RecordingWriter
from verltop.model import DumpReport, Problem, Snapshot

log = logging.getLogger("verltop.recorder")

_STOP = object()


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

    def dump(self, report: DumpReport, group: str | None, incident: str | None = None) -> None:
        self._q.put(("event", report.taken_at, rf.DUMP, lambda: {"group": group, "incident": incident,
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
