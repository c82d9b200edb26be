"""The OAI-PMH 2.0 endpoint: ``GET|POST /oai``.

Thin by design: arguments are checked by :mod:`shared.oaipmh.arguments`, rows come from
:mod:`shared.db.records`, bytes from :mod:`shared.oaipmh.render`. Every answer, errors included, is
an OAI-PMH document with HTTP 200 (§3.6); only overload gets a 503 with Retry-After (§3.1.2.2 allows
it for flow control).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from isal import isal_zlib
from starlette.types import Send

from services.provider.characters import servable, servable_rows
from services.provider.metrics import ProviderMetrics
from services.provider.readahead import ListPageItems, PageKey, ReadAhead
from shared import crosswalk
from shared.db import records as store
from shared.db.errors import UNAVAILABLE
from shared.db.pool import Pool, answered
from shared.oaipmh import render
from shared.oaipmh.arguments import OAIRequest, echo_allowed, parse_request
from shared.oaipmh.dates import Granularity, until_upper_bound
from shared.oaipmh.errors import (
    BadArgument,
    BadResumptionToken,
    IdDoesNotExist,
    NoRecordsMatch,
    OAIError,
)
from shared.oaipmh.hierarchy import in_tree, minimal, with_ancestors
from shared.oaipmh.tokens import ListPosition, TokenCodec
from shared.settings import UNION_SET, Settings

log = logging.getLogger("wiscat.provider")

router = APIRouter()

XML_TYPE = "text/xml; charset=utf-8"
# how long a page read ahead waits for its request (a client that stopped midway)
READ_AHEAD_SECONDS = 60.0
# A POST body no OAI-PMH request comes near (its arguments are a verb, a prefix, a set, dates,
# an identifier or a token of ours, a few hundred bytes); one larger is refused with 413 by
# app.BodyLimit, unread (§3.1.2.2: transport errors are HTTP statuses).
MAX_POST_BYTES = 64 * 1024
# a list held back this long by a write transaction in progress is worth a warning, at most
# one a minute (HORIZON_WARN_EVERY)
HORIZON_WARN_LAG = 60.0
HORIZON_WARN_EVERY = 60.0
# seconds a harvester is asked to wait while the database is unavailable
UNAVAILABLE_RETRY_AFTER = 30

# prefix -> (schema, namespace); iso19139 is the stored record as is (WIS guidelines, seed 002),
# oai_dc is the crosswalk every repository must offer (OAI-PMH 2.0 §3.4).
FORMATS: dict[str, tuple[str, str]] = {
    "iso19139": ("http://www.isotc211.org/2005/gmd/gmd.xsd", "http://www.isotc211.org/2005/gmd"),
    "oai_dc": (
        "http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
        "http://www.openarchives.org/OAI/2.0/oai_dc/",
    ),
}


@dataclass
class ProviderState:
    """What the endpoint needs, built once in the app's lifespan."""

    settings: Settings
    pool: Pool
    codec: TokenCodec
    metrics: ProviderMetrics
    lists_in_progress: int = 0
    horizon_warned: float = -HORIZON_WARN_EVERY  # (time.monotonic) last warned of the horizon
    read_ahead: ReadAhead = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.read_ahead = ReadAhead(
            functools.partial(_read_page, self),
            capacity=self.settings.read_ahead_pages,
            ttl=READ_AHEAD_SECONDS,
            observe=lambda outcome: self.metrics.read_ahead.labels(outcome).inc(),
        )


class Overloaded(Exception):
    pass


def _pairs(raw: str) -> list[tuple[str, str]]:
    try:
        return parse_qsl(raw, keep_blank_values=True, strict_parsing=False, errors="strict")
    except UnicodeDecodeError as exc:
        raise BadArgument("the request is not valid UTF-8") from exc


def log_unavailable(what: str, exc: Exception) -> None:
    """One warning line for a request answered 503 because the database is unavailable."""
    log.warning(
        "%s answered 503: the database is unavailable (%s: %s)", what, type(exc).__name__, exc
    )


