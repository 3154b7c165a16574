"""asyncio's deadline and cancel, kept: before Python 3.12 ``asyncio.wait_for`` swallows a cancel that comes
as its awaited call finishes (it returns the result instead: gh-86296), and a loop stopped that way runs on
while whoever stopped it waits for it forever. Every deadline in verltop goes through :func:`within`, every
stop through :func:`cancel_all`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

RECANCEL_S = 1.0  # a task still running this long after its cancel is cancelled again


async def within(aw: Awaitable[T], timeout_s: float) -> T:
    """``await aw``, cancelled and ``asyncio.TimeoutError`` past ``timeout_s``; a cancel of the caller always
    goes through (``asyncio.wait_for`` before 3.12 may return the result instead)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout_s):  # the call runs in the caller's task: no cancel between two
            return await aw
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait((task,))
        raise asyncio.TimeoutError
    return task.result()


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel these tasks and wait until each is over, cancelling again any that lets a cancel pass (a
    library's ``wait_for``); their results and errors are dropped (they were being stopped)."""
    tasks = list(tasks)  # a copy: a task being stopped may still add to the caller's list
    pending = {t for t in tasks if not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
    for t in tasks:
        if not t.cancelled():
            t.exception()  # retrieved: no "exception was never retrieved" at exit
