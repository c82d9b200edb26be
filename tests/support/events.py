"""A bare client of a server-sent event stream (the provider's change hints), over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Event:
    kind: str  # the event field; "comment" for a comment line (a heartbeat)
    data: str = ""
    id: str | None = None
    raw: bytes = b""

    @property
    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class EventReader:
    response: aiohttp.ClientResponse
    first_line: bytes = b""
    seen: list[Event] = field(default_factory=list)

    async def next(self, timeout: float = 5.0, *, comments: bool = False) -> Event:
        """The next event (a comment line too with ``comments``); TimeoutError if none comes."""
        async with asyncio.timeout(timeout):
            while True:
                event = await self._read()
                self.seen.append(event)
                if event.kind != "comment" or comments:
                    return event

    async def none_within(self, seconds: float) -> None:
        """Assert that no event (comments aside) comes within ``seconds``."""
        with contextlib.suppress(TimeoutError):
            event = await self.next(seconds)
            raise AssertionError(f"an event came: {event}")

    async def _read(self) -> Event:
        event = Event(kind="message")
        raw = b""
        while True:
            line = await self.response.content.readline()
            if not line:
                raise ConnectionError("the stream ended")
            raw += line
            text = line.decode().rstrip("\n")
            if not self.first_line:
                self.first_line = line
            if text == "":
                if event.data:  # a block without data (retry: alone) is no event
                    event.raw = raw
                    return event
                event = Event(kind="message")
                raw = b""
                continue
            if text.startswith(":"):
                return Event(kind="comment", data=text[1:].strip(), raw=raw)
            name, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event.kind = value
            elif name == "data":
                event.data = value
            elif name == "id":
                event.id = value


@contextlib.asynccontextmanager
async def open_stream(
    url: str,
    *,
    sets: tuple[str, ...] = (),
    headers: dict[str, str] | None = None,
    params: tuple[tuple[str, str], ...] = (),
) -> AsyncIterator[EventReader]:
    """A stream of ``url`` for ``sets`` (and ``params`` besides); asserts it opened (200)."""
    query = [("set", s) for s in sets] + list(params)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with (
        aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session,
        session.get(url, params=query, headers=headers or {}) as response,
    ):
        assert response.status == 200, (response.status, await response.text())
        yield EventReader(response)
