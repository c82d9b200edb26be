"""Real servers on loopback for the tests: the provider app under uvicorn, on an ephemeral port."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import uvicorn

from services.provider.app import create_app
from shared.settings import Settings


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class RunningProvider:
    root: str  # http://127.0.0.1:PORT
    settings: Settings

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
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
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
        yield RunningProvider(f"http://127.0.0.1:{port}", settings)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sock.close()
