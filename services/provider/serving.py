"""The provider's HTTP server: uvicorn, with a deadline for each request's head.

uvicorn waits for a request's line and headers as long as a client takes to send them, and for
the first request of a connection that sends nothing at all: its keep-alive timeout starts only
after a response. A harvester that died mid-request on a network that never said so, or a
client that sends its headers a byte a minute, held a connection (and its file descriptor) for
the life of the process. Here a connection waiting for a request's head is closed once
``header_timeout`` seconds pass from the connection's start, or from the first byte of a
request after the first, with no whole head; a request being answered is not timed by it (the
provider's send timeout guards that).

A request target (the request line's URL) is read up to :data:`MAX_REQUEST_TARGET` bytes and
handed to the app as sent: its query is everything after the first ``?``, a raw ``#`` and what
follows it included (RFC 9112 §3.2 allows no ``#`` in a target; uvicorn cut it off, so
``identifier=a#b`` asked for ``a``), for the endpoint to refuse. uvicorn kept a target of any
length in memory while it came, and refused one over 64 KiB with a plain-text 400 (httptools'
URL parser counts in 16 bits); past the bound the answer is 414 and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# The key, in a request's scope["state"], of what the app would have done when the server shuts
# down while the request is answered: a stream that never ends (the change hints,
# wiscat.provider.changes) is told to end there, or a graceful shutdown would wait for it.
AT_SHUTDOWN = "wiscat.at_shutdown"

# Set in the scope of a GET that was a HEAD (wiscat.provider.app.HeadAsGet): a route that never
# ends its body (the change hints) answers it with its head alone.
HEAD = "wiscat.head"

# bytes of request target read: a resumptionToken or identifier of hundreds of kilobytes still
# gets its OAI-PMH answer
MAX_REQUEST_TARGET = 1024 * 1024


class QuietServer(uvicorn.Server):
    """uvicorn, minus its own signal handling: the command owns the stop signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def provider_config(app: Any, header_timeout: float, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` with the deadline on request heads."""
    return uvicorn.Config(app, http=head_deadline_protocol(header_timeout), **options)


class TargetAsSent(HttpToolsProtocol):
    """uvicorn's httptools protocol, reading a request target of at most
    :data:`MAX_REQUEST_TARGET` bytes and giving the app its query as sent."""

    _target_too_long = False

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > MAX_REQUEST_TARGET:
            self._target_too_long = True
            raise ValueError("request target too long")  # the parser stops: a 400, below
        super().on_url(url)

    def send_400_response(self, msg: str) -> None:
        if not self._target_too_long:
            super().send_400_response(msg)
            return
        text = f"A request target may be at most {MAX_REQUEST_TARGET} bytes.\n"
        self.transport.write(
            b"HTTP/1.1 414 URI Too Long\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(text), text.encode("ascii"))
        )
        self.transport.close()

    def shutdown(self) -> None:
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete
        scope = getattr(self, "scope", None) or {}
        at_shutdown = (scope.get("state") or {}).get(AT_SHUTDOWN) if answering else None
        super().shutdown()
        if at_shutdown is not None:
            at_shutdown()

    def on_headers_complete(self) -> None:
        target = self.url
        before, asks, query = target.partition(b"?")
        self.url = before  # the path, for uvicorn to parse: the query is taken as sent
        try:
            super().on_headers_complete()
        finally:
            self.url = target
        if asks and "query_string" in self.scope:  # not a websocket upgrade, left unparsed
            self.scope["query_string"] = query


def head_deadline_protocol(header_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head is late, its
    request target bounded and passed on as sent (:class:`TargetAsSent`)."""

    class HeadDeadline(TargetAsSent):
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
