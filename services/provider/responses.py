"""How the provider answers over HTTP: the arguments of an OAI-PMH request, gzip when the client
takes it, list pages streamed with their length to clients that must keep reading, and the 503
answers (every list slot taken, the database unavailable), each with its Retry-After.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from isal import isal_zlib
from starlette.types import Send

from wiscat.provider.lists import ListPage
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.oaipmh.errors import BadArgument

log = logging.getLogger("wiscat.provider")

XML_TYPE = "text/xml; charset=utf-8"
# A POST body no OAI-PMH request comes near (its arguments are a verb, a prefix, a set, dates,
# an identifier or a token of ours, a few hundred bytes); one larger is refused with 413 by
# limits.BodyLimit, unread (§3.1.2.2: transport errors are HTTP statuses).
MAX_POST_BYTES = 64 * 1024
# seconds a harvester is asked to wait while the database is unavailable
UNAVAILABLE_RETRY_AFTER = 30


def query_pairs(raw: str) -> list[tuple[str, str]]:
    """The arguments of a query string (or a form body), in order, repeats kept."""
    try:
        return parse_qsl(raw, keep_blank_values=True, strict_parsing=False, errors="strict")
    except UnicodeDecodeError as exc:
        raise BadArgument("the request is not valid UTF-8") from exc


async def request_pairs(request: Request) -> list[tuple[str, str]]:
    """The arguments in order, repeats kept, from the query string (GET) or the form body (POST)."""
    if request.method == "POST":
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise BadArgument("POST requests must be application/x-www-form-urlencoded (§3.1.1.2)")
        body = await request.body()  # at most MAX_POST_BYTES
        try:
            return query_pairs(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BadArgument("the request is not valid UTF-8") from exc
    # as sent: Starlette's request.url cuts a raw '#' and what follows as a fragment
    query = request.scope["query_string"]
    if b"#" in query:
        # a client that sent a '#' meant it in an argument or as a fragment: either way the
        # arguments are not what it asked for (identifier=a#b would be a, another record)
        raise BadArgument(
            "the request's query holds a raw '#' (no URL may): "
            "a '#' in an argument is sent percent-encoded, as %23"
        )
    try:
        return query_pairs(query.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadArgument("the request is not valid UTF-8") from exc


def log_unavailable(what: str, exc: DatabaseUnavailable) -> None:
    """One warning line for a request answered 503 because the database is unavailable."""
    log.warning("%s answered 503: the database is unavailable (%s: %s)", what, exc.kind, exc)


def unavailable_text() -> Response:
    """/oai's answer while the database is down, restarting or not answering, which harvesters
    wait out (the repository guidelines, §6.1: "during database updates or other short
    outages")."""
    return Response(
        status_code=503,
        headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)},
        content="The catalogue's database is unavailable; retry later.\n",
        media_type="text/plain",
    )


def unavailable_json() -> JSONResponse:
    """The dashboard's, admin API's and registry's answer while the database is unavailable."""
    return JSONResponse(
        {"detail": "the database is unavailable; retry later"},
        status_code=503,
        headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)},
    )


def overloaded_text(retry_after: int) -> Response:
    """/oai's answer to a list asked for while every list slot is taken (§3.1.2.2 allows a 503
    for flow control): come back in ``retry_after`` seconds
    (:attr:`Settings.overload_retry_after_seconds`)."""
    return Response(
        status_code=503,
        headers={"Retry-After": str(retry_after)},
        content="Too many list requests in progress; retry later.\n",
        media_type="text/plain",
    )


def accepts_gzip(request: Request) -> bool:
    """Whether the client takes gzip (RFC 9110 §12.5.3): named (or ``x-gzip``), or else ``*``,
    with a weight above 0; ``gzip;q=0`` refuses it."""
    weights: dict[str, float] = {}
    for item in request.headers.get("accept-encoding", "").split(","):
        coding, *parameters = (part.strip() for part in item.split(";"))
        weight = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        weights.setdefault(coding.lower(), weight)
    for coding in ("gzip", "x-gzip", "*"):
        if coding in weights:
            return weights[coding] > 0
    return False


def _compressor() -> Any:
    # Intel's ISA-L deflate at level 1: about eight times faster than zlib's level 1 on
    # metadata pages, and its output smaller (docs/benchmarks.md).
    return isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)