async def request_pairs(request: Request) -> list[tuple[str, str]]:
    """The arguments in order, repeats kept, from the query string (GET) or the form body (POST)."""
    if request.method == "POST":
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise BadArgument("POST requests must be application/x-www-form-urlencoded (§3.1.1.2)")
        body = await request.body()  # at most MAX_POST_BYTES
        try:
            return _pairs(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BadArgument("the request is not valid UTF-8") from exc
    return _pairs(request.url.query)


# one route per method, each with an operation id of its own in the OpenAPI schema (HEAD is a GET:
# app.HeadAsGet)
@router.post("/oai", operation_id="oai_post")
@router.get("/oai", operation_id="oai_get")
async def oai_endpoint(request: Request) -> Response:
    state: ProviderState = request.app.state.provider
    started = time.perf_counter()
    response_date = datetime.now(UTC)
    base_url = state.settings.base_url
    verb_label = "none"
    pairs: list[tuple[str, str]] = []
    try:
        pairs = await request_pairs(request)
        verbs = [v for k, v in pairs if k == "verb"]
        verb_label = verbs[0] if len(verbs) == 1 and verbs[0] in render.VERBS else "invalid"
        asked = parse_request(pairs, formats=FORMATS)
        seconds = state.settings.database_timeout_seconds
        body = await answered(answer(state, asked, response_date), seconds)
    except Overloaded:
        state.metrics.overloaded.inc()
        state.metrics.requests.labels(verb_label, "overloaded").inc()
        return Response(
            status_code=503,
            headers={"Retry-After": "10"},
            content="Too many list requests in progress; retry later.\n",
            media_type="text/plain",
        )
    except UNAVAILABLE as exc:
        # the database is down, restarting or not answering: a 503 with Retry-After, which
        # harvesters wait out
        # (the repository guidelines, §6.1: "during database updates or other short outages")
        state.metrics.requests.labels(verb_label, "unavailable").inc()
        log_unavailable(verb_label, exc)
        return Response(
            status_code=503,
            headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)},
            content="The catalogue's database is unavailable; retry later.\n",
            media_type="text/plain",
        )
    except OAIError as error:
        state.metrics.requests.labels(verb_label, error.code).inc()
        # §3.2: after badVerb or badArgument the request element carries no attributes.
        # pairs passed the syntax checks when the error is not badVerb/badArgument
        echo = dict(pairs) if echo_allowed(error) else None
        document = render.render_error(response_date, base_url, echo, [error])
        state.metrics.latency.labels(verb_label).observe(time.perf_counter() - started)
        return _respond(request, [document])
    state.metrics.requests.labels(verb_label, "ok").inc()

    def observe() -> None:
        state.metrics.latency.labels(verb_label).observe(time.perf_counter() - started)

    if isinstance(body, list):
        observe()
        return _respond(request, body)
    return await _respond_page(request, body, observe)


def _gzip(request: Request) -> bool:
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


# Every answer of /oai depends on Accept-Encoding, so every one says so to caches (RFC 9110 §12.5.5)
_VARY = {"Vary": "Accept-Encoding"}
_GZIP_HEADERS = {"Content-Encoding": "gzip", **_VARY}


def _respond(request: Request, chunks: list[bytes]) -> Response:
    """A small answer, whole."""
    body = b"".join(chunks)
    if _gzip(request):
        compressor = _compressor()
        return Response(
            compressor.compress(body) + compressor.flush(),
            media_type=XML_TYPE,
            headers=_GZIP_HEADERS,
        )
    return Response(body, media_type=XML_TYPE, headers=_VARY)


async def _respond_page(request: Request, page: ListPage, on_done: Callable[[], None]) -> Response:
    """A list page, sent with its length (no chunked framing to copy it through) in its few
    pieces, none joined to another. Its list slot is freed once the page is sent, or the client
    has gone."""
    gzip = _gzip(request)
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
            page.release()
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
    return _PageResponse(
        whole(),
        headers,
        send_timeout=page.state.settings.send_timeout_seconds,
        client=request.client.host if request.client else "a client",
    )


