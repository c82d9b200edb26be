"""Admin API (bearer token ``WISCAT_ADMIN_TOKEN``): the node's own records.

Without a configured token the admin API is disabled rather than open.
"""

from __future__ import annotations

import hmac
import logging
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, model_validator

from wiscat.provider import admin_models as models
from wiscat.provider.openapi import ADMIN, body, json_error
from wiscat.provider.state import ProviderState, State
from wiscat.shared import ingest
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import hints as hint_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import refusals as refusal_store
from wiscat.shared.db import wis2_serving as wis2_store
from wiscat.shared.durations import format_duration, parse_duration
from wiscat.shared.iso19139 import RecordError, parse_record
from wiscat.shared.linkspec import (
    NAME,
    NAME_RULE,
    build_link,
    changed_link,
    check_base_url,
    check_peer_urls,
    check_set_spec,
    set_kind,
)
from wiscat.shared.model import RunMode
from wiscat.shared.refusals import explain
from wiscat.shared.urls import safe_url

log = logging.getLogger("wiscat.admin")


def require_admin(request: Request, state: State) -> ProviderState:
    """Check ``Authorization: Bearer <WISCAT_ADMIN_TOKEN>``."""
    configured = state.settings.admin_token
    if configured is None or not state.admin_on:
        raise HTTPException(403, "the admin API is disabled: set WISCAT_ADMIN_TOKEN to enable it")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    expected = configured.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise HTTPException(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
    return state


router = APIRouter(prefix="/admin", tags=["admin"], responses=ADMIN)

# A link or a check as JSON is a few hundred bytes; FastAPI reads such a body before the token
# is checked, so this cap (app.BodyLimit) is what a stranger can make it read.
MAX_REQUEST_BYTES = 1024 * 1024


@router.put(
    "/records/{identifier:path}",
    summary="Store a record of the own set",
    response_model=models.RecordAnswer,
    responses={
        201: {"description": "the record is new", "model": models.RecordAnswer},
        # Starlette's path parameter holds no line break: such an identifier matches no route
        404: json_error("no route: the identifier holds a line break"),
        409: json_error("the record is older than the one stored"),
    },
    openapi_extra=body("application/xml", "an ISO 19139 record (gmd:MD_Metadata)"),
)
async def put_record(
    identifier: str, request: Request, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """Store an ISO 19139 record in the own set; its fileIdentifier must equal the path's."""
    body = await request.body()  # at most wiscat.shared.iso19139.MAX_RECORD_BYTES (app.BodyLimit)
    try:
        record = parse_record(body)
    except RecordError as exc:
        raise HTTPException(400, f"record refused: {exc}") from exc
    if record.identifier != identifier:
        raise HTTPException(
            400,
            f"record refused: its gmd:fileIdentifier {record.identifier!r} is not the "
            f"identifier in the URL {identifier!r}",
        )
    outcome = await ingest.put_record(state.pool, state.settings.own_set, record)
    log.info("admin put %s: %s", identifier, outcome)
    status = 201 if outcome == "added" else 200
    if outcome == "refused_older":
        raise HTTPException(409, f"record refused: {ingest.older(record)}")
    return JSONResponse({"identifier": identifier, "outcome": outcome}, status_code=status)


@router.delete(
    "/records/{identifier:path}",
    summary="Delete a record of the own set (a tombstone)",
    response_model=models.RecordAnswer,
    responses={404: json_error("no such live record")},
)
async def delete_record(
    identifier: str, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """Delete a record of the own set: it stays as a tombstone for the retention period."""
    result = await ingest.delete_local(state.pool, state.settings.own_set, [identifier])
    outcome = result.outcomes[identifier]
    log.info("admin delete %s: %s", identifier, outcome)
    if outcome in ("not_found", "unchanged"):
        raise HTTPException(404, f"no live record {identifier!r} in {state.settings.own_set}")
    return JSONResponse({"identifier": identifier, "outcome": outcome})


class _Body(BaseModel):
    """A JSON body of the admin API: a field it does not know is refused (400 with its name),
    where a misspelt one ("evrey") was dropped and its default taken in silence; so is a value
    of another JSON type than the field's ("enabled": "yes" was taken as true, "24" as 24)."""

    model_config = ConfigDict(extra="forbid", strict=True)


# A duration as the commands take it ("1h", "7d", "1h30m"), or a number of seconds, as the
# API's answers give it (a link listed can be sent back as it is).
Duration = str | float


class LinkBody(_Body):
    """A new link, as ``wiscat link add`` takes it (durations like ``1h``, ``7d``)."""

    name: str
    url: str
    set: str | None = None
    into: str | None = None
    prefix: str = "iso19139"
    strategy: str = "ListRecords"
    every: Duration = "1h"
    full_every: Duration = "7d"
    overlap: Duration = "0s"
    window_slices: int = 24
    enabled: bool = True
    recovery: bool = False
    hints: bool = True


@router.get("/links", summary="List the links", response_model=list[models.LinkAnswer])
async def list_links(state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """Every link with its state."""
    return JSONResponse([link.as_json() for link in await link_store.all_links(state.pool)])


@router.get(
    "/links/{name}",
    summary="Show a link",
    response_model=models.LinkShown,
    responses={404: json_error("no such link")},
)
async def show_link(name: str, state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """One link with its state and its subscription to its peer's change hints; 404 when
    there is no such link."""
    link = await link_store.get_link(state.pool, name)
    if link is None:
        raise HTTPException(404, f"no link named {name!r}")
    stream = await hint_store.stream_of(state.pool, link.base_url)
    hinted = hint_store.subscription(link, stream, state.settings.hints)
    return JSONResponse({**link.as_json(), "subscription": hinted})


@router.post(
    "/links",
    summary="Add a link",
    status_code=201,
    response_model=models.LinkAnswer,
    responses={409: json_error("a link of that name exists")},
)
async def add_link(body: LinkBody, state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """Add a link; 400 with the reason when it cannot work, 409 when the name is taken."""
    try:
        new = build_link(
            name=body.name,
            url=body.url,
            remote_set=body.set,
            into=body.into,
            own_set=state.settings.own_set,
            prefix=body.prefix,
            strategy=body.strategy,
            every=duration(body.every),
            full_every=duration(body.full_every),
            overlap=duration(body.overlap),
            window_slices=body.window_slices,
            enabled=body.enabled,
            recovery=body.recovery,
            own_base_url=state.settings.base_url,
            hints=body.hints,
        )
    except ValueError as exc:  # LinkSpecError and bad durations
        raise HTTPException(400, f"link refused: {exc}") from exc
    try:
        link = await link_store.add_link(
            state.pool, new, set_kind=set_kind(new.local_set, state.settings.own_set)
        )
    except link_store.LinkExists as exc:
        raise HTTPException(409, str(exc)) from exc
    log.info("admin added link %s -> %s", link.name, safe_url(link.base_url))
    return JSONResponse(link.as_json(), status_code=201)


class LinkChange(_Body):
    """What ``PATCH /admin/links/{name}`` changes; a field left out stays as it is (``"set":
    ""`` is the peer's whole catalogue), as with ``wiscat link set``."""

    url: str | None = None
    set: str | None = None
    prefix: str | None = None
    strategy: str | None = None
    every: Duration | None = None
    full_every: Duration | None = None
    overlap: Duration | None = None
    window_slices: int | None = None
    enabled: bool | None = None
    hints: bool | None = None

    @model_validator(mode="after")
    def _no_nulls(self) -> LinkChange:
        # null would be taken as "left out", and the change asked for silently not made
        nulls = sorted(name for name in self.model_fields_set if getattr(self, name) is None)
        if nulls:
            raise ValueError(
                f"{', '.join(nulls)}: null is no value here (leave a field out to keep it)"
            )
        return self


def duration(value: Duration) -> timedelta:
    """A :data:`Duration` as a timedelta; ValueError on anything else."""
    if isinstance(value, str):
        return parse_duration(value)
    if value < 0:
        raise ValueError(f"{value:g} seconds: a duration is not negative")
    return parse_duration(f"{value:f}s")


def _duration(value: Duration | None) -> timedelta | None:
    return None if value is None else duration(value)


@router.patch(
    "/links/{name}",
    summary="Change a link",
    response_model=models.LinkChanged,
    responses={404: json_error("no such link")},
)
async def change_link(
    name: str, body: LinkChange, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """Change a link: a new peer, remote set or metadataPrefix resets its high-water mark (a
    full harvest next); a new strategy or schedule keeps it. 400 with the reason when the
    link would not work, 404 when there is no such link."""
    link = await link_store.get_link(state.pool, name)
    if link is None:
        raise HTTPException(404, f"no link named {name!r}")
    try:
        new = changed_link(
            link,
            state.settings.own_set,
            url=body.url,
            remote_set=body.set,
            prefix=body.prefix,
            strategy=body.strategy,
            every=_duration(body.every),
            full_every=_duration(body.full_every),
            overlap=_duration(body.overlap),
            window_slices=body.window_slices,
            own_base_url=state.settings.base_url,
            hints=body.hints,
        )
    except ValueError as exc:  # LinkSpecError and bad durations
        raise HTTPException(400, f"link not changed: {exc}") from exc
    try:
        async with state.pool.acquire() as conn:
            kind = set_kind(new.local_set, state.settings.own_set)
            link, changed = await link_store.update_link(conn, link, new, set_kind=kind)
            if body.enabled is not None and body.enabled != link.enabled:
                link = await link_store.set_enabled(conn, name, body.enabled) or link
                changed.append("enabled")
    except link_store.LinkGone as exc:
        raise HTTPException(404, str(exc)) from exc
    except link_store.LinkHasRecords as exc:
        raise HTTPException(400, f"link not changed: {exc}") from exc
    log.info("admin changed link %s: %s", name, ", ".join(changed) or "nothing")
    return JSONResponse({**link.as_json(), "changed": changed})


@router.delete(
    "/links/{name}",
    summary="Remove a link",
    response_model=models.Removed,
    responses={404: json_error("no such link")},
)
async def remove_link(name: str, state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """Remove link ``name`` and its runs (its records stay); 404 if there is none."""
    if not await link_store.remove_link(state.pool, name):
        raise HTTPException(404, f"no link named {name!r}")
    log.info("admin removed link %s", name)
    return JSONResponse({"removed": name})


@router.post(
    "/links/{name}/harvest",
    summary="Harvest a link now",
    status_code=202,
    response_model=models.HarvestRequested,
    responses={404: json_error("no such link"), 409: json_error("the link is disabled")},
)
async def harvest_now(
    name: str, full: bool = False, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """Ask the harvester to run this link now (the WIS emergency update)."""
    mode: RunMode = "full" if full else "incremental"
    asked = await link_store.request_run(state.pool, name, mode)
    if asked is None:
        raise HTTPException(404, f"no link named {name!r}")
    if not asked:
        raise HTTPException(409, f"link {name} is disabled: enable it first")
    log.info("admin requested a %s harvest of %s", mode, name)
    return JSONResponse({"link": name, "requested": mode}, status_code=202)


@router.get(
    "/wis2/invalid",
    summary="List the records that cannot be made WCMP2, and why",
    response_model=list[models.WCMP2InvalidAnswer],
)
async def wis2_invalid(
    limit: int = 1000, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """The records the WIS2 renderer found cannot be valid WCMP2 records (never announced),
    newest first, with their reasons and conversion reports."""
    rows = await wis2_store.invalid_records(state.pool, min(max(limit, 1), 10_000))
    return JSONResponse(jsonable_encoder(rows))


@router.get("/runs", summary="List the latest harvest runs", response_model=list[models.RunAnswer])
async def runs(
    link: str | None = None, limit: int = 50, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """The latest harvest runs, newest first."""
    rows = await link_store.recent_runs(state.pool, link, min(max(limit, 1), 1000))
    return JSONResponse(jsonable_encoder(rows))


@router.get(
    "/links/{name}/refused",
    summary="List the records a link's harvests refused",
    response_model=list[models.RefusedAnswer],
    responses={404: json_error("no such link")},
)
async def refused(
    name: str, limit: int = 100, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """The records the link's harvests refused, the latest refusal of each, newest first, with
    the reason code and its sentence (``wiscat link refused``)."""
    if await link_store.get_link(state.pool, name) is None:
        raise HTTPException(404, f"no link named {name!r}")
    rows = await refusal_store.refused_of_link(state.pool, name, min(max(limit, 1), 1000))
    own_set = state.settings.own_set
    return JSONResponse(
        jsonable_encoder([{**row, "text": explain(row["reason"], own_set)} for row in rows])
    )


@router.get(
    "/quarantine",
    summary="List the latest quarantined records",
    response_model=list[models.QuarantineAnswer],
)
async def quarantined(
    link: str | None = None, limit: int = 50, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """The latest quarantined records (reasons, not bytes), newest first."""
    rows = await link_store.recent_quarantine(state.pool, link, min(max(limit, 1), 1000))
    return JSONResponse(jsonable_encoder(rows))


@router.get(
    "/quarantine/{quarantine_id}",
    summary="A quarantined record's stored bytes",
    response_class=Response,
    responses={
        200: {"description": "the bytes", "content": {"application/octet-stream": {}}},
        404: json_error("no such quarantined record"),
    },
)
async def quarantined_bytes(
    quarantine_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    state: ProviderState = Depends(require_admin),
) -> Response:
    """One quarantined record's stored bytes (to show its peer what was wrong): the record as
    read from its page, or the peer's whole answer where that could not be read."""
    row = await link_store.quarantined_record(state.pool, quarantine_id)
    if row is None:
        raise HTTPException(404, f"no quarantined record {quarantine_id} (purged, or never was)")
    return Response(
        row["raw"],
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="quarantine-{quarantine_id}.xml"'},
    )


class CheckBody(_Body):
    """A scheduled consistency check, as ``wiscat checks add`` takes it."""

    set: str
    source: str
    peers: list[str]
    every: Duration = "1d"
    sample: int = 0
    enabled: bool = True


@router.get(
    "/checks",
    summary="List the scheduled consistency checks",
    response_model=list[models.CheckListed],
)
async def list_checks(state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """Every scheduled check with its latest outcome."""
    found = await check_store.all_checks(state.pool)
    return JSONResponse(jsonable_encoder([{**check.as_json(), **last} for check, last in found]))


@router.put(
    "/checks/{name}",
    summary="Create or replace a scheduled check",
    response_model=models.CheckAnswer,
)
async def put_check(
    name: str, body: CheckBody, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """Create or replace a scheduled check; it runs at the harvester's next poll."""
    try:
        every = duration(body.every)
        if every < check_store.MIN_EVERY:
            least = format_duration(check_store.MIN_EVERY)
            raise ValueError(f"every {body.every!r}: at least {least} between runs")
        check_set_spec(body.set, "set")
        for url in (body.source, *body.peers):
            check_base_url(url)
        if not body.peers:
            raise ValueError("a check needs at least one peer")
        check_peer_urls(body.source, body.peers)
        if not 0 <= body.sample <= check_store.MAX_SAMPLE:
            raise ValueError(f"sample is 0 to {check_store.MAX_SAMPLE}")
        if not NAME.fullmatch(name):
            raise ValueError(f"a check name is {NAME_RULE}")
    except ValueError as exc:
        raise HTTPException(400, f"check refused: {exc}") from exc
    check = await check_store.save_check(
        state.pool,
        name,
        body.set,
        body.source,
        body.peers,
        sample=body.sample,
        every=every,
        enabled=body.enabled,
    )
    log.info("admin saved check %s of %s", name, body.set)
    return JSONResponse(check.as_json())


@router.delete(
    "/checks/{name}",
    summary="Remove a scheduled check",
    response_model=models.Removed,
    responses={404: json_error("no such check")},
)
async def remove_check(name: str, state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """Remove check ``name`` (its reports stay); 404 if there is none."""
    if not await check_store.remove_check(state.pool, name):
        raise HTTPException(404, f"no check named {name!r}")
    log.info("admin removed check %s", name)
    return JSONResponse({"removed": name})


@router.post(
    "/checks/{name}/run",
    summary="Run a check now",
    status_code=202,
    response_model=models.CheckRequested,
    responses={404: json_error("no such check"), 409: json_error("the check is disabled")},
)
async def run_check_now(name: str, state: ProviderState = Depends(require_admin)) -> JSONResponse:
    """Ask the harvester to run this check at its next poll."""
    asked = await check_store.request_check(state.pool, name)
    if asked is None:
        raise HTTPException(404, f"no check named {name!r}")
    if not asked:
        raise HTTPException(409, f"check {name} is disabled: enable it first")
    return JSONResponse({"check": name, "requested": True}, status_code=202)


@router.get(
    "/check-reports",
    summary="List the latest consistency reports",
    response_model=list[models.ReportAnswer],
)
async def check_reports(
    check: str | None = None, limit: int = 20, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """The latest consistency reports, newest first, with per-peer counts (no item lists)."""
    rows = await check_store.recent_reports(state.pool, check, min(max(limit, 1), 500))
    return JSONResponse(jsonable_encoder(rows))


@router.get(
    "/check-reports/{report_id}",
    summary="One consistency report, whole",
    response_model=models.ReportAnswer,
    responses={404: json_error("no such report")},
)
async def check_report(
    report_id: int, state: ProviderState = Depends(require_admin)
) -> JSONResponse:
    """One whole report, with the items of each category (the first 1,000 of each)."""
    # a report id is a bigint: a larger number names no report (and the database cannot take it)
    row = await check_store.get_report(state.pool, report_id) if 0 < report_id < 2**63 else None
    if row is None:
        raise HTTPException(404, f"no report {report_id}")
    return JSONResponse(jsonable_encoder(row))
