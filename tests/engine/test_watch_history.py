"""``snapshot --watch-dir``: a one-shot snapshot borrows the running watch's history (memory by phase, growth,
headroom; actors' memory peaks) from the watch's real recording on disk, or says why it cannot."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import replace

from tests.ui.test_memory_screen import NOW, memory_snapshot, memory_view
from verltop.engine.recording_format import SEGMENTS
from verltop.engine.recording_writer import RecordingWriter, base_meta
from verltop.engine.watch_history import borrow, watch_running


def record(d, snap, address=None):
    w = RecordingWriter(d / SEGMENTS, base_meta("watch", address or snap.address), segmented=True)
    w.snapshot(snap)
    w.close()


def one_shot():
    snap = memory_snapshot()
    return replace(snap, memory=None, actors=tuple(replace(a, rss_peak_bytes=None) for a in snap.actors),
                   taken_at=NOW + 3)


def test_explicit_dir_lends_memory_and_actor_peaks(tmp_path):
    watched = memory_snapshot()
    watched = replace(watched, actors=tuple(replace(a, rss_peak_bytes=5 << 30) for a in watched.actors))
    record(tmp_path, watched)
    b = borrow(one_shot(), tmp_path, explicit=True, now=NOW + 3)
    assert b.note is None and b.snapshot.memory == memory_view()
    assert all(a.rss_peak_bytes == 5 << 30 for a in b.snapshot.actors)


def test_default_dir_only_while_a_watch_holds_its_lock(tmp_path):
    record(tmp_path, memory_snapshot())
    b = borrow(one_shot(), tmp_path, explicit=False, now=NOW + 3)
    assert b.snapshot.memory is None and "no `verltop watch` runs in" in (b.note or "")
    fd = os.open(tmp_path / "watch.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running watch holds it
        assert watch_running(tmp_path)
        assert borrow(one_shot(), tmp_path, explicit=False, now=NOW + 3).snapshot.memory == memory_view()
    finally:
        os.close(fd)
    assert not watch_running(tmp_path)


def test_why_not(tmp_path):
    b = borrow(one_shot(), tmp_path, explicit=True, now=NOW)
    assert b.snapshot.memory is None and "no recording in it" in (b.note or "")
    record(tmp_path, memory_snapshot())
    b = borrow(one_shot(), tmp_path, explicit=True, now=NOW + 600)
    assert b.snapshot.memory is None and "600 s old" in (b.note or "")
    other = tmp_path / "other"
    record(other, memory_snapshot(), address="http://10.0.0.9:8265")
    b = borrow(one_shot(), other, explicit=True, now=NOW + 3)
    assert b.snapshot.memory is None and "watches http://10.0.0.9:8265, not" in (b.note or "")


def test_cli_json_says_why_memory_is_null(tmp_path, replay, capsys, monkeypatch):
    """``verltop snapshot --json`` on a replayed dashboard: no watch → memory null and a memory_note."""
    from verltop.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the default watch dir: empty
    rc = main(["snapshot", "--json", "--no-local", "--address", replay.url])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["memory"] is None and "no `verltop watch` runs in" in doc["memory_note"]
    rc = main(["snapshot", "--json", "--no-local", "--address", replay.url, "--watch-dir", str(tmp_path / "nope")])
    assert rc == 2 and "--watch-dir" in capsys.readouterr().err
