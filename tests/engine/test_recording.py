"""The recording format: round trip, seeking, damage (truncation, a killed writer, flipped bytes), versions,
segments (rotation, pruning) and incident windows."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engine.helpers import fake_snapshots, same, synthetic_snapshots
from tests.wait import wait_until
from verltop.engine import recording_format as rf
from verltop.engine.frames import SnapshotState, keyframe
from verltop.engine.recording_format import RecordingError
from verltop.engine.recording_reader import Recording, export_window
from verltop.engine.recording_writer import Limits, RecordingWriter

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, snaps: list, keyframe_s: float = 20.0, events: bool = False) -> RecordingWriter:
    w = RecordingWriter(path, {"address": "http://x", "source": "test"}, Limits(keyframe_s=keyframe_s))
    for i, s in enumerate(snaps):
        w.snapshot(s)
        if events and i % 10 == 5:
            w.event(s.taken_at, rf.INCIDENT, {"id": f"i{i}", "detected_at": s.taken_at})
    w.close()
    return w


def test_round_trip_synthetic_every_frame_and_every_seek(tmp_path):
    snaps = synthetic_snapshots()
    w = write(tmp_path / "r.vtr", snaps)
    assert w.keyframes_written == 6  # one every 20 s of a 120 s recording
    rec = Recording.open(tmp_path / "r.vtr")
    assert rec.damage == [] and len(rec.snaps) == len(snaps) and rec.meta["address"] == "http://x"
    assert rec.meta["format"] == rf.FORMAT
    cur = rec.cursor()
    for i, s in enumerate(snaps):  # played in order: one delta at a time
        got = cur.goto(i)
        assert same(got, s), i
    assert cur.frames_read == len(snaps)
    for i in random.Random(1).sample(range(len(snaps)), 25):  # and jumped to, in any order
        c = rec.cursor()
        assert same(c.goto(i), s := snaps[i]), i
        assert c.frames_read <= 11  # at most a keyframe interval: never the whole file
        assert same(rec.cursor().goto_time(s.taken_at + 0.5), s)


def test_round_trip_is_exact_on_the_synthetic_dashboard(tmp_path):
    """Snapshots the real Monitor built from the fake 16-GPU job (a hang from the 6th poll on) come back
    equal, field for field, float for float."""
    import asyncio

    snaps = asyncio.run(fake_snapshots(nodes=2, steps=30, hang_at=5))
    assert any(a.stalled for a in snaps[-1].actors)
    write(tmp_path / "r.vtr", snaps, keyframe_s=15)
    rec = Recording.open(tmp_path / "r.vtr")
    stored = [a.get("task_id") for a in rec.payload(rec.snaps[0])["a"] if a.get("task_id")]
    assert stored and all(t.endswith("+") and len(t) == 17 for t in stored)  # Ray's: 16 hex + the actor id
    cur = rec.cursor()
    for i, s in enumerate(snaps):
        got = cur.goto(i)
        assert got is not None
        assert [a.actor_id for a in got.actors] == [a.actor_id for a in s.actors]
        assert same(got, s, tol=0.0005), i


def test_deltas_store_what_changed_not_what_the_clock_moved(tmp_path):
    snaps = synthetic_snapshots()
    w = write(tmp_path / "r.vtr", snaps, keyframe_s=1e9)
    rec = Recording.open(tmp_path / "r.vtr")
    deltas = [rec.payload(r) for r in rec.snaps[1:]]
    # a steady hung rank: its task age and its stalls' ages move every poll, yet nothing of it is stored
    pos = [a.actor_id for a in snaps[37].actors].index("a0")
    quiet = dict(deltas[36]["a"]["set"]).get(pos, {})
    assert "task_running_s" not in quiet and "stalls" not in quiet, quiet
    assert all(r.length < rec.snaps[0].length for r in rec.snaps[1:])
    every_key = write(tmp_path / "k.vtr", snaps, keyframe_s=0)
    assert every_key.keyframes_written == 60 and w.bytes_written < every_key.bytes_written / 2


def test_truncated_anywhere_opens_and_keeps_what_came_before(tmp_path):
    snaps = synthetic_snapshots(30)
    src = tmp_path / "r.vtr"
    write(src, snaps)
    data = src.read_bytes()
    ends = [r.offset + r.length for r in Recording.open(src).snaps]
    cut_points = sorted({*random.Random(2).sample(range(rf.FILE_HEADER.size + 1, len(data)), 60),
                         ends[10] - 1, ends[10], ends[10] + 1, len(data) - 1})
    for cut in cut_points:
        p = tmp_path / f"cut{cut}.vtr"
        p.write_bytes(data[:cut])
        whole = sum(1 for e in ends if e <= cut)
        if whole == 0:
            with pytest.raises(RecordingError, match="no snapshot"):
                Recording.open(p)
            continue
        rec = Recording.open(p)
        assert len(rec.snaps) == whole, cut
        assert (rec.damage == []) == (cut in ends), (cut, rec.damage)
        if rec.damage:
            assert "incomplete" in rec.damage[0] and "stopped mid-write" in rec.damage[0]
        assert same(rec.cursor().goto(whole - 1), snaps[whole - 1])


def test_a_damaged_frame_costs_the_frames_up_to_the_next_keyframe(tmp_path):
    snaps = synthetic_snapshots()
    src = tmp_path / "r.vtr"
    write(src, snaps)
    rec = Recording.open(src)
    bad = rec.snaps[13]  # a delta after the keyframe at 10
    assert bad.kind == rf.DELTA
    data = bytearray(src.read_bytes())
    data[bad.offset + bad.length // 2] ^= 0xFF
    src.write_bytes(bytes(data))
    rec = Recording.open(src)
    assert len(rec.snaps) == len(snaps)  # headers intact: the index is whole
    cur = rec.cursor()
    for i in range(len(snaps)):
        got = cur.goto(i)
        if 13 <= i < 20:
            assert got is None, i  # its delta chain is broken until the next keyframe
        else:
            assert same(got, snaps[i]), i
    assert any("damaged" in d for d in rec.damage)


def test_garbage_in_the_middle_is_skipped_to_the_next_whole_frame(tmp_path):
    snaps = synthetic_snapshots(30)
    src = tmp_path / "r.vtr"
    write(src, snaps)
    rec = Recording.open(src)
    r = rec.snaps[14]
    data = bytearray(src.read_bytes())
    data[r.header_offset : r.header_offset + 8] = b"\xff" * 8  # its header: sync and length gone
    src.write_bytes(bytes(data))
    rec = Recording.open(src)
    assert len(rec.snaps) == 29 and rec.damage == []
    assert same(rec.cursor().goto(28), snaps[29])


@pytest.mark.parametrize(("head", "msg"), [
    (struct.pack("<8sHH", rf.MAGIC, 2, 0), "newer verltop .*format 2.*upgrade verltop"),
    (struct.pack("<8sHH", rf.MAGIC, 0, 0), "format 0 is older than any this verltop reads"),
    (b"SQLite format 3\x00" + b"\0" * 100, "an SQLite file, not a verltop recording"),
    (b'{"taken_at": 1}\n', "not a verltop recording"),
    (b"", "empty or cut short"),
])
def test_other_versions_and_other_files_say_why_not(tmp_path, head, msg):
    p = tmp_path / "x.vtr"
    p.write_bytes(head + (rf.encode_frame(1.0, rf.META, {"format": 2}) if head.startswith(rf.MAGIC) else b""))
    with pytest.raises(RecordingError, match=msg):
        Recording.open(p)


def test_a_recording_from_an_older_verltop_opens(tmp_path):
    """Written by a verltop whose model had fewer fields (no job_id, no Flight Recorder prefixes, no GPU
    uuid) and one since removed: missing fields take their defaults, unknown ones are ignored."""
    s = synthetic_snapshots(2)[1]
    frame = keyframe(s)
    for a in frame["a"]:
        for k in ("job_id", "fr_dump_prefix", "fr_pipe_prefix", "task_start_s"):
            a.pop(k, None)
        a["retired_field"] = {"x": 1}
    for n in frame["n"]:
        for g in n["gpus"]:
            g.pop("uuid", None)
    p = tmp_path / "old.vtr"
    with open(p, "wb") as f:
        f.write(struct.pack("<8sHH", rf.MAGIC, 1, 0))
        f.write(rf.encode_frame(s.taken_at, rf.META, {"format": 1, "verltop": "0.0.9"}))
        f.write(rf.encode_frame(s.taken_at, rf.KEY, frame))
    got = Recording.open(p).cursor().goto(0)
    assert got is not None and [a.actor_id for a in got.actors] == [a.actor_id for a in s.actors]
    a = got.actors[1]
    assert a.job_id is None and a.fr_pipe_prefix is None and a.task_start_s is None
    assert a.task_running_s is None  # its start unknown: no age can be derived
    assert got.nodes[0].gpus[0].uuid is None and got.nodes[0].gpus[0].util_percent == s.nodes[0].gpus[0].util_percent


def test_state_ignores_deltas_before_the_first_keyframe():
    st = SnapshotState()
    st.apply(False, {"t": 1.0, "s": {"phase": "gen"}})
    assert not st.ready


WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.engine.helpers import synthetic_snapshots
from verltop.engine.recording_writer import Limits, RecordingWriter
snaps = synthetic_snapshots(60)
w = RecordingWriter({path!r}, {{"source": "test"}}, Limits(keyframe_s=10))
print("ready", flush=True)
i = 0
while True:
    s = snaps[i % 60]
    w.snapshot(s.__class__(**{{**{{f: getattr(s, f) for f in s.__slots__}}, "taken_at": s.taken_at + 120 * (i // 60)}}))
    i += 1
"""


