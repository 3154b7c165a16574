"""The tests' one wait helper: returns the first truthy value; on the deadline, says what it waited for and
what it saw last."""

from __future__ import annotations

import pytest

from tests.wait import wait_until, wait_until_async


def test_returns_the_first_truthy_value():
    seen = iter([0, None, [], {"n": 3}])
    assert wait_until(lambda: next(seen), 1, "a value", step=0.001) == {"n": 3}


def test_the_deadline_names_the_event_and_the_last_value():
    n = iter(range(10_000))
    with pytest.raises(AssertionError, match=r"^timed out after 0.05 s waiting for the answer; last seen: ") as e:
        wait_until(lambda: next(n) < 0, 0.05, "the answer", step=0.01)
    assert str(e.value).endswith("last seen: False")
    with pytest.raises(AssertionError, match="waiting for rows; last seen: '3 rows'"):
        wait_until(lambda: 0, 0.01, "rows", step=0.01, detail=lambda: "3 rows")


async def test_async_twin_awaits_a_coroutine_condition():
    calls = []

    async def ready():
        calls.append(1)
        return len(calls) >= 3 and "ready"

    assert await wait_until_async(ready, 1, "ready", step=0.001) == "ready"
    with pytest.raises(AssertionError, match=r"timed out after 0\.02 s waiting for never"):
        await wait_until_async(lambda: None, 0.02, "never", step=0.005)
