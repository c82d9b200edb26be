"""Tasks whose outcome nobody waits for any more: a request sent ahead and no longer wanted,
a page read ahead that expired, database work past its deadline."""

from __future__ import annotations

import asyncio
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
