"""Wait for an event, never for a fixed time: poll a condition with a short step until it holds or a deadline
passes, then fail saying what was awaited and the last value seen.

    wait_until(lambda: path.exists(), 10, "the incident file")
    snap = await wait_until_async(lambda: mon.latest, 30, "a first snapshot")
    rows = await pilot_wait(pilot, lambda: t.row_count >= 5 and t.row_count, 10, "five rows")

Each returns the condition's first truthy value. ``cond`` may be a coroutine function for the async twins.
``detail`` (optional) is called once on failure for a more telling picture than the last value.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from verltop.sources.proc_stat import read_stat


def _fail(timeout: float, what: str, last: Any, detail: Callable[[], Any] | None) -> AssertionError:
    seen = detail() if detail is not None else last
    text = repr(seen)
    if len(text) > 2000:
        text = text[:2000] + "…"
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}; last seen: {text}")


def wait_until(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.1,
               detail: Callable[[], Any] | None = None) -> Any:
    """Call ``cond`` every ``step`` seconds until it returns something truthy (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        last = cond()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _fail(timeout, what, last, detail)
        time.sleep(step)


async def _value(cond: Callable[[], Any]) -> Any:
    v = cond()
    return await v if inspect.isawaitable(v) else v


async def _poll(cond: Callable[[], Any], timeout: float, what: str, step: float,
                detail: Callable[[], Any] | None, pause: Callable[[float], Awaitable[Any]]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        last = await _value(cond)
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _fail(timeout, what, last, detail)
        await pause(step)


async def wait_until_async(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.1,
                           detail: Callable[[], Any] | None = None) -> Any:
    """:func:`wait_until` on the event loop: other tasks (a monitor, a fake dashboard) run between polls."""
    return await _poll(cond, timeout, what, step, detail, asyncio.sleep)


async def pilot_wait(pilot: Any, cond: Callable[[], Any], timeout: float, what: str, step: float = 0.1,
                     detail: Callable[[], Any] | None = None) -> Any:
    """:func:`wait_until` in a Textual test: ``pilot.pause`` between polls so the app refreshes and repaints."""
    return await _poll(cond, timeout, what, step, detail, pilot.pause)


def proc_state(pid: int) -> str | None:
    """``"live"``, ``"Z"`` (dead, not reaped yet: its /proc entry stays) or None when it is gone: what a wait
    for a killed process looks at (``proc_state(pid) in (None, "Z")``). /proc/PID/stat is read by verltop's own
    parser, which answers None for a dead process."""
    if read_stat(pid) is not None:
        return "live"
    return "Z" if Path(f"/proc/{pid}").exists() else None
