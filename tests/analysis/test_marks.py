"""A dump's suspects kept on the main screen: until their task moves on, or a later dump no longer names them."""

from __future__ import annotations

from dataclasses import replace

from tests.engine.helpers import recorded_report, synthetic_snapshots
from verltop.analysis.marks import live_marks, suspect_marks
from verltop.text.marks import held_up_text, mark_sentence, mark_tag
from verltop.ui.widgets.table_rows import layout_rows

SNAPS = synthetic_snapshots(60)
REPORT = recorded_report(SNAPS[27])  # ranks 0, 1, 3 in all_reduce; rank 2 asleep


def test_the_suspect_is_marked_while_it_runs_the_task_it_was_caught_in():
    marks = suspect_marks(REPORT)
    assert [(m.actor_id, m.task_id) for m in marks] == [("a2", "task-2-2")]
    assert set(live_marks(marks, SNAPS[28].actors, SNAPS[28].taken_at)) == {"a2"}
    assert live_marks(marks, SNAPS[30].actors, SNAPS[30].taken_at) == {}  # a new task: the mark goes
    assert live_marks(marks, SNAPS[26].actors, SNAPS[26].taken_at) == {}  # a replay before the dump


def test_marks_in_words():
    (m,) = suspect_marks(REPORT)
    assert mark_tag(m) == "▶ not in all_reduce"
    assert held_up_text([m]) == "▶ held up by rank 2"
    assert held_up_text([m, replace(m, suspect=replace(m.suspect, rank=3))]) == "▶ held up by ranks 2, 3"
    said = mark_sentence(m, "07:10:31")
    assert said.startswith("▶ suspect (dump of 07:10:31): not in all_reduce with ranks 0-1,3 of wg")


def test_rows_and_group_row_carry_the_marks():
    snap = SNAPS[28]
    rows = layout_rows(snap, "group", "rank", marks=live_marks(suspect_marks(REPORT), snap.actors, snap.taken_at))
    by_key = {r.key: r for r in rows}
    assert by_key["a2"].mark == "▶ not in all_reduce" and by_key["a0"].mark == ""
    assert "▶ held up by rank 2" in by_key["grp:group:wg"].header.plain
    assert "held up" not in by_key["grp:group:controller"].header.plain
