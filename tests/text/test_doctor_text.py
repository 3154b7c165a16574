"""The doctor in words: a value as a cell, the stages of a run."""

from __future__ import annotations

from verltop.text.doctor import stage_text, value_text

GIB = 1 << 30


def test_value_text():
    assert value_text("disk.tmp_free_bytes", 3 * GIB) == "3.0G"
    assert value_text("clock.offset_s", -0.0002) == "+0.000s"
    assert value_text("clock.offset_s", -1.25) == "-1.250s"
    assert value_text("torch", None) == "-"
    assert value_text("gpu.count", 8) == "8"


def test_stage_text_names_every_stage_that_says_something():
    assert stage_text("probe", 2, 3) == "2/3 answered"
    assert stage_text("connect", 0, 0) == "joining the Ray cluster (first time: a few seconds)"
    assert stage_text("done", 3, 3) is None