def gzipped(body: bytes) -> bytes:
    """``body`` compressed as gzip (what an answer to a client that takes it carries)."""
    compressor = _compressor()
    packed: bytes = compressor.compress(body) + compressor.flush()
    return packed


# Every answer of /oai depends on Accept-Encoding, so every one says so to caches (RFC 9110 §12.5.5)
_VARY = {"Vary": "Accept-Encoding"}
_GZIP_HEADERS = {"Content-Encoding": "gzip", **_VARY}


def respond(request: Request, chunks: list[bytes]) -> Response:
    """A small answer, whole."""
    body = b"".join(chunks)
    if accepts_gzip(request):
        compressor = _compressor()
        return Response(
            compressor.compress(body) + compressor.flush(),
            media_type=XML_TYPE,
            headers=_GZIP_HEADERS,
        )
    return Response(body, media_type=XML_TYPE, headers=_VARY)


async def respond_page(
    request: Request, page: ListPage, on_done: Callable[[], None], send_timeout: float
) -> Response:
    """A list page, sent with its length (no chunked framing to copy it through) in its few
    pieces, none joined to another. Its list slot is freed once the page is sent, or the client
    has gone."""
    gzip = accepts_gzip(request)
    pieces: Iterator[bytes] = iter(page.pieces)
    size = sum(map(len, page.pieces))
    if gzip:
        # compressed whole first, to know its length (a tenth of the page, or less)
        compressor = _compressor()
        packed = [compressor.compress(piece) for piece in pieces]
        packed.append(compressor.flush())
        pieces, size = iter(packed), sum(map(len, packed))

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            for piece in pieces:
                yield piece
        finally:
            page.slot.release()
            on_done()

    # The first piece is taken here: a started generator is always closed by the event loop,
    # even when the client goes away before the body is sent, so the slot is always freed.
    stream = body()
    first = await anext(stream)

    async def whole() -> AsyncIterator[bytes]:
        try:
            yield first
            async for piece in stream:
                yield piece
        finally:
            await stream.aclose()

    headers = {"Content-Length": str(size), **(_GZIP_HEADERS if gzip else _VARY)}
    return PageResponse(
        whole(),
        headers,
        send_timeout=send_timeout,
        client=request.client.host if request.client else "a client",
    )


class PageResponse(StreamingResponse):
    """A list page whose client must take each piece (at most the page's records, a few MB)
    within ``send_timeout`` seconds.

    A client that stops reading (a frozen process, a half-open connection) would otherwise hold
    the page, and its list slot, for as long as the connection lives: hours, or for ever, and
    with :attr:`Settings.max_concurrent_lists` of them every other harvester gets 503. Such a
    client is cut off: its page is dropped, its slot freed, and its connection closed (by the
    server, as for any response left unfinished; :data:`CUT_OFF` keeps that out of the log).
    """

    def __init__(
        self,
        pieces: AsyncIterator[bytes],
        headers: dict[str, str],
        *,
        send_timeout: float,
        client: str,
    ) -> None:
        super().__init__(pieces, media_type=XML_TYPE, headers=headers)
        self.send_timeout = send_timeout
        self.client = client

    async def stream_response(self, send: Send) -> None:
        start = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        await send(start)
        async for piece in self.body_iterator:
            try:
                async with asyncio.timeout(self.send_timeout):
                    # the server waits here until the client has taken the piece before
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            except TimeoutError:
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                log.warning(
                    "%s took no piece of a list page in %g s: cut off, its list slot freed",
                    self.client,
                    self.send_timeout,
                )
                CUT_OFF.expect()
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _CutOff(logging.Filter):
    """Drops the error the server logs for a response :class:`PageResponse` cut off on purpose
    (it closes the connection of any response left unfinished, and says so): once per cut-off,
    within a few seconds of it, so that no later error of that kind goes unseen."""

    MESSAGE = "ASGI callable returned without completing response."

    def __init__(self) -> None:
        super().__init__()
        self.pending: collections.deque[float] = collections.deque()

    def expect(self) -> None:
        self.pending.append(time.monotonic() + 5.0)

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        while self.pending and self.pending[0] < now:
            self.pending.popleft()
        if self.pending and record.getMessage() == self.MESSAGE:
            self.pending.popleft()
            return False
        return True


#: Installed on the server's logger by :func:`wiscat.provider.app.create_app`.
CUT_OFF = _CutOff()