class _PageResponse(StreamingResponse):
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
    """Drops the error the server logs for a response :class:`_PageResponse` cut off on purpose
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


#: Installed on the server's logger by :func:`services.provider.app.create_app`.
CUT_OFF = _CutOff()


async def answer(
    state: ProviderState, req: OAIRequest, response_date: datetime
) -> list[bytes] | ListPage:
    if req.verb == "Identify":
        return [await identify(state, req, response_date)]
    if req.verb == "ListMetadataFormats":
        return [await list_metadata_formats(state, req, response_date)]
    if req.verb == "ListSets":
        return [await list_sets(state, req, response_date)]
    if req.verb == "GetRecord":
        return [await get_record(state, req, response_date)]
    return await list_records(state, req, response_date)


def _document(
    response_date: datetime, state: ProviderState, req: OAIRequest, inner: bytes
) -> bytes:
    return (
        render.response_start(response_date, state.settings.base_url, req.echo, req.verb)
        + inner
        + render.response_end(req.verb)
    )


async def identify(state: ProviderState, req: OAIRequest, response_date: datetime) -> bytes:
    settings = state.settings
    earliest = await store.earliest_datestamp(state.pool)
    if earliest is None:
        earliest = response_date
    inner = render.identify(
        repository_name=settings.repository_name,
        base_url=settings.base_url,
        admin_emails=[settings.admin_email],
        earliest_datestamp=earliest,
        deleted_record="persistent" if settings.deleted_retention_days == 0 else "transient",
        compression=["gzip"],
        whole_seconds=settings.settle_seconds > 0,
    )
    return _document(response_date, state, req, inner)


async def list_metadata_formats(
    state: ProviderState, req: OAIRequest, response_date: datetime
) -> bytes:
    if req.identifier is not None and not await store.record_exists(state.pool, req.identifier):
        raise IdDoesNotExist(f"no record with identifier {req.identifier!r}")
    formats = [(prefix, schema, ns) for prefix, (schema, ns) in FORMATS.items()]
    return _document(response_date, state, req, render.list_metadata_formats(formats))


async def list_sets(state: ProviderState, req: OAIRequest, response_date: datetime) -> bytes:
    if req.resumption_token is not None:
        # This provider sends ListSets whole, so no token of ours can continue it (§3.5).
        raise BadResumptionToken("ListSets is never split; this resumptionToken is not ours")
    sets = _served_sets(await store.list_sets(state.pool))
    return _document(response_date, state, req, render.list_sets(sets))


def _served_sets(stored: Sequence[store.SetInfo]) -> list[tuple[str, str]]:
    """(setSpec, setName) of every set served, in order: the stored sets, every set above one
    of them (OAI-PMH 2.0 §2.6: ``A`` is a set, an interior node, when ``A:B`` is one; §4.6
    gives each a setName), and the union set."""
    names = {s.spec: s.name for s in stored}
    for spec in with_ancestors(names):
        names.setdefault(spec, f"Every record of the sets below {spec}")
    names[UNION_SET] = "The whole WIS catalogue held by this node"
    return sorted(names.items())


def _header_sets(stored: store.StoredRecord, listed: str | None = None) -> tuple[str, ...]:
    """The setSpecs of a header; ``listed``, the set of the list it is in (None: GetRecord or
    the whole catalogue)."""
    if stored.deleted and listed is not None and not in_tree(stored.set_specs, listed):
        # A deleted header lists the sets the record was deleted from (DESIGN invariant 4): a
        # record that left the listed set (every set below it) lives on in the sets it holds.
        return (listed,)
    # A tombstone holds the sets it was deleted from, the whole catalogue's included.
    # OAI-PMH 2.0 §2.6: the header's setSpecs "should include only the minimum number ...
    # required to specify the set membership": a record of A:B is in A too (§2.7.2: set=A
    # lists it), and A:B says so, so A is left out even for a record filed in A and A:B (what
    # RELIABILITY P16 asks). The union set is not implied by any setSpec's syntax: it stays.
    return minimal({*stored.set_specs, UNION_SET})


def _metadata(prefix: str, stored: store.StoredRecord) -> bytes | None:
    if stored.deleted or stored.xml is None:
        return None
    if prefix == "oai_dc":
        return crosswalk.to_oai_dc(stored.xml)
    return stored.xml


async def get_record(state: ProviderState, req: OAIRequest, response_date: datetime) -> bytes:
    assert req.identifier is not None and req.metadata_prefix is not None
    stored = await store.get_record(state.pool, req.identifier)
    if stored is None:
        raise IdDoesNotExist(f"no record with identifier {req.identifier!r}")
    stored = servable(stored, state.metrics)  # P14
    state.metrics.records_served.labels("GetRecord").inc()
    inner = render.record(
        stored.identifier,
        stored.datestamp,
        _header_sets(stored),
        stored.deleted,
        _metadata(req.metadata_prefix, stored),
    )
    return _document(response_date, state, req, inner)


async def _set_filter(state: ProviderState, set_spec: str | None) -> str | None:
    """The set to list (None: the whole catalogue); an unknown set matches no record. A set
    above a stored one is known: its list holds the records of the sets below it (§2.7.2)."""
    if set_spec is None or set_spec == UNION_SET:
        return None
    known = with_ancestors(s.spec for s in await store.list_sets(state.pool))
    if set_spec not in known:
        raise NoRecordsMatch(f"there is no set {set_spec!r} in this repository")
    return set_spec


async def _start_position(
    state: ProviderState, req: OAIRequest, response_date: datetime
) -> ListPosition:
    assert req.metadata_prefix is not None
    set_spec = await _set_filter(state, req.set_spec)
    until_exclusive = (
        until_upper_bound(req.until, req.until_granularity or Granularity.SECONDS)
        if req.until
        else None
    )
    upper_bound = await _upper_bound(state)
    return ListPosition(
        verb=req.verb,
        metadata_prefix=req.metadata_prefix,
        set_spec=set_spec,
        from_=req.from_,
        until_exclusive=until_exclusive,
        upper_bound=upper_bound,
        last_datestamp=None,
        last_identifier="",
        cursor=0,
        complete_list_size=-1,
        expires=response_date + timedelta(hours=state.settings.token_lifetime_hours),
    )


async def _upper_bound(state: ProviderState) -> datetime:
    """The datestamp a list beginning now stops at, frozen in its tokens (invariant 2).

    No row that a transaction still in progress will commit may be listed before it, or a
    harvester's high-water mark would pass it for ever: the list stops short of the oldest
    write transaction in progress (:func:`shared.db.records.list_horizon`), and of the settle
    window besides. The bound is also cut back to a whole second, so a list shows a datestamp
    second only once all of it is visible: harvesters may then ask from = last second seen + 1
    (the guarantee Identify states; without a settle window, as in some tests, it is not cut).
    """
    horizon = await store.list_horizon(state.pool)
    settle = state.settings.settle_seconds
    upper_bound = horizon.at - timedelta(seconds=settle)
    lag = (datetime.now(UTC) - horizon.at).total_seconds()
    state.metrics.list_horizon_lag.set(max(lag, 0.0) if horizon.oldest_pid else 0.0)
    warn = time.monotonic() - state.horizon_warned >= HORIZON_WARN_EVERY
    if horizon.hidden and warn:
        state.horizon_warned = time.monotonic()
        log.warning(
            "%d write transactions in progress belong to another database role, whose start "
            "this role may not see: lists may pass what they will commit (invariant 2); grant "
            "this role pg_read_all_stats, or let every writer use one role",
            horizon.hidden,
        )
    elif horizon.oldest_pid and lag >= HORIZON_WARN_LAG and warn:
        state.horizon_warned = time.monotonic()
        log.warning(
            "lists stop %.0f s short of now: the write transaction of database session %d "
            "has been open that long, and what it commits must not be passed (pg_stat_activity "
            "tells what it is)",
            lag,
            horizon.oldest_pid,
        )
    if settle > 0:
        upper_bound = upper_bound.replace(microsecond=0) - timedelta(microseconds=1)
    return upper_bound


async def _read_page(
    state: ProviderState, key: PageKey, found: Callable[[PageKey], None] = lambda key: None
) -> ListPageItems:
    """Read the page at ``key`` and render its items.

    A ListRecords page is read in two steps: its keys (and one more, to know whether the list
    goes on), then its rows up to its last key. ``found`` is told the next page's key between
    the two, so that its read can start while this page's documents are still coming.
    """
    page_size = state.settings.page_size
    scope = key.scope
    if key.verb == "ListIdentifiers":
        rows = await store.list_page(
            state.pool, scope, after=key.last, limit=page_size + 1, with_xml=False
        )
        following = None
        if len(rows) > page_size:
            rows = rows[:page_size]
            following = key.after(rows[-1].datestamp, rows[-1].identifier)
        return ListPageItems(_render_items(key, rows), len(rows), following)
    while True:
        keys = await store.list_keys(state.pool, scope, after=key.last, limit=page_size + 1)
        if not keys:
            return ListPageItems(b"", 0, None)
        following = key.after(*keys[page_size - 1]) if len(keys) > page_size else None
        if following:
            found(following)
        rows = await store.list_page(
            state.pool,
            scope,
            after=key.last,
            limit=page_size,
            with_xml=True,
            through=keys[min(len(keys), page_size) - 1],
        )
        servable_rows(rows, state.metrics)  # P14
        if rows or following is None:
            return ListPageItems(_render_items(key, rows), len(rows), following)
        # every record of this page changed (and left the list's bound) between the two steps
        key = following


def _render_items(key: PageKey, rows: Sequence[store.StoredRecord]) -> bytes:
    """A list page's headers (ListIdentifiers) or records (ListRecords), as one piece."""
    writer = render.PageWriter()
    header_sets: dict[tuple[tuple[str, ...], bool], tuple[str, ...]] = {}
    headers_only = key.verb == "ListIdentifiers"
    listed = key.scope.set_spec
    for stored in rows:
        sets_key = (stored.set_specs, stored.deleted)
        sets = header_sets.get(sets_key)
        if sets is None:
            sets = header_sets[sets_key] = _header_sets(stored, listed)
        if headers_only:
            writer.add_header(stored.identifier, stored.datestamp, sets, stored.deleted)
        else:
            writer.add_record(
                stored.identifier,
                stored.datestamp,
                sets,
                stored.deleted,
                _metadata(key.metadata_prefix, stored),
            )
    return writer.take()


