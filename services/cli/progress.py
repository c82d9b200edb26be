"""Progress of long work (``wiscat ingest`` of a large folder, ``wiscat check`` of a large set):
a line on stderr every ``WISCAT_PROGRESS_SECONDS``, plain text that a log and grep can read.
The result itself is printed once, at the end, by the command."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable


def per_second(count: int, seconds: float) -> str:
    """``count`` over ``seconds`` as a rate: "1,840 a second"."""
    return f"{count / seconds if seconds > 0 else 0:,.0f} a second"


@contextlib.asynccontextmanager
async def progress(every: float, line: Callable[[float], str]) -> AsyncIterator[None]:
    """While the block runs, print ``line(seconds since it began)`` on stderr every ``every``
    seconds (none if 0). The line is made when printed, from what the work has done by then."""
    if every <= 0:
        yield
        return
    began = time.monotonic()

    async def tick() -> None:
        while True:
            await asyncio.sleep(every)
            print(line(time.monotonic() - began), file=sys.stderr, flush=True)

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])  # gone before the result is printed; raises nothing
