"""Faulty peers for the harvest tests: a relay that turns bad, a peer with a skewed clock."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime

import aiohttp
from aiohttp import web

from tests.support.harvest_pair import SOURCE_SET
from tests.support.servers import serving_app
from wiscat.harvester.context import HarvestContext, RunReport
from wiscat.harvester.harvest import harvest_link
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.linkspec import build_link


async def add_link(ctx: HarvestContext, name: str, url: str) -> None:
    new = build_link(
        name=name,
        url=url,
        remote_set=SOURCE_SET,
        into=f"WIS-GISC-{name.upper()}",
        own_set=ctx.settings.own_set,
    )
    await store.ensure_set(ctx.pool, new.local_set, new.local_set, "remote")
    await link_store.add_link(ctx.pool, new)


async def run(ctx: HarvestContext, name: str) -> RunReport:
    link = await link_store.get_link(ctx.pool, name)
    assert link is not None
    return await harvest_link(ctx, link, window=False)


@dataclasses.dataclass
class Relay:
    """A small server that passes each request on to ``target`` (the real provider), unless
    ``answer`` answers it itself; what it was asked, and when."""

    target: str
    http: aiohttp.ClientSession
    url: str = ""
    asked: list[dict[str, str]] = dataclasses.field(default_factory=list)
    times: list[float] = dataclasses.field(default_factory=list)
    answer: Callable[[web.Request], Awaitable[web.StreamResponse | None]] | None = None
    kept: bytes = b""  # what an answer keeps between requests

    async def forward(self, request: web.Request) -> bytes:
        async with self.http.get(self.target, params=request.query) as response:
            return await response.read()

    def tokens(self) -> list[str | None]:
        """The resumptionToken of each list request, in order (None: a list's first)."""
        return [q.get("resumptionToken") for q in self.asked if q.get("verb") != "Identify"]


@contextlib.asynccontextmanager
async def relaying(target: str) -> AsyncIterator[Relay]:
    async with aiohttp.ClientSession() as http:
        relay = Relay(target, http)

        async def endpoint(request: web.Request) -> web.StreamResponse:
            relay.asked.append(dict(request.query))
            relay.times.append(time.monotonic())
            if relay.answer is not None:
                answered = await relay.answer(request)
                if answered is not None:
                    return answered
            return web.Response(body=await relay.forward(request), content_type="text/xml")

        app = web.Application()
        app.router.add_get("/oai", endpoint)
        async with serving_app(app) as root:
            relay.url = root + "/oai"
            yield relay


async def high_water_mark(ctx: HarvestContext, name: str) -> datetime | None:
    link = await link_store.get_link(ctx.pool, name)
    assert link is not None
    return link.high_water_mark