@dataclass
class ListPage:
    """A list page on its way to the client, in a few pieces (the envelope, the items, the
    resumptionToken and the end); it holds one of the provider's list slots until
    :meth:`release` (once the page is sent, or the client gone)."""

    pieces: list[bytes]
    state: ProviderState
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.state.lists_in_progress -= 1


async def list_records(state: ProviderState, req: OAIRequest, response_date: datetime) -> ListPage:
    if req.resumption_token is not None:
        position = state.codec.decode(req.resumption_token, now=response_date)
        if position.verb != req.verb:
            raise BadResumptionToken(
                f"this resumptionToken continues {position.verb}, not {req.verb}"
            )
    else:
        position = await _start_position(state, req, response_date)
    if state.lists_in_progress >= state.settings.max_concurrent_lists:
        raise Overloaded()
    key = PageKey.at(position)
    state.lists_in_progress += 1
    try:
        page = None
        if req.resumption_token is not None:
            page = await state.read_ahead.take(key)
        if page is None:
            page = await _read_page(state, key)
        if not page.count:
            raise NoRecordsMatch("no record matches these arguments")
        complete_list_size = position.complete_list_size
        if complete_list_size < 0:
            complete_list_size = (
                await store.count_list(state.pool, key.scope) if page.following else page.count
            )
        tail = _list_tail(state, position, page, complete_list_size, response_date)
        start = render.response_start(response_date, state.settings.base_url, req.echo, req.verb)
    except BaseException:
        state.lists_in_progress -= 1
        raise
    state.metrics.records_served.labels(req.verb).inc(page.count)
    return ListPage([start, page.body, tail + render.response_end(req.verb)], state)


def _list_tail(
    state: ProviderState,
    position: ListPosition,
    page: ListPageItems,
    complete_list_size: int,
    response_date: datetime,
) -> bytes:
    """The page's resumptionToken element (none for a list done in one page); the read of the
    next page starts here, as its token leaves."""
    cursor = position.cursor
    if not page.following and cursor == 0:
        return b""
    token: str | None = None
    expiration: datetime | None = None
    if page.following:
        next_position = dataclasses.replace(
            position,
            last_datestamp=page.following.last_datestamp,
            last_identifier=page.following.last_identifier,
            cursor=cursor + page.count,
            complete_list_size=complete_list_size,
            expires=response_date + timedelta(hours=state.settings.token_lifetime_hours),
        )
        token = state.codec.encode(next_position)
        expiration = next_position.expires
        state.read_ahead.start(page.following)
    return render.resumption_token(
        token,
        cursor=cursor,
        complete_list_size=max(complete_list_size, cursor + page.count),
        expiration=expiration,
    )
