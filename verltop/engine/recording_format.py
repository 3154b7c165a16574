"""The recording file: an append-only sequence of checksummed frames (docs/recording.md).

    file   = header frame*
    header = magic "\\x89VTR\\r\\n\\x1a\\n" (8 bytes), u16 format version, u16 flags (0)      little-endian
    frame  = u32 sync 0x52465456 ("VTFR"), u32 payload length, u32 crc32(rest of header + payload),
             f64 time (Unix seconds), u8 kind, u8 codec, u16 sub, payload

Kinds: 0 meta (first frame of every file), 1 keyframe, 2 delta, 3 event (``sub``: 1 dump, 2 incident,
3 status; readers list events from the headers alone). Codecs: 0 JSON, 1 zlib(JSON).

Why this shape: every frame is written with one ``write()`` straight to the file (no user-space buffer), so
a writer killed at any instant leaves a valid file followed by at most one incomplete frame, which readers
detect (length past the end, or a checksum that fails) and ignore; any prefix of a file is a recording.
Nothing is rewritten in place, so a reader can follow a file while it grows, and bounding disk use is
deleting whole files. Reading the index needs only the 24-byte headers, not the payloads.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any

try:
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; the stdlib keeps this working without it
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

MAGIC = b"\x89VTR\r\n\x1a\n"
FORMAT = 1  # bump when a frame's meaning changes; readers below say what they can read
READABLE = (1,)
FILE_HEADER = struct.Struct("<8sHH")
FRAME_HEADER = struct.Struct("<IIIdBBH")
SYNC = 0x52465456
META, KEY, DELTA, EVENT = 0, 1, 2, 3
DUMP, INCIDENT, STATUS = 1, 2, 3  # event kinds (the header's ``sub``)
JSON_CODEC, ZLIB_CODEC = 0, 1
COMPRESS_ABOVE = 200  # bytes of JSON; smaller payloads are stored as they are
MAX_FRAME = 512 << 20  # a larger length is damage, not data


# where the frames go: a file, or segment files in a directory (``verltop watch``)
SUFFIX = ".vtr"
SEGMENTS = "recording"  # the segment directory inside a watch directory
INCIDENT_FILE = "recording.vtr"  # an incident directory's window of the recording


class RecordingError(Exception):
    """A file that is not a recording this verltop can read; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class FrameRef:
    """Where one frame is: enough to read it later without scanning again."""

    t: float
    kind: int
    codec: int
    offset: int  # of the payload
    length: int
    crc: int
    file: int = 0  # index into the recording's files
    sub: int = 0

    @property
    def header_offset(self) -> int:
        return self.offset - FRAME_HEADER.size


def _rest(t: float, kind: int, codec: int, sub: int) -> bytes:
    return struct.pack("<dBBH", t, kind, codec, sub)


def encode_frame(t: float, kind: int, obj: Any, sub: int = 0, level: int = 6) -> bytes:
    body = _dumps(obj)
    codec = JSON_CODEC
    if len(body) > COMPRESS_ABOVE:
        body = zlib.compress(body, level)
        codec = ZLIB_CODEC
    crc = zlib.crc32(body, zlib.crc32(_rest(t, kind, codec, sub)))
    return FRAME_HEADER.pack(SYNC, len(body), crc, t, kind, codec, sub) + body


def decode_payload(ref: FrameRef, body: bytes) -> Any:
    """The frame's object; RecordingError when its bytes are damaged."""
    if len(body) != ref.length or zlib.crc32(body, zlib.crc32(_rest(ref.t, ref.kind, ref.codec, ref.sub))) != ref.crc:
        raise RecordingError(f"frame at byte {ref.offset} is damaged (checksum)")
    try:
        if ref.codec == ZLIB_CODEC:
            body = zlib.decompress(body)
        elif ref.codec != JSON_CODEC:
            raise RecordingError(f"frame at byte {ref.offset} uses unknown codec {ref.codec}")
        return _loads(body)
    except (zlib.error, ValueError) as e:
        raise RecordingError(f"frame at byte {ref.offset} is damaged ({e.__class__.__name__})") from None


