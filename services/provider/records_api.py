"""The WCMP2 records as an OGC API - Records collection (``/collections/wis2-discovery-metadata``):
what a Global Discovery Catalogue fetches when a WIS2 notification names a record.

A record's answers carry the exact bytes the renderer stored (``wis2_records.content``,
``wis2_revisions.content``), whose sha512 a notification's integrity names: nothing here parses
or re-serialises them; an items page joins them as they are. gzip, to a client that takes it,
decodes to those same bytes. Each revision has a URL of its own, immutable; the item URL answers
the current one, with its revision as ETag. Read from the provider's read pool (a hot standby,
when DATABASE_READ_URL is set). ``WISCAT_WIS2_RECORDS=false`` answers 404 to every route here.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from wiscat.provider.openapi import Responses, json_error
from wiscat.provider.responses import accepts_gzip, gzipped
from wiscat.provider.state import ProviderState, State
from wiscat.shared.db import wis2_serving as store
from wiscat.shared.wcmp2.urls import (
    COLLECTION_ID,
    COLLECTION_PATH,
    COLLECTIONS_PATH,
    ITEMS_PATH,
    collection_url,
    path_segment,
    site_root,
)

GEOJSON = "application/geo+json"
MAX_LIMIT = 1000
MAX_OFFSET = 2**31 - 1
IMMUTABLE = "public, max-age=31536000, immutable"
# the current revision may change at any time: a cache asks again, with the ETag
CURRENT = "no-cache"


def serving(state: State) -> ProviderState:
    """The state, when the collection is served (WISCAT_WIS2_RECORDS); else 404."""
    if not state.settings.wis2_records_on:
        raise HTTPException(404, "this node serves no WCMP2 records (WISCAT_WIS2_RECORDS)")
    return state


Serving = Annotated[ProviderState, Depends(serving)]


class GeoJSONResponse(Response):
    """A GeoJSON document; for the schema's sake."""

    media_type = GEOJSON


_ERRORS: Responses = {
    404: json_error("no such record or revision, or the collection is not served"),
    503: json_error("the database is unavailable; retry later"),
}
_RECORD: Responses = {
    200: {
        "description": "the record, the exact bytes its notification's integrity names",
        "content": {GEOJSON: {"schema": {"type": "object"}}},
        "headers": {"ETag": {"description": "the revision", "schema": {"type": "string"}}},
    },
    304: {"description": "not modified (If-None-Match names the revision)"},
}

router = APIRouter(tags=["WIS2 records"])


@router.get(
    COLLECTIONS_PATH,
    summary="List the collections (OGC API - Records)",
    responses=_ERRORS,
)
async def collections(state: Serving) -> JSONResponse:
    """The one collection: the node's WCMP2 discovery metadata records."""
    root = site_root(state.settings.base_url)
    return JSONResponse(
        {
            "collections": [_collection(state)],
            "links": [_link("self", root + COLLECTIONS_PATH, "application/json")],
        }
    )


@router.get(COLLECTION_PATH, summary="Describe the WCMP2 records collection", responses=_ERRORS)
async def collection(state: Serving) -> JSONResponse:
    """The collection of the node's WCMP2 discovery metadata records."""
    return JSONResponse(_collection(state))


@router.get(
    ITEMS_PATH,
    summary="List the WCMP2 records, a page at a time",
    response_class=GeoJSONResponse,
    responses={
        200: {
            "description": "a FeatureCollection of the records, each as stored",
            "content": {GEOJSON: {"schema": {"type": "object"}}},
        },
        **_ERRORS,
    },
)
async def items(
    request: Request,
    state: Serving,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="records a page")] = 10,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="records skipped")] = 0,
) -> Response:
    """The records not deleted, by id, ``limit`` from the ``offset``-th on; ``numberMatched``
    counts them all, ``next`` and ``prev`` link the neighbouring pages."""
    page = await store.items_page(state.lists.read_pool, limit, offset)
    base = collection_url(state.settings.base_url)

    def at(rel: str, start: int) -> dict[str, str]:
        return _link(rel, f"{base}/items?limit={limit}&offset={start}", GEOJSON)

    links = [at("self", offset), _link("collection", base, "application/json")]
    if offset + len(page.contents) < page.matched:
        links.append(at("next", offset + len(page.contents)))
    if offset > 0:
        links.append(at("prev", max(0, offset - limit)))
    rest = json.dumps(
        {
            "numberMatched": page.matched,
            "numberReturned": len(page.contents),
            "links": links,
        },
        separators=(",", ":"),
    ).encode("utf-8")
    # the records' bytes as stored, joined: none is parsed or written anew
    body = b'{"type":"FeatureCollection","features":[' + b",".join(page.contents) + b"]," + rest[1:]
    return _answer(request, body, {"Cache-Control": CURRENT})


@router.get(
    ITEMS_PATH + "/{wcmp2_id:path}/revisions/{revision}",
    summary="Get one revision of a WCMP2 record",
    response_class=GeoJSONResponse,
    responses={**_RECORD, **_ERRORS},
)
async def record_revision(
    request: Request, state: Serving, wcmp2_id: str, revision: str
) -> Response:
    """The revision's bytes, as long as the node keeps it; they never change."""
    return await _record(request, state)


@router.get(
    ITEMS_PATH + "/{wcmp2_id:path}",
    summary="Get a WCMP2 record as it is now",
    response_class=GeoJSONResponse,
    responses={**_RECORD, 410: json_error("the record is deleted"), **_ERRORS},
)
async def record(request: Request, state: Serving, wcmp2_id: str) -> Response:
    """The current revision's bytes, its revision as ETag; 410 once the record is deleted
    (its revisions stay served while kept)."""
    return await _record(request, state)


async def _record(request: Request, state: ProviderState) -> Response:
    # read from the raw path: a "/" encoded in an id is part of the id, not a separator
    wcmp2_id, revision = _target(request)
    pool = state.lists.read_pool
    if revision is None:
        current = await store.item(pool, wcmp2_id)
        if current is None:
            raise HTTPException(404, f"no WCMP2 record {wcmp2_id!r} here")
        if current.deleted or current.content is None:
            raise HTTPException(410, f"the WCMP2 record {wcmp2_id!r} is deleted")
        content, etag, cache = current.content, current.revision, CURRENT
    else:
        kept = await store.revision(pool, wcmp2_id, revision)
        if kept is None:
            raise HTTPException(404, f"no revision {revision!r} of WCMP2 record {wcmp2_id!r} here")
        content, etag, cache = kept, revision, IMMUTABLE
    headers = {"ETag": f'"{etag}"', "Cache-Control": cache}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers={**headers, "Vary": "Accept-Encoding"})
    return _answer(request, content, headers)


def _target(request: Request) -> tuple[str, str | None]:
    """The id and the revision (None: the current one) the request's path names."""
    raw = request.scope.get("raw_path")
    prefix = ITEMS_PATH + "/"
    path = raw.decode("latin-1") if isinstance(raw, bytes) else ""
    if not path.startswith(prefix):  # no raw path: the decoded one, as routed
        params = request.path_params
        return str(params["wcmp2_id"]), params.get("revision")
    parts = [path_segment(part) for part in path[len(prefix) :].split("/")]
    if len(parts) == 1 and parts[0]:
        return parts[0], None
    if len(parts) == 3 and parts[0] and parts[1] == "revisions" and parts[2]:
        return parts[0], parts[2]
    raise HTTPException(404, "no such WCMP2 record URL: .../items/{id}[/revisions/{revision}]")


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether If-None-Match (RFC 9110 §13.1.2, weak comparison) names ``etag``."""
    if if_none_match is None:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or f'"{etag}"' in tags


def _answer(request: Request, body: bytes, headers: dict[str, str]) -> Response:
    """``body`` as GeoJSON, gzipped for a client that takes it (it decodes to ``body``)."""
    headers = {**headers, "Vary": "Accept-Encoding"}
    if accepts_gzip(request):
        return Response(
            gzipped(body), media_type=GEOJSON, headers={**headers, "Content-Encoding": "gzip"}
        )
    return Response(body, media_type=GEOJSON, headers=headers)


def _collection(state: ProviderState) -> dict[str, Any]:
    base = collection_url(state.settings.base_url)
    return {
        "id": COLLECTION_ID,
        "type": "Catalog",
        "itemType": "record",
        "title": "WIS2 discovery metadata",
        "description": f"The discovery metadata records of {state.settings.gisc_name} as WMO "
        "Core Metadata Profile 2 (WCMP2) records, for the WIS 2.0 Global Discovery Catalogues",
        "links": [
            _link("self", base, "application/json"),
            _link("items", base + "/items", GEOJSON),
        ],
    }


def _link(rel: str, href: str, media_type: str) -> dict[str, str]:
    return {"rel": rel, "type": media_type, "href": href}
