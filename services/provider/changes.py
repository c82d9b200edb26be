"""``GET /oai/changes``: the provider's stream of change hints, server-sent events
(docs/links.md#change-hints; what they say and when: :mod:`wiscat.provider.hints`).

Not an OAI-PMH request: a bad one gets a plain 400 with its reason, one past the bounds a 503
with Retry-After. The stream is never compressed (a gzip stream is flushed by nobody), and says
so to proxies (``X-Accel-Buffering: no``, ``Cache-Control: no-cache``). At shutdown the server
tells each stream to end (:data:`wiscat.provider.serving.AT_SHUTDOWN`): a graceful shutdown
would otherwise wait for clients that never hang up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from wiscat.provider.hints import Hints, Stream, TooManyStreams
from wiscat.provider.limits import client_key
from wiscat.provider.serving import AT_SHUTDOWN
from wiscat.provider.state import State
from wiscat.shared.oaipmh.arguments import SET_SPEC

log = logging.getLogger("wiscat.provider")

router = APIRouter(tags=["OAI-PMH"])

RETRY = b"retry: 2000\n\n"
HEARTBEAT = b": heartbeat\n\n"
# sets one stream may ask for (a harvester asks for its links' sets of one peer)
MAX_SETS = 1000


class BadStreamRequest(ValueError):
    """A request for a stream that cannot be served as asked (400)."""


def wanted_sets(pairs: list[tuple[str, str]]) -> tuple[frozenset[str] | None, str | None]:
    """The sets asked for (None: every set) and the Last-Event-ID given as a parameter;
    :class:`BadStreamRequest` for anything else."""
    sets: set[str] = set()
    last_event_id: str | None = None
    for key, value in pairs:
        if key == "set":
            if not SET_SPEC.fullmatch(value):
                raise BadStreamRequest(f"set {value!r} is not a setSpec")
            sets.add(value)
        elif key == "last-event-id" and last_event_id is None:
            last_event_id = value
        elif key == "last-event-id":
            raise BadStreamRequest("last-event-id is given twice")
        else:
            raise BadStreamRequest(f"unknown parameter {key!r}: only set and last-event-id")
    if len(sets) > MAX_SETS:
        raise BadStreamRequest(f"at most {MAX_SETS} sets a stream")
    return (frozenset(sets) if sets else None), last_event_id


@router.get(
    "/oai/changes",
    summary="A stream of change hints (server-sent events)",
    operation_id="oai_changes",
    response_class=Response,
    responses={
        200: {"description": "The stream", "content": {"text/event-stream": {}}},
        400: {"description": "A bad parameter", "content": {"text/plain": {}}},
        404: {"description": "Change hints are off (WISCAT_HINTS=false)"},
        503: {"description": "Too many streams open", "content": {"text/plain": {}}},
    },
)
async def changes(request: Request, state: State) -> Response:
    """Events naming the sets (of those asked for with ``set``, repeated; none: every set) in
    which something changed, and the datestamp up to which lists show it; never a record.
    ``Last-Event-ID`` (or ``last-event-id``) resumes."""
    hints = state.hints
    if hints is None:
        return PlainTextResponse("Change hints are off here.\n", status_code=404)
    try:
        wanted, last_event_id = wanted_sets(list(request.query_params.multi_items()))
        # any id the client sends, however wrong, gets a catch-up, never an error: a client
        # would only come back with it
        last_event_id = request.headers.get("last-event-id", last_event_id)
    except BadStreamRequest as exc:
        return PlainTextResponse(f"{exc}\n", status_code=400)
    host = request.client.host if request.client else "unknown"
    try:
        stream = hints.open(wanted, client_key(host))
    except TooManyStreams as exc:
        log.info("refused a change-hint stream to %s: %s", host, exc)
        return PlainTextResponse(
            f"{exc}; retry later.\n",
            status_code=503,
            headers={"Retry-After": str(state.settings.overload_retry_after_seconds)},
        )
    try:
        if last_event_id is not None:
            await hints.resume(stream, last_event_id)
    except BaseException:
        hints.close_stream(stream)
        raise
    return EventStream(hints, stream, state.settings.hints_heartbeat_seconds)


class EventStream(StreamingResponse):
    """A stream's events as they come, a heartbeat comment when none came for ``heartbeat``
    seconds; it ends when the client goes, or at shutdown."""

    def __init__(self, hints: Hints, stream: Stream, heartbeat: float) -> None:
        super().__init__(
            iter(()),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self.hints = hints
        self.stream = stream
        self.heartbeat = heartbeat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self.stream
        scope.setdefault("state", {})[AT_SHUTDOWN] = stream.close
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            chunk, kinds = stream.take()
            await send({"type": "http.response.body", "body": RETRY + chunk, "more_body": True})
            self.hints.sent(kinds)
            while not stream.closing:
                woken = asyncio.ensure_future(stream.wake.wait())
                try:
                    await asyncio.wait(
                        {woken, gone}, timeout=self.heartbeat, return_when="FIRST_COMPLETED"
                    )
                finally:
                    woken.cancel()
                if gone.done():
                    return
                if stream.closing:
                    break
                chunk, kinds = stream.take()
                await send(
                    {"type": "http.response.body", "body": chunk or HEARTBEAT, "more_body": True}
                )
                self.hints.sent(kinds)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client has gone (uvicorn's ClientDisconnected)
            pass
        finally:
            gone.cancel()
            self.hints.close_stream(stream)


async def _disconnect(receive: Receive) -> None:
    """Return once the client has gone (or the server has told the stream to end)."""
    with contextlib.suppress(OSError):
        while (await receive())["type"] != "http.disconnect":
            pass