def _frames(path) -> int:
    """Frames in a recording being written (0 before its first)."""
    try:
        return len(Recording.open(path).snaps)
    except RecordingError:
        return 0


def test_kill_9_of_the_writer_loses_at_most_the_frame_being_written(tmp_path):
    for n in range(3):
        path = tmp_path / f"k{n}.vtr"
        p = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), path=str(path))],
                             stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            # killed at a different moment each round, once it has written a few dozen frames (a loaded
            # machine's writer is slower than a fixed sleep allows for)
            wait_until(lambda f=path: _frames(f) > 25, 60, "25 frames written", step=0.05)
            time.sleep(0.37 * n)
        finally:  # never left writing behind a failed wait
            os.kill(p.pid, 9)
            p.wait()
        size = path.stat().st_size
        rec = Recording.open(path)
        ends = rec.snaps[-1].offset + rec.snaps[-1].length
        assert size - ends < 64 << 10  # only the frame that was being written
        assert len(rec.snaps) > 20
        assert rec.damage == [] or "stopped mid-write" in rec.damage[0]
        assert rec.cursor().goto(len(rec.snaps) - 1) is not None


def test_segments_rotate_prune_and_read_as_one(tmp_path):
    snaps = synthetic_snapshots(60)
    d = tmp_path / "seg"
    clock = [snaps[0].taken_at]
    w = RecordingWriter(d, {"source": "watch"}, Limits(keyframe_s=10, segment_s=30, keep_s=1e9,
                                                       max_bytes=None), segmented=True, clock=lambda: clock[0])
    for s in snaps:
        clock[0] = s.taken_at
        w.snapshot(s)
    w.close()
    files = sorted(d.glob("rec-*.vtr"))
    assert len(files) == 4  # 120 s in segments of 30 s
    rec = Recording.open(d)
    assert len(rec.snaps) == 60 and all(rec.snaps[i].kind == rf.KEY for i in (0, 15, 30, 45))
    assert same(rec.cursor().goto(59), snaps[59])
    # by size: keep the newest segments within the cap
    total = sum(f.stat().st_size for f in files)
    w2 = RecordingWriter(d, {}, Limits(max_bytes=total // 2), segmented=True)
    gone = w2.prune()
    assert gone == [f.name for f in files[: len(gone)]] and 1 <= len(gone) <= 3
    assert sum(f.stat().st_size for f in d.glob("rec-*.vtr")) <= total // 2
    # by age
    old = time.time() - 7200
    for f in d.glob("rec-*.vtr"):
        os.utime(f, (old, old))
    assert RecordingWriter(d, {}, Limits(keep_s=3600), segmented=True).prune()
    assert not list(d.glob("rec-*.vtr"))


def test_export_window_starts_whole_and_carries_events(tmp_path):
    snaps = synthetic_snapshots(60)
    src = tmp_path / "r.vtr"
    write(src, snaps, keyframe_s=20, events=True)
    rec = Recording.open(src)
    t0, t1 = snaps[25].taken_at, snaps[40].taken_at
    size = export_window(rec, tmp_path / "w.vtr", t0, t1, {"incident": {"id": "x"}})
    out = Recording.open(tmp_path / "w.vtr")
    assert size == (tmp_path / "w.vtr").stat().st_size and out.meta["incident"] == {"id": "x"}
    assert out.meta["window"] == [t0, t1] and out.meta["address"] == "http://x"
    assert out.snaps[0].kind == rf.KEY and out.snaps[0].t <= t0 and out.snaps[-1].t == t1
    assert [e.t for e in out.events] == [snaps[i].taken_at for i in (25, 35)]
    c = out.cursor()
    assert same(c.goto_time(t0), snaps[25]) and same(c.goto_time(t1), snaps[40])
    assert not list(tmp_path.glob(".*tmp"))


def test_frames_that_make_no_sense_are_damage_not_a_crash(tmp_path):
    """A frame whose checksum holds but whose JSON is not what this verltop writes (a bug, a hand edit)."""
    snaps = synthetic_snapshots(12)
    p = tmp_path / "odd.vtr"
    with open(p, "wb") as f:
        f.write(struct.pack("<8sHH", rf.MAGIC, 1, 0))
        f.write(rf.encode_frame(snaps[0].taken_at, rf.META, {"format": 1}))
        f.write(rf.encode_frame(snaps[0].taken_at, rf.KEY, keyframe(snaps[0])))
        f.write(rf.encode_frame(snaps[1].taken_at, rf.DELTA, {"t": snaps[1].taken_at, "a": {"set": {"x": 1}}}))
        f.write(rf.encode_frame(snaps[2].taken_at, rf.KEY, {"t": snaps[2].taken_at, "a": [{"actor_id": "z"}]}))
        f.write(rf.encode_frame(snaps[3].taken_at, rf.KEY, keyframe(snaps[3])))
    rec = Recording.open(p)
    c = rec.cursor()
    assert same(c.goto(0), snaps[0])
    assert c.goto(1) is None and c.goto(2) is None  # lost, said so
    assert same(c.goto(3), snaps[3])
    assert len(rec.damage) == 2 and "cannot be" in rec.damage[0]
