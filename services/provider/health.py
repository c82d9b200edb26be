"""The provider's health for machines: ``/healthz`` (the process is alive), ``/readyz`` (the
database answers with a current schema) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from wiscat.provider.state import State
from wiscat.shared.db import records as store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.migrate import not_ready
from wiscat.shared.db.pool import Pool, answered

log = logging.getLogger("wiscat.provider")

router = APIRouter(tags=["health"])


async def counted(pool: Pool) -> tuple[list[store.SetCount], store.SetCount]:
    """Live and deleted records per set, and in the whole catalogue, for /metrics."""
    return await store.set_counts(pool), await store.catalogue_counts(pool)


@router.get("/healthz", summary="Liveness: the process answers", response_class=PlainTextResponse)
async def healthz() -> str:
    """The process is alive."""
    return "ok\n"


@router.get("/readyz", summary="Readiness: the database answers with a current schema")
async def readyz(state: State) -> Response:
    """The database answers and its schema is current."""
    reason = await not_ready(state.pool, state.settings.probe_timeout_seconds)
    if reason is not None:
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)
    return JSONResponse({"ready": True})


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(state: State) -> Response:
    """Prometheus text format."""
    gauge = state.metrics.records
    try:
        counts, whole = await answered(counted(state.pool), state.settings.probe_timeout_seconds)
    except DatabaseUnavailable as exc:
        # the process's own metrics are worth most during an outage: served all the same
        log.warning("metrics without the database's counts: %s: %s", exc.kind, exc)
        state.metrics.database_up.set(0)
    else:
        state.metrics.database_up.set(1)
        gauge.clear()  # a set whose last tombstone was purged goes (no await till it is full)
        for count in counts:
            gauge.labels(count.spec, "live").set(count.live)
            gauge.labels(count.spec, "deleted").set(count.deleted)
        state.metrics.catalogue_records.labels("live").set(whole.live)
        state.metrics.catalogue_records.labels("deleted").set(whole.deleted)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
