"""Tasks whose outcome nobody waits for any more: a request sent ahead and no longer wanted,
a page read ahead that expired, database work past its deadline; and a wait on an event
bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


def abandon(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` without waiting for it to end; whatever it ends with is dropped."""
    task.cancel()
    forget(task)


def forget(task: asyncio.Future[Any]) -> None:
    """Drop whatever ``task`` ends with, so that asyncio does not report a failure as never
    retrieved."""
    task.add_done_callback(_retrieved)


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def wait_for_event(event: asyncio.Event, seconds: float | None) -> bool:
    """Wait until ``event`` is set or ``seconds`` have passed (None: no limit); whether it was
    set. Unlike ``asyncio.wait_for`` in Python 3.11, it makes no task for each wait: a loop
    that waits so every heartbeat would make one a heartbeat for the life of the process."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
