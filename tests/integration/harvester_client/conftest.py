"""Fixtures of the harvester client's tests: a peer on loopback and a client to ask it."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from aiohttp import web
from multidict import MultiDict

from tests.integration.harvester_client.peers import SETTINGS, ClientFactory, Handler, Peer, Serve
from wiscat.harvester.client import OAIClient


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start a peer on 127.0.0.1 whose /oai answers with ``handler``."""
    runners: list[tuple[web.AppRunner, Peer]] = []

    async def start(handler: Handler) -> Peer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        peer = Peer(f"http://127.0.0.1:{sock.getsockname()[1]}/oai")

        async def endpoint(request: web.Request) -> web.StreamResponse:
            peer.queries.append(MultiDict(request.query))
            peer.headers.append(dict(request.headers))
            peer.times.append(time.monotonic())
            return await handler(request, peer)

        app = web.Application()
        app.router.add_get("/oai", endpoint)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        runners.append((runner, peer))
        return peer

    yield start
    for runner, peer in runners:
        peer.release.set()  # let a hanging handler end
        await runner.cleanup()


@pytest.fixture
async def client_for() -> AsyncIterator[ClientFactory]:
    """An OAIClient over its own session, built from SETTINGS with overrides."""
    sessions = []

    def build(**overrides: object) -> OAIClient:
        settings = replace(SETTINGS, **overrides)  # type: ignore[arg-type]
        session = OAIClient.session(settings)
        sessions.append(session)
        return OAIClient(session, settings)

    yield build
    for session in sessions:
        await session.close()


@pytest.fixture
async def client(client_for: ClientFactory) -> OAIClient:
    return client_for()
