"""``wait_for_event``: a wait bounded in time that leaves no task behind."""

from __future__ import annotations

import asyncio

from wiscat.shared.tasks import wait_for_event


async def test_it_says_whether_the_event_came_before_the_time() -> None:
    event = asyncio.Event()
    assert await wait_for_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_for_event(event, 5) is True
    assert await wait_for_event(event, None) is True  # set already: no wait


async def test_a_thousand_waits_make_no_task() -> None:
    # a loop waiting every heartbeat with asyncio.wait_for made a task each time in Python 3.11
    event = asyncio.Event()
    made: list[object] = []
    loop = asyncio.get_running_loop()
    default = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: object, **kwargs: object) -> object:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)  # type: ignore[arg-type]

    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        for _ in range(1000):
            await wait_for_event(event, 0)
    finally:
        loop.set_task_factory(default)
    assert made == []
