"""The coercions every parser uses: what is cleanly a number becomes one, anything else ``None``."""

from __future__ import annotations

import pytest

from verltop.convert import to_float, to_int, to_str


class _F(float):
    pass


@pytest.mark.parametrize(("v", "want"), [
    (3, 3.0), (2.5, 2.5), (-0.0, 0.0), (_F(1.5), 1.5), ("4.25", 4.25), ("7", 7.0),
    (True, None), (False, None), (float("nan"), None), (float("inf"), None), (-float("inf"), None),
    (_F("nan"), None), ("nan", None), ("inf", None), ("x", None), (None, None), ([1], None), (10**400, None),
])
def test_to_float(v, want):
    got = to_float(v)
    assert got == want and (want is None or type(got) is float), (v, got)


@pytest.mark.parametrize(("v", "want"), [
    (3, 3), (-7, -7), (2.9, 2), ("12", 12), ("-12", -12), ("0x1f", 31), ("3.5", 3), (_F(4.0), 4),
    (True, None), (float("nan"), None), (float("inf"), None), (1e19, None), ("1e19", None), ("x", None), (None, None),
])
def test_to_int(v, want):
    assert to_int(v) == want and (want is None or type(to_int(v)) is int), v


def test_to_str():
    assert (to_str("a"), to_str(3), to_str(None), to_str([1])) == ("a", "3", None, None)
