"""A peer that hints: a small real server in front of a real provider, whose Identify advertises
a stream of change hints (docs/links.md, "Harvest on a hint") that the test drives, well or
badly; and a harvester (scheduler and subscriptions) running against it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import aiohttp
from aiohttp import web

from tests.support.servers import serving_app
from wiscat.harvester.context import HarvestContext
from wiscat.harvester.hints import Hints, StreamLimits
from wiscat.harvester.scheduler import Scheduler
from wiscat.shared.oaipmh.dates import format_datestamp
from wiscat.shared.oaipmh.namespaces import WISCAT_NS

Stream = Callable[[web.Request, "HintPeer"], Awaitable[web.StreamResponse]]


@dataclasses.dataclass
class HintPeer:
    """What it was asked, and how it answers: ``stream`` answers a stream request (None: a good
    stream of what :meth:`send` sends); ``lists`` may answer a list request itself."""

    target: str
    http: aiohttp.ClientSession
    url: str = ""  # its OAI-PMH base URL
    changes: str = ""  # the stream's URL, as its Identify advertises it
    advertise: bool = True
    stream: Stream | None = None
    lists: Callable[[web.Request], Awaitable[web.StreamResponse | None]] | None = None
    # each stream request: when, its sets, its Last-Event-ID
    asked: list[tuple[float, list[str], str | None]] = dataclasses.field(default_factory=list)
    queues: list[asyncio.Queue[bytes]] = dataclasses.field(default_factory=list)
    list_requests: int = 0

    @property
    def open_streams(self) -> int:
        return len(self.queues)

    def send(self, text: str) -> None:
        """Send ``text`` on every good stream open now."""
        for queue in self.queues:
            queue.put_nowait(text.encode())

    def change(self, sets: list[str] | None, until: datetime, event_id: str | None = None) -> None:
        stamp = format_datestamp(until)
        data = json.dumps({"sets": sets, "until": stamp})
        self.send(f"id: {event_id or stamp}\nevent: change\ndata: {data}\n\n")

    async def good(self, request: web.Request) -> web.StreamResponse:
        response = await open_stream(request)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.queues.append(queue)
        try:
            while True:
                try:
                    text = await asyncio.wait_for(queue.get(), 1.0)
                except TimeoutError:
                    text = b": heartbeat\n\n"
                if not text:  # the stream ends
                    return response
                await response.write(text)
        finally:
            self.queues.remove(queue)


async def open_stream(request: web.Request) -> web.StreamResponse:
    """The headers of a stream and its first line."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    await response.write(b"retry: 2000\n\n")
    return response


def with_changes(identify: bytes, url: str | None) -> bytes:
    """``identify`` advertising the stream ``url`` (None: none), instead of the provider's own."""
    identify = re.sub(
        rb"<description>(?:(?!</description>).)*:changes .*?</description>",
        b"",
        identify,
        flags=re.S,
    )
    if url is None:
        return identify
    description = (
        f'<description><wiscat:changes xmlns:wiscat="{WISCAT_NS}" url="{url}"/></description>'
    ).encode()
    return identify.replace(b"</Identify>", description + b"</Identify>")


@contextlib.asynccontextmanager
async def hint_peer(target: str) -> AsyncIterator[HintPeer]:
    """A peer in front of the provider at ``target`` (its /oai URL)."""
    async with aiohttp.ClientSession() as http:
        peer = HintPeer(target, http)

        async def oai(request: web.Request) -> web.StreamResponse:
            if request.query.get("verb") != "Identify":
                peer.list_requests += 1
                if peer.lists is not None:
                    answered = await peer.lists(request)
                    if answered is not None:
                        return answered
            async with http.get(target, params=request.query) as response:
                body = await response.read()
            if request.query.get("verb") == "Identify":
                body = with_changes(body, peer.changes if peer.advertise else None)
            return web.Response(body=body, content_type="text/xml")

        async def changes(request: web.Request) -> web.StreamResponse:
            peer.asked.append(
                (
                    time.monotonic(),
                    request.query.getall("set", []),
                    request.headers.get("Last-Event-ID"),
                )
            )
            if peer.stream is not None:
                return await peer.stream(request, peer)
            return await peer.good(request)

        app = web.Application()
        app.router.add_get("/oai", oai)
        app.router.add_get("/changes", changes)
        async with serving_app(app) as root:
            peer.url, peer.changes = root + "/oai", root + "/changes"
            yield peer


# Short guards and pace, so that a test sees several reconnections in seconds.
FAST = StreamLimits(
    read_timeout=2.0,
    connect_timeout=2.0,
    backoff_first=0.2,
    backoff_cap=1.0,
    healthy_after=3.0,
    recheck=3.0,
    lock_check=0.5,
)


@contextlib.asynccontextmanager
async def harvesting(
    ctx: HarvestContext, limits: StreamLimits = FAST, *, worker: str = "worker-a"
) -> AsyncIterator[Hints]:
    """A harvester on ``ctx``'s database: its scheduler, and its subscriptions to hints."""
    ctx = dataclasses.replace(ctx, worker=worker)
    scheduler = Scheduler(ctx)
    hints = Hints(ctx, scheduler.wake, limits)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(scheduler.run(stop)), asyncio.create_task(hints.run(stop))]
    try:
        yield hints
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def now() -> datetime:
    return datetime.now(UTC)
