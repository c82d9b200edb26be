"""How a command stops: on SIGINT, SIGTERM and SIGHUP, tidily."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("wiscat")


def stop_signals() -> list[signal.Signals]:
    """The signals that stop a command cleanly: SIGINT, SIGTERM and SIGHUP (its terminal gone,
    whose default ended the process on the spot, an embedded PostgreSQL left running), unless
    SIGHUP is ignored, as ``nohup`` asks."""
    stops = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        stops.append(signal.SIGHUP)
    return stops


def on_signals(callback: Callable[[], None]) -> None:
    """``callback`` on each of :func:`stop_signals`, logged (a service that stops says why)."""
    loop = asyncio.get_running_loop()

    def received(sig: signal.Signals) -> None:
        log.info("%s received: stopping", sig.name)
        callback()

    for sig in stop_signals():
        loop.add_signal_handler(sig, received, sig)


async def stopped_by_signals(command: Coroutine[Any, Any, int]) -> int:
    """``command``, cancelled by SIGTERM (and SIGHUP, see :func:`stop_signals`) as asyncio's
    runner cancels it on SIGINT: its cleanup runs (a harvest records its run as stopped and gives
    its link's lease back, a check removes its temporary files) where the signal's default would
    end the process on the spot. A service command takes them over for its own graceful stop."""
    task = asyncio.current_task()
    assert task is not None
    for sig in stop_signals():
        if sig is not signal.SIGINT:
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel, sig.name)
    return await command
