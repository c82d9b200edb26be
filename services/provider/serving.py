"""The provider's HTTP server: uvicorn, with a deadline for each request's head.

uvicorn waits for a request's line and headers as long as a client takes to send them, and for
the first request of a connection that sends nothing at all: its keep-alive timeout starts only
after a response. A harvester that died mid-request on a network that never said so, or a
client that sends its headers a byte a minute, held a connection (and its file descriptor) for
the life of the process. Here a connection waiting for a request's head is closed once
``header_timeout`` seconds pass from the connection's start, or from the first byte of a
request after the first, with no whole head; a request being answered is not timed by it (the
provider's send timeout guards that).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def provider_config(app: Any, header_timeout: float, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` with the deadline on request heads."""
    return uvicorn.Config(app, http=head_deadline_protocol(header_timeout), **options)


def head_deadline_protocol(header_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head is late."""

    class HeadDeadline(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # a later request of the connection: its own deadline
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(header_timeout, self._late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _late(self) -> None:
            self._deadline = None
            if self.cycle is not None and not self.cycle.response_complete:
                # a request pipelined behind one still being answered waits for it: not late
                self._arm()
            elif not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline
