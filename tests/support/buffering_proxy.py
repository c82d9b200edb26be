"""A reverse proxy that buffers responses: a small real server on loopback that forwards every
request to an upstream root and, while :attr:`BufferingProxy.buffering` is on, sends a response's
headers at once but holds its body back until the upstream's body ends (as a reverse proxy with
response buffering on does). A stream of change hints never ends: nothing of it gets through."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from tests.support.servers import serving_app

# the upstream's headers a proxy passes on (not those of the hop itself)
PASSED = ("Content-Type", "Content-Encoding", "Cache-Control", "Retry-After")


@dataclasses.dataclass
class BufferingProxy:
    upstream: str  # the root URL it forwards to
    http: aiohttp.ClientSession
    buffering: bool = True
    root: str = ""  # its own root URL

    async def forward(self, request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        timeout = aiohttp.ClientTimeout(total=None)
        async with self.http.get(
            self.upstream + request.path_qs, headers=headers, timeout=timeout
        ) as upstream:
            passed = {k: v for k in PASSED if (v := upstream.headers.get(k)) is not None}
            response = web.StreamResponse(status=upstream.status, headers=passed)
            await response.prepare(request)
            held = bytearray()
            while not gone(request):
                try:
                    chunk = await asyncio.wait_for(upstream.content.readany(), 0.1)
                except TimeoutError:
                    continue
                if not chunk:  # the upstream's body ended: all of it goes now
                    await response.write(bytes(held))
                    await response.write_eof()
                    return response
                held += chunk
                if not self.buffering:
                    await response.write(bytes(held))
                    held.clear()
        return response


def gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


@contextlib.asynccontextmanager
async def buffering_proxy(upstream: str) -> AsyncIterator[BufferingProxy]:
    """A proxy in front of ``upstream`` (a root URL, no trailing slash), buffering at first."""
    async with aiohttp.ClientSession(auto_decompress=False) as http:
        proxy = BufferingProxy(upstream, http)
        app = web.Application()
        app.router.add_get("/{tail:.*}", proxy.forward)
        async with serving_app(app) as root:
            proxy.root = root
            yield proxy
