"""A recording keeps the memory view: keyframes whole, deltas with only the rows that changed, read back
equal (so replay and a watch directory's reader see what the live view showed)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.analysis.test_memory import job
from tests.engine.helpers import synthetic_snapshots
from tests.engine.test_recording import write
from verltop.analysis.memory_view import memory_view
from verltop.codec import to_data
from verltop.engine.recording_reader import Recording


def snaps_with_memory() -> list:
    base = synthetic_snapshots(1)[0]
    out = []
    for k in range(3, 13):  # the same job seen after k steps: the book grows, old rows stay
        book, steps, rows = job(n_steps=k, ranks=8)
        v = memory_view(book, steps, rows)
        out.append(replace(base, taken_at=base.taken_at + k, memory=v))
    out.append(replace(out[-1], taken_at=out[-1].taken_at + 1, memory=None))  # a view that went away
    out.append(replace(out[-2], taken_at=out[-1].taken_at + 1))
    return out


def test_memory_round_trips_through_deltas(tmp_path):
    snaps = snaps_with_memory()
    assert snaps[-3].memory.growth and snaps[-3].memory.by_phase
    write(tmp_path / "r.vtr", snaps, keyframe_s=1e9)
    rec = Recording.open(tmp_path / "r.vtr")
    cur = rec.cursor()
    for i, s in enumerate(snaps):
        assert cur.goto(i).memory == s.memory, i
    deltas = [rec.payload(r) for r in rec.snaps[1:-2]]
    assert all("mem" in d and "memory" not in d.get("s", {}) for d in deltas)
    mem = deltas[-1]["mem"]
    assert len(json.dumps(mem)) < len(json.dumps(to_data(snaps[-3].memory))) / 4  # the new step's rows, not all
    assert len(mem["by_phase"]["set"]) <= 2 * 8 * 3 and not mem["by_phase"]["del"]
