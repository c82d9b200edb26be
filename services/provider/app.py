"""The provider's FastAPI application, assembled: its middleware (the body caps, HEAD as GET,
the request deadline), its routers (/oai, /admin, the registry, /wis/monitor.json, the
dashboard, /healthz, /readyz, /metrics), its error handlers and its lifespan
(:mod:`wiscat.provider.lifespan`)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi_offline import FastAPIOffline
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wiscat.provider import admin, changes, health, oai, registry, wis_monitor
from wiscat.provider.dashboard import routes as dashboard
from wiscat.provider.lifespan import lifespan
from wiscat.provider.limits import BodyCap, BodyLimit
from wiscat.provider.openapi import document_bad_requests, document_bearer
from wiscat.provider.responses import (
    CUT_OFF,
    MAX_POST_BYTES,
    log_unavailable,
    unavailable_json,
)
from wiscat.shared.db.errors import DatabaseUnavailable, NoAnswer, UnstorableText
from wiscat.shared.iso19139 import MAX_RECORD_BYTES
from wiscat.shared.settings import Settings
from wiscat.shared.tasks import abandon

log = logging.getLogger("wiscat.provider")

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


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    """405 naming every method the path has: Starlette names the methods of the first route of
    the path only (GET, for /oai, whose POST is a route of its own), RFC 9110 §15.5.6 asks for
    all of them."""
    allowed = {
        method
        for method in ("DELETE", "GET", "PATCH", "POST", "PUT")
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    }
    if "GET" in allowed:
        allowed.add("HEAD")  # HeadAsGet
    return PlainTextResponse(
        "Method Not Allowed", status_code=405, headers={"Allow": ", ".join(sorted(allowed))}
    )


async def bad_request(request: Request, exc: Exception) -> JSONResponse:
    """What is wrong and where, without the handler's source location str(exc) would add."""
    assert isinstance(exc, RequestValidationError)  # the one class it is registered for
    errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
    return JSONResponse({"detail": "bad request", "errors": errors}, status_code=400)


async def unstorable(request: Request, exc: Exception) -> JSONResponse:
    log.info("refused %s %s: text with U+0000", request.method, request.url.path)
    return JSONResponse(
        {"detail": "bad request: the request holds U+0000, which no text here can hold"},
        status_code=400,
    )


async def unavailable(request: Request, exc: Exception) -> JSONResponse:
    # /oai answers this itself (text); the dashboard, admin and registry answer it here
    assert isinstance(exc, DatabaseUnavailable)  # the one class it is registered for
    log_unavailable(f"{request.method} {request.url.path}", exc)
    return unavailable_json()


# /docs lists the operations under these, in this order
TAGS = [
    {
        "name": "OAI-PMH",
        "description": "The OAI-PMH 2.0 interface harvesters read the catalogue by.",
    },
    {
        "name": "admin",
        "description": "The node's own records, its links, runs, quarantine and checks; "
        "bearer token WISCAT_ADMIN_TOKEN (unset: 403).",
    },
    {
        "name": "registry",
        "description": "The distributed registry of OAI-PMH base URLs, and its tracker; 404 "
        "when this node is in no registry network.",
    },
    {"name": "WIS monitoring", "description": "The GISC monitoring document of WIS."},
    {"name": "dashboard", "description": "The operator's pages (HTML)."},
    {"name": "health", "description": "Liveness, readiness and Prometheus metrics."},
]


def create_app(settings: Settings, database_url: str) -> FastAPI:
    """The provider app; the pool and everything else are made in its lifespan."""
    logging.getLogger("uvicorn.error").addFilter(CUT_OFF)  # added once, however many apps

    # Swagger UI's script, style sheet and icon come from the node itself (/docs/static/...),
    # not from a CDN: /docs works on a closed network
    app = FastAPIOffline(
        title="wiscat provider",
        summary="OAI-PMH 2.0 provider of a WIS catalogue node",
        openapi_tags=TAGS,
        lifespan=lifespan(settings, database_url),
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
    app.include_router(changes.router)
    app.include_router(admin.router)
    app.include_router(registry.router)
    app.include_router(wis_monitor.router)
    app.include_router(dashboard.router)
    app.include_router(health.router)

    app.add_exception_handler(405, method_not_allowed)
    app.add_exception_handler(RequestValidationError, bad_request)
    app.add_exception_handler(UnstorableText, unstorable)
    app.add_exception_handler(DatabaseUnavailable, unavailable)
    document_bad_requests(app)
    document_bearer(app)
    return app
