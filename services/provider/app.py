"""The provider's FastAPI application: /oai, /admin, /healthz, /readyz, /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wiscat.provider import admin, monitoring, oai, registry, ui
from wiscat.provider.limits import BodyCap, BodyLimit
from wiscat.provider.metrics import ProviderMetrics
from wiscat.provider.openapi import document_bad_requests, document_bearer
from wiscat.provider.responses import (
    CUT_OFF,
    MAX_POST_BYTES,
    log_unavailable,
    unavailable_json,
)
from wiscat.provider.state import ProviderState, State
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db import refusals as refusal_store
from wiscat.shared.db.errors import DatabaseUnavailable, NoAnswer, UnstorableText, kind_of
from wiscat.shared.db.migrate import check_current, not_ready
from wiscat.shared.db.pool import Pool, answered, create_pool
from wiscat.shared.ingest import ensure_own_set
from wiscat.shared.iso19139 import MAX_RECORD_BYTES
from wiscat.shared.oaipmh.tokens import RetiredSecret, TokenCodec
from wiscat.shared.settings import Settings
from wiscat.shared.tasks import abandon
from wiscat.shared.version import VERSION

log = logging.getLogger("wiscat.provider")

PURGE_EVERY = 3600.0

# Each request body's cap, the first that covers the request (RELIABILITY S11); a route not
# named here, a future one included, gets the default.
BODY_CAPS = (
    BodyCap("PUT", "/admin/records/", MAX_RECORD_BYTES, "a record"),
    BodyCap(None, "/admin/", admin.MAX_REQUEST_BYTES, "an admin request"),
    BodyCap("POST", "/registry/blocks", registry.MAX_BLOCKS_BODY, "the blocks sent at once"),
    BodyCap("POST", "/urls", registry.MAX_FORM_BODY, "a form"),
    BodyCap("POST", "/registry/announce", registry.MAX_FORM_BODY, "a form"),
    BodyCap("POST", "/oai", MAX_POST_BYTES, "an OAI-PMH request"),
)
DEFAULT_BODY_CAP = 64 * 1024

# What .env.example sets, to be replaced: a node that keeps one is open to whoever read it
PLACEHOLDER_SECRETS = frozenset({"change-me", "change-me-too", "changeme"})


def warn_placeholder_secrets(settings: Settings) -> None:
    """Warn while the admin token or the token secret is still the example's placeholder."""
    for name, secret in (
        ("WISCAT_ADMIN_TOKEN", settings.admin_token),
        ("WISCAT_TOKEN_SECRET", settings.token_secret),
    ):
        if secret is not None and secret.get_secret_value().strip().lower() in PLACEHOLDER_SECRETS:
            log.warning(
                "%s is the placeholder of .env.example: set a long random one "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))')",
                name,
            )


