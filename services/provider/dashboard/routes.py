"""The dashboard's routes: ``/`` and a quarantined record's page, ``/quarantine/ID``. Each loads
its view and renders it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from wiscat.provider.dashboard import view as dashboard_view
from wiscat.provider.dashboard.markup import HEADERS, RECORD_HEADERS
from wiscat.provider.dashboard.pages import (
    dashboard_page,
    quarantine_page,
    status_strip,
    unavailable_page,
)
from wiscat.provider.dashboard.plots import when
from wiscat.provider.dashboard.probe import harvester_address, probe_harvester
from wiscat.provider.registry import RegistryState
from wiscat.provider.state import State
from wiscat.shared.db import links as link_store
from wiscat.shared.db.migrate import not_ready

router = APIRouter(tags=["dashboard"])

# The page reloads itself this often (a meta refresh: a GET of the page alone, which repeats no
# "harvest now"); ?refresh=N changes it, ?refresh=0 stops it.
REFRESH = 60
# a quarantined record's page shows this much of its bytes; the CLI gives them whole
RAW_SHOWN = 64 * 1024


@router.get("/", summary="The operator's dashboard (HTML)", response_class=HTMLResponse)
async def dashboard(
    request: Request,
    state: State,
    refresh: Annotated[int, Query(ge=0, le=86400, description="seconds; 0: never")] = REFRESH,
) -> HTMLResponse:
    """The node's dashboard (HTML), reloaded every ``refresh`` seconds (0: never); without the
    database, what can be known without it, answered 503."""
    settings = state.settings
    now = datetime.now(UTC)
    address = harvester_address(settings)
    harvester = asyncio.ensure_future(probe_harvester(address))
    database = await not_ready(state.pool, settings.probe_timeout_seconds)
    if database is not None:
        # what can be known without the database: the page says so, and is tried again
        strip = status_strip(settings, database, await harvester, address, None)
        page = unavailable_page(settings, strip, when(now), refresh or REFRESH)
        return HTMLResponse(page, status_code=503, headers={**HEADERS, "Retry-After": "30"})
    registry: RegistryState | None = getattr(request.app.state, "registry", None)
    network = registry.node.network.name if registry and registry.node else None
    try:
        view = await dashboard_view.load(state.pool, network, now, state.settings.hints)
    except BaseException:
        harvester.cancel()
        raise
    strip = status_strip(settings, None, await harvester, address, view)
    return HTMLResponse(
        dashboard_page(settings, view, strip, refresh, state.admin_on), headers=HEADERS
    )


@router.get(
    "/quarantine/{quarantine_id}",
    summary="A quarantined record's page (HTML)",
    response_class=HTMLResponse,
)
async def quarantined_record(
    state: State, quarantine_id: Annotated[int, Path(ge=1, le=2**63 - 1)]
) -> HTMLResponse:
    """One quarantined record: what is known of it, its reason, and its bytes as text (escaped,
    the first :data:`RAW_SHOWN` bytes)."""
    row = await link_store.quarantined_record(state.pool, quarantine_id)
    page, status_code = quarantine_page(state.settings, quarantine_id, row, RAW_SHOWN)
    return HTMLResponse(page, status_code=status_code, headers=RECORD_HEADERS)
