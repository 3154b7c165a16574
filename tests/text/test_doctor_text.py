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


def test_a_node_is_named_once_in_the_header():
    """The label (its IP) on the first line; under it the hostname only when it says more, and "(head)"."""
    from tests.analysis.test_doctor import node
    from verltop.analysis.doctor import build_report
    from verltop.text.doctor import doctor_text

    r = build_report([node(1, hostname="10.0.0.1"), node(2)], now=0.0, show=value_text, elapsed_s=1.0)
    first, second = doctor_text(r).splitlines()[2:4]
    assert first.split()[1:] == ["10.0.0.1", "10.0.0.2"]
    assert second.split() == ["(head)", "gpu-2"]