class HeadAsGet:
    """HEAD answered as GET, wherever GET is (RFC 9110 §9.1: every general-purpose server
    supports both; monitors probe /healthz with it). The route sees a GET; the server, which
    still knows the request as HEAD, sends the headers and leaves the body out."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = {**scope, "method": "GET"}
        await self.app(scope, receive, send)


class Deadline:
    """A request that has not begun its answer ``seconds`` after its body came in (a record
    PUT over a slow line takes its time) gets 503 with Retry-After, as one whose database
    cannot be reached: a database that hangs would hold the dashboard's, the admin API's and
    the registry's requests for minutes. Once the answer begins, no deadline is left (a large
    answer to a slow client takes its time). /oai, /readyz and /metrics bound their database
    work themselves, and answer it each in its own way. ``longer`` gives a request (method,
    path) that waits for something else too the time it may take for that."""

    OWN = frozenset({"/oai", "/healthz", "/readyz", "/metrics"})

    def __init__(
        self, app: ASGIApp, seconds: float, longer: dict[tuple[str, str], float] | None = None
    ) -> None:
        self.app = app
        self.seconds = seconds
        self.longer = longer or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.OWN:
            await self.app(scope, receive, send)
            return
        seconds = self.seconds + self.longer.get((scope["method"], scope["path"]), 0.0)
        clock = asyncio.get_running_loop().time
        began = False
        last_in = clock()

        async def receiving() -> Message:
            nonlocal last_in
            message = await receive()
            last_in = clock()
            return message

        async def answering(message: Message) -> None:
            nonlocal began
            began = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receiving, answering))
        try:
            while not (task.done() or began) and clock() < last_in + seconds:
                await asyncio.wait({task}, timeout=last_in + seconds - clock())
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task.done() or began:
            await task
            return
        abandon(task)  # as wiscat.shared.db.pool.answered does, for the same reason
        log_unavailable(
            f"{scope['method']} {scope['path']}",
            NoAnswer(f"the database did not answer within {seconds:g} s"),
        )
        await unavailable_json()(scope, receive, send)


async def counted(pool: Pool) -> tuple[list[store.SetCount], store.SetCount]:
    """Live and deleted records per set, and in the whole catalogue, for /metrics."""
    return await store.set_counts(pool), await store.catalogue_counts(pool)


async def _purge_loop(state: ProviderState) -> None:
    """Drop what has outlived its retention period: tombstones (WIS guidelines: kept three months),
    and the history (harvest runs, quarantined records, check reports), which would otherwise
    grow without end."""
    settings = state.settings
    tombstones = timedelta(days=settings.deleted_retention_days)
    history = timedelta(days=settings.history_retention_days)
    # hourly; a retention shorter than a few hours (a test, a demo) is checked more often
    shortest = min(r for r in (tombstones, history) if r > timedelta(0))
    every = min(PURGE_EVERY, max(shortest.total_seconds() / 4, 1.0))
    while True:
        try:
            if tombstones:
                purged = await store.purge_tombstones(state.pool, tombstones)
                if purged:
                    state.metrics.tombstones_purged.inc(purged)
                    log.info("purged %d tombstones older than %s", purged, tombstones)
            if history:
                runs, quarantined = await link_store.purge_history(state.pool, history)
                reports = await check_store.purge_reports(state.pool, history)
                refused = await refusal_store.purge_refusals(state.pool, history)
                if runs or quarantined or reports or refused:
                    log.info(
                        "purged %d harvest runs, %d quarantined records, %d refused records "
                        "and %d check reports older than %s",
                        runs,
                        quarantined,
                        refused,
                        reports,
                        history,
                    )
        except Exception as exc:  # a database outage: logged, tried again next round
            log.warning("purge failed: %s: %s", kind_of(exc), exc)
        await asyncio.sleep(every)


def token_codec(settings: Settings, secret: bytes) -> TokenCodec:
    """The resumptionToken codec: signing with ``secret``, taking tokens of the previous secret
    until the end of its grace period (a rotation), expiring them if a lifetime is set."""
    hours = settings.token_lifetime_hours
    retired = []
    if settings.token_secret_previous and settings.token_secret_previous_until:
        until = settings.token_secret_previous_until
        if until <= datetime.now(UTC):
            log.warning(
                "the grace period of WISCAT_TOKEN_SECRET_PREVIOUS ended at %s: its tokens are "
                "refused; remove it and WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL",
                until.isoformat(),
            )
        else:
            log.info("tokens of WISCAT_TOKEN_SECRET_PREVIOUS are taken until %s", until.isoformat())
        retired.append(
            RetiredSecret(
                settings.token_secret_previous.get_secret_value().encode(),
                settings.token_secret_previous_until,
            )
        )
    return TokenCodec(
        secret, lifetime=timedelta(hours=hours) if hours > 0 else None, retired=retired
    )


def create_app(settings: Settings, database_url: str) -> FastAPI:
    """The provider app; the pool and everything else are made in its lifespan."""
    logging.getLogger("uvicorn.error").addFilter(CUT_OFF)  # added once, however many apps

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(
            database_url, max_size=10, statement_cache=settings.database_statement_cache
        )
        read_pool: Pool | None = None
        try:
            if settings.database_read_url:
                read_pool = await create_pool(
                    settings.database_read_url,
                    max_size=10,
                    statement_cache=settings.database_statement_cache,
                )
            async with pool.acquire() as conn:
                await check_current(conn)
            await ensure_own_set(pool, settings.own_set)
            secret = (
                settings.token_secret.get_secret_value().encode()
                if settings.token_secret
                else await store.node_secret(pool, "resumption_token")
            )
            codec = token_codec(settings, secret)
            state = ProviderState(settings, pool, codec, ProviderMetrics(), read_pool)
            app.state.provider = state
            await registry.start(app, state)
            purge = (
                asyncio.create_task(_purge_loop(state))
                if settings.deleted_retention_days > 0 or settings.history_retention_days > 0
                else None
            )
            log.info(
                "provider ready: %s (own set %s, wiscat %s)",
                settings.base_url,
                settings.own_set,
                VERSION,
            )
            warn_placeholder_secrets(settings)
            yield
            await registry.stop(app)
            await state.lists.close()
            if purge:
                purge.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await purge
        finally:
            if read_pool is not None:
                await read_pool.close()
            await pool.close()

    # Swagger UI's script, style sheet and icon come from the node itself (/docs/static/...),
    # not from a CDN: /docs works on a closed network
    app = FastAPIOffline(
        title="wiscat provider",
        summary="OAI-PMH 2.0 provider of a WIS catalogue node",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        static_url="/docs/static",
    )
    # a submitted URL is fetched (its Identify), then its block waited for
    submit = settings.registry_fetch_timeout_seconds + settings.registry_submit_wait_seconds
    app.add_middleware(
        Deadline, seconds=settings.database_timeout_seconds, longer={("POST", "/urls"): submit}
    )
    app.add_middleware(HeadAsGet)
    # outermost: a body past its cap is refused before anything else sees it
    app.add_middleware(BodyLimit, caps=BODY_CAPS, default=DEFAULT_BODY_CAP)
    app.include_router(oai.router)
    app.include_router(admin.router)
    app.include_router(registry.router)
    app.include_router(monitoring.router)
    app.include_router(ui.router)

    @app.exception_handler(405)
    async def _method_not_allowed(request: Request, exc: Exception) -> Response:
        # Starlette names the methods of the first route of the path only (GET, for /oai,
        # whose POST is a route of its own): RFC 9110 §15.5.6 asks for every one the path has
        allowed = {
            method
            for method in ("DELETE", "GET", "PATCH", "POST", "PUT")
            if any(
                route.matches({**request.scope, "method": method})[0] == Match.FULL
                for route in app.router.routes
            )
        }
        if "GET" in allowed:
            allowed.add("HEAD")  # HeadAsGet
        return PlainTextResponse(
            "Method Not Allowed", status_code=405, headers={"Allow": ", ".join(sorted(allowed))}
        )

    document_bad_requests(app)
    document_bearer(app)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # what is wrong and where, without the handler's source location str(exc) would add
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        return JSONResponse({"detail": "bad request", "errors": errors}, status_code=400)

    async def _unstorable(request: Request, exc: Exception) -> JSONResponse:
        log.info("refused %s %s: text with U+0000", request.method, request.url.path)
        return JSONResponse(
            {"detail": "bad request: the request holds U+0000, which no text here can hold"},
            status_code=400,
        )

    app.add_exception_handler(UnstorableText, _unstorable)

    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        # /oai answers this itself (text); the dashboard, admin and registry answer it here
        assert isinstance(exc, DatabaseUnavailable)  # the one class it is registered for
        log_unavailable(f"{request.method} {request.url.path}", exc)
        return unavailable_json()

    app.add_exception_handler(DatabaseUnavailable, _unavailable)

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        """The process is alive."""
        return "ok\n"

    @app.get("/readyz")
    async def readyz(state: State) -> Response:
        """The database answers and its schema is current."""
        reason = await not_ready(state.pool, settings.probe_timeout_seconds)
        if reason is not None:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/metrics")
    async def metrics(state: State) -> Response:
        """Prometheus text format."""
        gauge = state.metrics.records
        try:
            counts, whole = await answered(counted(state.pool), settings.probe_timeout_seconds)
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

    return app
