"""The replay engine: the Engine interface over a recording, with its clock and time controls."""

from __future__ import annotations

import asyncio
import itertools
import time

from tests.engine.helpers import same, write_replay_recording
from tests.wait import wait_until_async
from verltop.engine.recording_reader import Recording
from verltop.engine.replay import LEAD_S, ReplayEngine


async def test_plays_publishes_and_keeps_recorded_time(tmp_path):
    snaps = write_replay_recording(tmp_path / "r.vtr")
    eng = ReplayEngine(Recording.open(tmp_path / "r.vtr"), speed=64.0)
    got = []
    eng.subscribe(got.append)
    assert not eng.live and eng.address == "http://127.0.0.1:8265"
    eng.start()
    try:
        assert got and same(got[0], snaps[0]) and eng.has_data
        t0 = time.monotonic()
        await asyncio.sleep(1.0)  # 64 recorded seconds a second; published at most every 0.2 s
        at, dt = eng.clock(), time.monotonic() - t0  # a loaded machine's loop may wake late: bounds by dt
        assert 3 <= len(got) <= dt / 0.2 + 3, (len(got), dt)
        assert all(a.taken_at < b.taken_at for a, b in itertools.pairwise(got))
        assert snaps[0].taken_at + 40 < at < snaps[0].taken_at + 64 * dt + 16, (at - snaps[0].taken_at, dt)
        # pause: the clock stops, and the snapshot of that moment is shown
        assert eng.toggle_pause() is False
        frozen = eng.clock()
        await asyncio.sleep(0.3)
        assert eng.clock() == frozen and eng.playback().paused
        i = next(k for k, s in enumerate(snaps) if s.taken_at == eng.latest.taken_at)
        assert same(got[-1], snaps[i]) and snaps[i].taken_at <= frozen < snaps[i + 1].taken_at
        # step: one snapshot at a time, both ways
        s1 = eng.step(1)
        assert s1 is not None and s1.taken_at == snaps[i + 1].taken_at and eng.clock() == s1.taken_at
        assert eng.step(-2).taken_at == snaps[i - 1].taken_at
        # speed
        assert eng.faster(False) == 32.0 and eng.faster(True) == 64.0 and eng.faster(True) == 128.0
        for _ in range(20):
            eng.faster(True)
        assert eng.speed == 256.0
        # to the end: stops there
        eng.seek(snaps[-1].taken_at + 100)
        assert eng.clock() == snaps[-1].taken_at and same(eng.latest, snaps[-1])
        eng.toggle_pause()  # play at the end: from the start again
        assert eng.clock() < snaps[1].taken_at
    finally:
        await eng.stop()


async def test_incidents_dumps_and_outages(tmp_path):
    snaps = write_replay_recording(tmp_path / "r.vtr")
    eng = ReplayEngine(Recording.open(tmp_path / "r.vtr"), paused=True)
    eng.start()
    try:
        assert [i.id for i in eng.incidents] == ["20260101T000050Z-wg"]
        inc = eng.next_incident()
        assert inc is not None and eng.clock() == snaps[20].taken_at - LEAD_S
        assert not any(a.stalled for a in eng.latest.actors)  # before the hang: rows not red yet
        eng.seek(snaps[30].taken_at)
        assert any(a.stalled for a in eng.latest.actors) and eng.incident_at().id == inc.id
        d = eng.recorded_dump()
        assert d is not None and d.t == snaps[27].taken_at and d.incident == inc.id
        assert [(s.worker_group, s.rank) for s in d.report.suspects] == [("wg", 2)]
        eng.seek(snaps[0].taken_at)
        assert eng.recorded_dump().t == snaps[27].taken_at  # before it was taken: the next one
        assert eng.recorded_dump(scope="nope") is not None
        assert eng.connection_problem() is None  # there is data
        text, problem = await eng.log_tail("a0")
        assert text is None and "no logs" in problem.text
        assert eng.dump(eng.latest, None, __import__("verltop.engine", fromlist=["DumpOptions"]).DumpOptions()).targets == []
    finally:
        await eng.stop()


async def test_long_gaps_are_skipped(tmp_path):
    from dataclasses import replace

    from verltop.engine.recording_writer import Limits, RecordingWriter

    snaps = write_replay_recording(tmp_path / "a.vtr")[:10]
    w = RecordingWriter(tmp_path / "g.vtr", {}, Limits())
    for s in snaps[:5]:
        w.snapshot(s)
    for s in snaps[5:]:  # verltop was off for an hour
        w.snapshot(replace(s, taken_at=s.taken_at + 3600))
    w.close()
    eng = ReplayEngine(Recording.open(tmp_path / "g.vtr"), speed=8.0)
    eng.start()
    try:
        await wait_until_async(lambda: eng.latest.taken_at > snaps[5].taken_at, 30, "the frames after the gap",
                               detail=lambda: (eng.latest.taken_at, eng.skipped_s))
        assert eng.latest.taken_at > snaps[5].taken_at + 3600 - 1 and eng.skipped_s > 3000
    finally:
        await eng.stop()
