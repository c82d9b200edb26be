"""Real servers on loopback for the tests: the provider app under uvicorn, on an ephemeral port,
and a small peer that serves fixed OAI-PMH answers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import uvicorn
from aiohttp import web
from fastapi import FastAPI

from wiscat.provider.app import create_app
from wiscat.provider.serving import provider_config
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.oaipmh import render
from wiscat.shared.settings import Settings


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class RunningProvider:
    root: str  # http://127.0.0.1:PORT
    settings: Settings
    app: FastAPI

    @property
    def oai(self) -> str:
        return self.root + "/oai"


def provider_settings(port: int, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "gisc_name": "TEST",
        "base_url": f"http://127.0.0.1:{port}/oai",
        "admin_token": "test-admin-token",
        "token_secret": "test-token-secret",
        "settle_seconds": 0,
        "page_size": 100,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


@contextlib.asynccontextmanager
async def running_provider(
    database_url: str, **overrides: object
) -> AsyncIterator[RunningProvider]:
    """Serve the provider app for ``database_url`` on 127.0.0.1 until the block ends."""
    sock = loopback_socket()
    port = sock.getsockname()[1]
    settings = provider_settings(port, **overrides)
    app = create_app(settings, database_url)
    config = provider_config(
        app, settings.header_timeout_seconds, log_config=None, access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    # the test runner owns the process's signals
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        else:
            raise RuntimeError("provider did not start")
        yield RunningProvider(f"http://127.0.0.1:{port}", settings, app)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sock.close()


def identify_document(request: web.Request, earliest: datetime) -> bytes:
    """A plain peer's Identify answer, its baseURL the URL the request came to."""
    url = str(request.url.with_query(None))
    return (
        render.response_start(datetime.now(UTC), url, {"verb": "Identify"}, "Identify")
        + render.identify(
            repository_name="peer",
            base_url=url,
            admin_emails=["a@b.c"],
            earliest_datestamp=earliest,
            deleted_record="transient",
        )
        + render.response_end("Identify")
    )


@contextlib.asynccontextmanager
async def serving(
    body: bytes,
    content_type: str = "text/xml",
    pages: Callable[[web.Request], Awaitable[bytes]] | None = None,
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[str]:
    """A peer that answers Identify properly and every list request with ``body`` (or with
    what ``pages`` makes of the request); over https with the server context ``tls``."""
    now = datetime.now(UTC)

    async def handler(request: web.Request) -> web.Response:
        if request.query.get("verb") == "Identify":
            return web.Response(body=identify_document(request, now), content_type="text/xml")
        answer = await pages(request) if pages else body
        return web.Response(body=answer, content_type=content_type)

    app = web.Application()
    app.router.add_get("/oai", handler)
    async with serving_app(app, tls) as root:
        yield root + "/oai"


@contextlib.asynccontextmanager
async def serving_app(
    app: web.Application, tls: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve an aiohttp application on 127.0.0.1 (an ephemeral port), over https with the
    server context ``tls``; yields its root URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def records_of(numbers: range, set_spec: str) -> list[bytes]:
    """The ``<record>`` elements of generated records ``numbers`` in set ``set_spec``, as a
    ListRecords page holds them."""
    now = datetime.now(UTC)
    return [
        render.record(identifier_for(n), now, [set_spec], False, generate_record(n))
        for n in numbers
    ]


def list_records_page(pieces: list[bytes]) -> bytes:
    now = datetime.now(UTC)
    return (
        render.response_start(now, "http://peer/oai", {"verb": "ListRecords"}, "ListRecords")
        + b"".join(pieces)
        + render.response_end("ListRecords")
    )
