"""Cells: how numbers and moments are written, the same in the TUI, the text output and the JSON."""

from __future__ import annotations

from verltop.text.cells import age, duration, pct, plural, ratio, size, size_short, table, utc_stamp, utc_time

T = 1795922778.0  # 2026-11-29 03:26:18 UTC


def test_sizes_are_1024_based_and_short_ones_fit_four_characters():
    assert [size(n) for n in (None, 512, 3 * 1024, 423 * 2**20, 3.3 * 2**30)] == ["-", "512B", "3K", "423.0M", "3.3G"]
    assert [size_short(n) for n in (801 * 2**20, 1.5 * 2**30, 140 * 2**30)] == ["801M", "1.5G", "140G"]


def test_durations_and_ages():
    assert [duration(s) for s in (None, 0.4, 13, 65, 2 * 3600 + 180, 3 * 86400 + 4 * 3600)] == \
        ["-", "0.4s", "13s", "1m05s", "2h03m", "3d04h"]
    assert duration(-3) == "0s" and age(65.9) == "1m05s" and age(None) == "-"


def test_percentages_ratios_and_plurals():
    assert (pct(None), pct(42.4)) == ("-", "42%")
    assert [ratio(r) for r in (None, 1.5, 12.2, 1000)] == ["many×", "1.5×", "12×", ">999×"]
    assert (plural(1, "node"), plural(3, "node")) == ("1 node", "3 nodes")


def test_utc_moments_for_files_and_for_people():
    assert utc_stamp(T) == "20261129T032618Z"
    assert utc_time(T) == "2026-11-29 03:26:18 UTC"


def test_table_pads_columns_to_their_widest_cell():
    assert table(["A", "BB"], [["xyz", "1"], ["", "22"]]) == "A    BB\nxyz  1\n     22"
