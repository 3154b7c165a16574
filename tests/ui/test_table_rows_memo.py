"""The table's rows kept between layouts: a group whose members are the same row objects and carry no mark,
note or processes keeps its rows; anything that changes a group's rows lays it out again, and a layout with
the memo is always the layout without it."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import row
from verltop.analysis.marks import SuspectMark
from verltop.model import GroupWork, Snapshot, Stall, Suspect, SuspectWhy
from verltop.ui.widgets.table_rows import RowMemo, layout_rows


def snap(actors, work=()) -> Snapshot:
    return Snapshot(1.0, "x", (), tuple(actors), None, work=tuple(work))


def test_a_group_of_the_same_rows_keeps_its_rows_and_any_change_lays_it_out_again():
    ranks = [row(f"a{i}", rank=i, task=None) for i in range(4)]
    helpers = [row(f"h{i}", group=None, rank=None, role="other", task=None) for i in range(3)]
    memo = RowMemo()
    s1 = snap([*ranks, *helpers])
    first = layout_rows(s1, "group", "rank", memo=memo)
    assert first == layout_rows(s1, "group", "rank")
    again = layout_rows(snap([*ranks, *helpers]), "group", "rank", memo=memo)
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))  # the very rows

    stalled = replace(ranks[2], stalls=(Stall("age", running_s=900.0, limit_s=600.0),))
    s3 = snap([*ranks[:2], stalled, ranks[3], *helpers])
    third = layout_rows(s3, "group", "rank", memo=memo)
    assert third == layout_rows(s3, "group", "rank")
    assert "1 stalled" in third[0].header.plain  # the group's header counts it
    assert third[-4] is first[-4]  # the helpers' group, unchanged, kept its rows

    s4 = snap([*ranks[:2], stalled, ranks[3], *helpers], work=[GroupWork("wg", pending=3)])
    fourth = layout_rows(s4, "group", "rank", memo=memo)
    assert fourth == layout_rows(s4, "group", "rank") and "3 pending" in fourth[0].header.plain

    suspect = Suspect("a1", "wg", 1, (SuspectWhy("not_in", group="wg", op="all_reduce"),))
    mark = SuspectMark(actor_id="a1", task_id=None, suspect=suspect, process=None, taken_at=0.0)
    fifth = layout_rows(s4, "group", "rank", marks={"a1": mark}, memo=memo)
    assert fifth == layout_rows(s4, "group", "rank", marks={"a1": mark})
    assert next(r for r in fifth if r.actor_id == "a1").mark  # a mark on an unchanged group: laid out again
    sixth = layout_rows(s4, "group", "rank", memo=memo)
    assert sixth == layout_rows(s4, "group", "rank") and not next(r for r in sixth if r.actor_id == "a1").mark

    fewer = snap([*ranks, *helpers[:2]])
    assert layout_rows(fewer, "group", "rank", memo=memo) == layout_rows(fewer, "group", "rank")
