"""Reading recordings (``verltop replay``, an incident's window): an index built from the frame headers of
one file or of a watch's segment files, seeking to any time (the keyframe before it, then the deltas up to
it), events, and copying a time window into a file of its own. The byte format is ``recording_format``; the
frame JSON is ``frames``; docs/recording.md describes both.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Any

from verltop.engine import recording_format as rf
from verltop.engine.frames import SnapshotState
from verltop.engine.recording_format import INCIDENT_FILE, SEGMENTS, SUFFIX, FrameRef, RecordingError
from verltop.model import Snapshot


def recording_files(path: str | Path, since: float | None = None) -> list[Path]:
    """The files of the recording at ``path``: a file, an incident directory, a watch directory or a
    segment directory. ``since`` skips segments last written before it."""
    p = Path(path).expanduser()
    if p.is_file():
        return [p]
    if not p.exists():
        raise RecordingError(f"{p}: no such file or directory")
    for cand in (p / INCIDENT_FILE, p / SEGMENTS, p):
        if cand.is_file():
            return [cand]
        if cand.is_dir():
            segs = sorted(cand.glob(f"*{SUFFIX}"))
            if since is not None:
                segs = [s for s in segs if _mtime(s) >= since]
            if segs:
                return segs
    raise RecordingError(f"{p}: no recording in it (looked for {INCIDENT_FILE}, {SEGMENTS}/*{SUFFIX}, *{SUFFIX})")


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


class Recording:
    """A recording opened for reading. ``snaps`` and ``events`` index every frame by its header."""

    def __init__(self, files: list[Path]) -> None:
        self.files = [str(f) for f in files]
        self.meta: dict[str, Any] = {}
        self.snaps: list[FrameRef] = []
        self.events: list[FrameRef] = []
        self.damage: list[str] = []
        self._handles: dict[int, Any] = {}
        self._scan_all()

    @classmethod
    def open(cls, path: str | Path, since: float | None = None) -> Recording:
        """RecordingError (one line: why) when it cannot be read at all."""
        files = recording_files(path, since)
        try:
            rec = cls(files)
        except OSError as e:
            raise RecordingError(f"{path}: {e.strerror or e}") from None
        if not rec.snaps and not rec.events:
            raise RecordingError(f"{path}: the recording holds no snapshot yet" +
                                 (f" ({rec.damage[0]})" if rec.damage else ""))
        return rec

    def _scan_all(self) -> None:
        for i, f in enumerate(self.files):
            try:
                _, frames, damage = rf.scan(f, i)
            except RecordingError as e:
                if len(self.files) == 1:
                    raise
                self.damage.append(str(e))  # one bad segment of many: keep the others
                continue
            if damage:
                self.damage.append(f"{os.path.basename(f)}: {damage}")
            for fr in frames:
                if fr.kind in (rf.KEY, rf.DELTA):
                    self.snaps.append(fr)
                elif fr.kind == rf.EVENT:
                    self.events.append(fr)
                elif fr.kind == rf.META and not self.meta:
                    m = self.payload(fr)
                    if isinstance(m, dict):
                        self.meta = m
        self.times = [f.t for f in self.snaps]
        self.keys = [i for i, f in enumerate(self.snaps) if f.kind == rf.KEY]

    @property
    def start_s(self) -> float | None:
        return self.snaps[0].t if self.snaps else (self.events[0].t if self.events else None)

    @property
    def end_s(self) -> float | None:
        ts = [x[-1].t for x in (self.snaps, self.events) if x]
        return max(ts) if ts else None

    def _handle(self, i: int) -> Any:
        f = self._handles.get(i)
        if f is None:
            f = self._handles[i] = open(self.files[i], "rb")  # noqa: SIM115 - closed in close()
        return f

    def payload(self, ref: FrameRef) -> Any:
        """The frame's object; RecordingError when its bytes are damaged."""
        f = self._handle(ref.file)
        f.seek(ref.offset)
        return rf.decode_payload(ref, f.read(ref.length))

    def raw(self, ref: FrameRef) -> bytes:
        """The whole frame (header and payload), to copy it into another recording."""
        f = self._handle(ref.file)
        f.seek(ref.header_offset)
        return f.read(rf.FRAME_HEADER.size + ref.length)

    def index_at(self, t: float) -> int:
        """The last snapshot taken at or before ``t`` (0 when ``t`` is before the first)."""
        return max(0, bisect.bisect_right(self.times, t) - 1)

    def events_of(self, sub: int) -> list[FrameRef]:
        return [e for e in self.events if e.sub == sub]

    def cursor(self) -> Cursor:
        return Cursor(self)

    def close(self) -> None:
        for f in self._handles.values():
            f.close()
        self._handles.clear()


class Cursor:
    """A position in the snapshots. ``goto(i)`` seeks: from the keyframe at or before ``i`` (or from
    where it stands, when that is nearer), applying the deltas up to ``i``. Damaged frames are skipped
    until the next keyframe."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.i = -1
        self.state = SnapshotState()
        self.frames_read = 0

    def goto(self, i: int) -> Snapshot | None:
        rec = self.rec
        if not rec.snaps:
            return None
        i = max(0, min(i, len(rec.snaps) - 1))
        k = rec.keys[bisect.bisect_right(rec.keys, i) - 1] if rec.keys and rec.keys[0] <= i else 0
        if self.i == i and self.state.ready:
            return self.snapshot()
        start = self.i + 1 if k <= self.i < i and self.state.ready else k
        for j in range(start, i + 1):
            ref = rec.snaps[j]
            try:
                frame = rec.payload(ref)
                self.state.apply(ref.kind == rf.KEY, frame)
            except (RecordingError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
                # a damaged frame, or one this verltop cannot make sense of: lost until the next keyframe
                self.state.ready = False
                msg = str(e) if isinstance(e, RecordingError) else f"frame at byte {ref.offset} cannot be read ({e})"
                if msg not in rec.damage:
                    rec.damage.append(msg)
                continue
            self.frames_read += 1
        self.i = i
        return self.snapshot()

    def goto_time(self, t: float) -> Snapshot | None:
        return self.goto(self.rec.index_at(t))

    def snapshot(self) -> Snapshot | None:
        if not self.state.ready:
            return None
        try:
            return self.state.snapshot()
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # codec.DecodeError is a ValueError
            msg = f"the snapshot of {self.state.t} cannot be rebuilt ({e})"
            if msg not in self.rec.damage:
                self.rec.damage.append(msg)
            return None


def export_window(rec: Recording, dest: str | Path, t0: float, t1: float, meta: dict[str, Any]) -> int:
    """Copy the frames of ``[t0, t1]`` (from the keyframe at or before ``t0``, so the copy starts whole)
    into a new file at ``dest``, written beside it first and renamed into place. Returns its size."""
    dest = Path(dest)
    first = rec.index_at(t0)
    k = rec.keys[bisect.bisect_right(rec.keys, first) - 1] if rec.keys and rec.keys[0] <= first else 0
    begin = (rec.snaps[k].file, rec.snaps[k].offset) if rec.snaps else (0, 0)
    refs = sorted((r for r in (*rec.snaps, *rec.events) if (r.file, r.offset) >= begin and r.t <= t1),
                  key=lambda r: (r.file, r.offset))
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    out = rf.FrameFile(str(tmp), {**rec.meta, **meta, "window": [t0, t1]}, refs[0].t if refs else t0)
    try:
        for r in refs:
            out.append_raw(rec.raw(r), r.t)
        out.close()
        os.replace(tmp, dest)
    except BaseException:
        out.close()
        tmp.unlink(missing_ok=True)
        raise
    return out.size
