"""The WIS monitoring document at ``/wis/monitor.json``: the GISC monitoring JSON of WIS
("wmo_wis_monitoring" 1.1), with what this node knows.

Filled in: the centre, the time, the GISC's OAI-PMH and monitor URLs and contact e-mail, the
metadata catalogue (records now, records inserted or modified and records deleted since 00 UTC
today, by their local arrival datestamps) and the OAI-PMH service status (true when the database
answers with a current schema). What a catalogue node does not run (the portal, SRU, the cache,
the distribution system) is null, as the format allows.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from wiscat.provider.state import State
from wiscat.shared.db import records as store
from wiscat.shared.db.migrate import check_current
from wiscat.shared.oaipmh.dates import format_datestamp

log = logging.getLogger("wiscat.provider")

router = APIRouter(tags=["WIS monitoring"])

MONITOR_PATH = "/wis/monitor.json"


@router.get(MONITOR_PATH, summary="The WIS monitoring document (GISC monitoring JSON)")
async def monitor(state: State) -> JSONResponse:
    """Catalogue counts and OAI-PMH status for the WIS monitoring of GISCs."""
    settings = state.settings
    now = datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    catalogue: dict[str, Any] = {
        "number_of_metadata": None,
        "number_of_changes_insert_modify": None,
        "number_of_changes_delete": None,
    }
    try:
        async with state.pool.acquire() as conn:
            await check_current(conn)
            changes = await store.changes_since(conn, midnight)
    except Exception as exc:  # the document still answers: the status says what is wrong
        log.warning("WIS monitoring: the catalogue cannot be read: %s", exc)
        up = False
    else:
        up = True
        catalogue = {
            "number_of_metadata": changes.live,
            "number_of_changes_insert_modify": changes.inserted_modified,
            "number_of_changes_delete": changes.deleted,
        }
    root = settings.base_url.rsplit("/oai", 1)[0]
    document = {
        "wmo_wis_monitoring": "1.1",
        "centre": settings.gisc_name,
        "timestamp": format_datestamp(now),
        "gisc_properties": {
            "portal_url": None,
            "oaipmh_url": settings.base_url,
            "sru_url": None,
            "monitor_url": root + MONITOR_PATH,
            "cache_url": None,
            "centres_url": None,
            "events_url": None,
            "backup_giscs": None,
            "rmdcn": {"main": None, "sub": None, "DR_main": None},
            "contact_info": {"voice": None, "email": settings.admin_email},
        },
        "metrics": {
            "metadata_catalogue": catalogue,
            "cache_24h": None,
            "services": {
                "portal": {"status": None},
                "oaipmh": {"status": up},
                "sru": {"status": None},
                "distribution_system": {"status": None},
            },
        },
        "remarks": "" if up else "the catalogue database cannot be read",
    }
    return JSONResponse(document, headers={"Cache-Control": "no-cache"})
