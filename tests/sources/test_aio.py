"""A deadline that never swallows a cancel, and a stop that ends: before Python 3.12 ``asyncio.wait_for``
returns its call's result when the cancel comes as the call finishes, and the loop that was being stopped runs
on (a monitor's ``stop`` once waited for such a poll loop until the test's 900-s limit)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from verltop.sources import aio
from verltop.sources.aio import cancel_all, within

PKG = Path(__file__).parent.parent.parent / "verltop"


async def _cancel_as_it_finishes(deadline, turns: int) -> str:
    """Cancel a task ``turns`` loop turns after its awaited call (behind ``deadline``) was given its answer:
    'result' (the cancel lost), 'cancelled', or 'done' (the task ended before the cancel)."""
    gate = asyncio.get_running_loop().create_future()

    async def call() -> int:
        return await gate

    async def poll() -> str:
        await deadline(call(), 5.0)
        return "result"

    task = asyncio.create_task(poll())
    await asyncio.sleep(0)  # the poll waits on its call
    gate.set_result(1)
    for _ in range(turns):
        await asyncio.sleep(0)
    if task.done():
        return "done"
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


async def test_a_cancel_that_comes_as_the_call_finishes_goes_through():
    assert {await _cancel_as_it_finishes(within, n) for n in range(4)} <= {"cancelled", "done"}


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the cancel from 3.12 on")
async def test_wait_for_before_3_12_swallows_that_cancel():
    """What ``within`` is for: the same moments through asyncio's own deadline."""
    assert "result" in {await _cancel_as_it_finishes(asyncio.wait_for, n) for n in range(4)}


async def test_past_its_deadline_the_call_is_cancelled_and_a_timeout_raised():
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(asyncio.TimeoutError):
        await within(slow(), 0.05)
    assert cancelled.is_set()
    assert await within(asyncio.sleep(0, "ok"), 5.0) == "ok"


async def test_cancel_all_stops_a_task_that_lets_its_first_cancel_pass(monkeypatch):
    """A loop whose cancel a library lost (the fault above, made here by hand) is cancelled again."""
    monkeypatch.setattr(aio, "RECANCEL_S", 0.05)
    laps = []

    async def loop() -> None:
        lost = False
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost = True  # the first cancel let pass, as wait_for does
            laps.append(1)

    async def fails() -> None:
        raise RuntimeError("a poll's bug")

    tasks = [asyncio.create_task(loop()), asyncio.create_task(fails())]
    await asyncio.sleep(0.03)
    await within(cancel_all(tasks), 5.0)
    assert all(t.done() for t in tasks) and tasks[0].cancelled() and laps


def test_no_deadline_in_verltop_goes_through_asyncio_wait_for():
    users = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "wait_for(" in p.read_text()]
    assert users == []
