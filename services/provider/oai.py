"""The OAI-PMH 2.0 endpoint: ``GET|POST /oai``.

Thin by design: arguments are checked by :mod:`wiscat.shared.oaipmh.arguments`, rows come from
:mod:`wiscat.shared.db.records`, bytes from :mod:`wiscat.shared.oaipmh.render`, list pages from
:mod:`wiscat.provider.lists`, and :mod:`wiscat.provider.responses` sends them. Every answer,
errors included, is an OAI-PMH document with HTTP 200 (§3.6); only overload and an unavailable
database get a 503 with Retry-After (§3.1.2.2 allows it for flow control).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import Response

from wiscat.provider.characters import nameable_sets, servable
from wiscat.provider.lists import ListPage, Overloaded, header_sets, metadata
from wiscat.provider.openapi import OAI, OAI_GET, OAI_POST, OAI_TOO_LARGE
from wiscat.provider.readahead import ListPageItems, PageKey
from wiscat.provider.responses import (
    log_unavailable,
    overloaded_text,
    request_pairs,
    respond,
    respond_page,
    unavailable_text,
)
from wiscat.provider.state import ProviderState, State
from wiscat.shared.db import records as store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.pool import answered
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.arguments import OAIRequest, echo_allowed, parse_request
from wiscat.shared.oaipmh.dates import Granularity, until_upper_bound
from wiscat.shared.oaipmh.errors import BadResumptionToken, IdDoesNotExist, NoRecordsMatch, OAIError
from wiscat.shared.oaipmh.hierarchy import with_ancestors
from wiscat.shared.oaipmh.tokens import ListPosition
from wiscat.shared.settings import UNION_SET

router = APIRouter(tags=["OAI-PMH"])

# prefix -> (schema, namespace); iso19139 is the stored record as is (WIS guidelines),
# oai_dc is the crosswalk every repository must offer (OAI-PMH 2.0 §3.4).
FORMATS: dict[str, tuple[str, str]] = {
    "iso19139": ("http://www.isotc211.org/2005/gmd/gmd.xsd", "http://www.isotc211.org/2005/gmd"),
    "oai_dc": (
        "http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
        "http://www.openarchives.org/OAI/2.0/oai_dc/",
    ),
}


# one route per method, each with an operation id of its own in the OpenAPI schema (HEAD is a GET:
# app.HeadAsGet)
@router.post(
    "/oai",
    summary="An OAI-PMH request, its arguments as a form",
    operation_id="oai_post",
    response_class=Response,
    responses={**OAI, **OAI_TOO_LARGE},
    openapi_extra=OAI_POST,
)
@router.get(
    "/oai",
    summary="An OAI-PMH request, its arguments in the query",
    operation_id="oai_get",
    response_class=Response,
    responses=OAI,
    openapi_extra=OAI_GET,
)
async def oai_endpoint(request: Request, state: State) -> Response:
    """The OAI-PMH 2.0 endpoint, GET and POST (§3.1.1): the request checked, answered with a
    document (an OAI-PMH error included, HTTP 200), or 503 with Retry-After when the provider is
    overloaded or its database unavailable; counted and timed per verb."""
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
        return overloaded_text(state.settings.overload_retry_after_seconds)
    except DatabaseUnavailable as exc:
        state.metrics.requests.labels(verb_label, "unavailable").inc()
        log_unavailable(verb_label, exc)
        return unavailable_text()
    except OAIError as error:
        state.metrics.requests.labels(verb_label, error.code).inc()
        # §3.2: after badVerb or badArgument the request element carries no attributes.
        # pairs passed the syntax checks when the error is not badVerb/badArgument
        echo = dict(pairs) if echo_allowed(error) else None
        document = render.render_error(response_date, base_url, echo, [error])
        state.metrics.latency.labels(verb_label).observe(time.perf_counter() - started)
        return respond(request, [document])
    state.metrics.requests.labels(verb_label, "ok").inc()

    def observe() -> None:
        state.metrics.latency.labels(verb_label).observe(time.perf_counter() - started)

    if isinstance(body, list):
        observe()
        return respond(request, body)
    return await respond_page(request, body, observe, state.settings.send_timeout_seconds)


async def answer(
    state: ProviderState, req: OAIRequest, response_date: datetime
) -> list[bytes] | ListPage:
    """The answer to a checked request: a whole document, or for a list verb a page to stream
    (:class:`ListPage`)."""
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
    """Identify (§4.2): the repository's description; its earliestDatestamp the catalogue's
    oldest, or now for an empty one."""
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
        changes_url=settings.base_url.rstrip("/") + "/changes" if settings.hints else None,
    )
    return _document(response_date, state, req, inner)


async def list_metadata_formats(
    state: ProviderState, req: OAIRequest, response_date: datetime
) -> bytes:
    """ListMetadataFormats (§4.4): the formats served, the same for every record; idDoesNotExist
    for an identifier not held."""
    if req.identifier is not None and not await store.record_exists(state.pool, req.identifier):
        raise IdDoesNotExist(f"no record with identifier {req.identifier!r}")
    formats = [(prefix, schema, ns) for prefix, (schema, ns) in FORMATS.items()]
    return _document(response_date, state, req, render.list_metadata_formats(formats))


async def list_sets(state: ProviderState, req: OAIRequest, response_date: datetime) -> bytes:
    """ListSets (§4.6): every set served, whole (never split, so a resumptionToken is never
    ours)."""
    if req.resumption_token is not None:
        # This provider sends ListSets whole, so no token of ours can continue it (§3.5).
        raise BadResumptionToken("ListSets is never split; this resumptionToken is not ours")
    stored = await store.list_sets(state.pool)
    nameable = set(nameable_sets((s.spec for s in stored), state.metrics, "ListSets"))  # P14
    sets = _served_sets([s for s in stored if s.spec in nameable])
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


async def get_record(state: ProviderState, req: OAIRequest, response_date: datetime) -> bytes:
    """GetRecord (§4.1): one record, or its tombstone, in the format asked; idDoesNotExist when
    not held."""
    assert req.identifier is not None and req.metadata_prefix is not None
    stored = await store.get_record(state.lists.read_pool, req.identifier)
    if stored is None:
        raise IdDoesNotExist(f"no record with identifier {req.identifier!r}")
    stored = servable(stored, state.metrics)  # P14
    state.metrics.records_served.labels("GetRecord").inc()
    inner = render.record(
        stored.identifier,
        stored.datestamp,
        header_sets(stored, state.metrics),
        stored.deleted,
        metadata(req.metadata_prefix, stored),
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
    upper_bound = await state.lists.upper_bound()
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
        expires=state.codec.expiry(response_date),
    )


async def list_records(state: ProviderState, req: OAIRequest, response_date: datetime) -> ListPage:
    """ListRecords or ListIdentifiers (§4.3, §4.5): the first page of a list, or the page a
    resumptionToken continues, with the token of the next; noRecordsMatch for an empty list."""
    if req.resumption_token is not None:
        position = state.codec.decode(req.resumption_token, now=response_date)
        if position.verb != req.verb:
            raise BadResumptionToken(
                f"this resumptionToken continues {position.verb}, not {req.verb}"
            )
    else:
        position = await _start_position(state, req, response_date)
    key = PageKey.at(position)
    slot = state.lists.slot()
    try:
        page = await state.lists.page(key, continued=req.resumption_token is not None)
        if not page.count:
            raise NoRecordsMatch("no record matches these arguments")
        complete_list_size = position.complete_list_size
        if complete_list_size < 0:
            complete_list_size = (
                await store.count_list(state.lists.read_pool, key.scope)
                if page.following
                else page.count
            )
        tail = _list_tail(state, position, page, complete_list_size, response_date)
        start = render.response_start(response_date, state.settings.base_url, req.echo, req.verb)
    except BaseException:
        slot.release()
        raise
    state.metrics.records_served.labels(req.verb).inc(page.count)
    return ListPage([start, page.body, tail + render.response_end(req.verb)], slot)


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
            expires=state.codec.expiry(response_date),
        )
        token = state.codec.encode(next_position)
        expiration = next_position.expires
        state.lists.read_ahead.start(page.following)
    return render.resumption_token(
        token,
        cursor=cursor,
        complete_list_size=max(complete_list_size, cursor + page.count),
        expiration=expiration,
    )