def check_header(head: bytes, name: str) -> int:
    """The format version of a file that starts with ``head``, or RecordingError saying why not."""
    if len(head) < FILE_HEADER.size:
        raise RecordingError(f"{name}: empty or cut short before its header; not a recording")
    magic, version, _ = FILE_HEADER.unpack_from(head)
    if magic != MAGIC:
        if head[:16] == b"SQLite format 3\x00":
            raise RecordingError(f"{name}: an SQLite file, not a verltop recording")
        raise RecordingError(f"{name}: not a verltop recording (no recording header)")
    if version not in READABLE:
        if version > max(READABLE):
            raise RecordingError(f"{name}: recorded by a newer verltop (recording format {version}; this verltop "
                                 f"reads format {', '.join(map(str, READABLE))}): upgrade verltop to replay it")
        raise RecordingError(f"{name}: recording format {version} is older than any this verltop reads "
                             f"({', '.join(map(str, READABLE))}); replay it with the verltop that wrote it")
    return version


def scan(path: str, file_index: int = 0) -> tuple[int, list[FrameRef], str | None]:
    """Read a file's frame headers (not the payloads). Returns ``(format version, frames, damage)``;
    ``damage`` says where and why reading stopped early (an incomplete last frame after a crash), else None."""
    frames: list[FrameRef] = []
    with open(path, "rb") as f:
        version = check_header(f.read(16), os.path.basename(path))
        size = os.fstat(f.fileno()).st_size
        pos = FILE_HEADER.size
        f.seek(pos)
        hs = FRAME_HEADER.size
        while pos < size:
            head = f.read(hs)
            if len(head) < hs:
                return version, frames, f"last frame incomplete at byte {pos} (the writer stopped mid-write)"
            sync, length, crc, t, kind, codec, sub = FRAME_HEADER.unpack(head)
            if sync != SYNC or length > MAX_FRAME:
                found = _resync(f, pos + 1, size)
                if found is None:
                    return version, frames, f"damaged data at byte {pos}; nothing readable after it"
                pos = found
                f.seek(pos)
                continue
            if pos + hs + length > size:
                return version, frames, f"last frame incomplete at byte {pos} (the writer stopped mid-write)"
            frames.append(FrameRef(t, kind, codec, pos + hs, length, crc, file_index, sub))
            pos += hs + length
            f.seek(pos)
    return version, frames, None


def _resync(f: Any, start: int, size: int) -> int | None:
    """The next offset after ``start`` where a whole, undamaged frame begins (bytes damaged mid-file)."""
    marker = struct.pack("<I", SYNC)
    pos = start
    while pos < size:
        f.seek(pos)
        chunk = f.read(1 << 20)
        if len(chunk) < len(marker):
            return None
        i = chunk.find(marker)
        if i < 0:
            pos += len(chunk) - len(marker) + 1
            continue
        cand = pos + i
        if _valid_at(f, cand, size):
            return cand
        pos = cand + 1
    return None


def _valid_at(f: Any, pos: int, size: int) -> bool:
    hs = FRAME_HEADER.size
    f.seek(pos)
    head = f.read(hs)
    if len(head) < hs:
        return False
    sync, length, crc, t, kind, codec, sub = FRAME_HEADER.unpack(head)
    if sync != SYNC or length > MAX_FRAME or pos + hs + length > size:
        return False
    return zlib.crc32(f.read(length), zlib.crc32(_rest(t, kind, codec, sub))) == crc


class FrameFile:
    """One recording file open for appending. Each frame is one ``os.write``: a crash loses at most the
    frame being written. ``fsync`` is left to the caller's rhythm (power loss, not process death)."""

    def __init__(self, path: str, meta: dict[str, Any], t: float) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self.size = 0
        self.first_t = t
        self.last_t = t
        self._write(FILE_HEADER.pack(MAGIC, FORMAT, 0))
        self.append(t, META, {"format": FORMAT, **meta})

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.size += len(data)

    def append(self, t: float, kind: int, obj: Any, sub: int = 0) -> int:
        data = encode_frame(t, kind, obj, sub)
        self._write(data)
        self.last_t = max(self.last_t, t)
        return len(data)

    def append_raw(self, data: bytes, t: float) -> None:
        """A frame copied whole from another recording (its checksum travels with it)."""
        self._write(data)
        self.last_t = max(self.last_t, t)

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = -1
