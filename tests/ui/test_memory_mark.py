"""A rank short of memory is marked on its row of the main screen (the "why" column's note)."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.test_memory import job
from verltop.analysis.memory_view import memory_view
from verltop.model import Snapshot
from verltop.ui.widgets.table_rows import layout_rows


def test_a_leaking_rank_near_its_limit_is_marked_on_its_row():
    book, steps, rows = job(n_steps=12)
    rows = [replace(r, task=None) for r in rows]
    v = memory_view(book, steps, rows)
    leak = next(h for h in v.headroom if h.actor_id == "a1" and h.kind == "gpu")
    near = replace(leak, steps_to_limit=6.4)
    v = replace(v, headroom=tuple(near if h is leak else h for h in v.headroom))
    snap = Snapshot(1.0, "x", (), tuple(rows), None, memory=v)
    notes = {r.actor_id: r.note for r in layout_rows(snap, "group", "rank") if r.actor is not None}
    assert notes["a1"] == "GPU full in 6 steps"
    assert notes["a0"] == "" and notes["a2"] == ""  # room to spare
