"""Small real peers for the harvester client's tests: recorded answers, pages built to order,
and the client settings they run with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from aiohttp import web
from multidict import MultiDict

from wiscat.harvester.client import ClientSettings, OAIClient
from wiscat.shared.oaipmh.pages import HeaderItem, RecordItem

FIXTURES = Path(__file__).parents[2] / "data" / "oai"


LOGGER = "wiscat.harvester.client"


SETTINGS = ClientSettings(
    connect_timeout=2.0,
    read_timeout=2.0,
    total_timeout=20.0,
    max_retries=2,
    backoff_base=0.01,
    backoff_cap=0.05,
    retry_after_cap=5.0,
)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def xml(name_or_body: str | bytes, status: int = 200) -> web.Response:
    body = fixture(name_or_body) if isinstance(name_or_body, str) else name_or_body
    return web.Response(body=body, status=status, content_type="text/xml", charset="utf-8")


@dataclass
class Peer:
    """A running fake peer: its OAI-PMH URL and what it received."""

    url: str
    queries: list[MultiDict[str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def count(self) -> int:
        return len(self.queries)


Handler = Callable[[web.Request, Peer], Awaitable[web.StreamResponse]]


Serve = Callable[[Handler], Awaitable[Peer]]


ClientFactory = Callable[..., OAIClient]


def identifier_of(item: HeaderItem | RecordItem) -> str:
    return item.identifier if isinstance(item, HeaderItem) else item.header.identifier


async def identifiers(client: OAIClient, url: str, from_: datetime | None = None) -> list[str]:
    """Harvest a whole ListRecords list; the identifiers in arrival order."""
    seen: list[str] = []
    async for page in client.list_pages(
        url, "ListRecords", metadata_prefix="iso19139", from_=from_
    ):
        seen.extend(identifier_of(item) for item in page.items())
    return seen


def two_pages(request: web.Request) -> web.Response:
    if "resumptionToken" in request.query:
        return xml("ListRecords-page2.xml")
    return xml("ListRecords-page1.xml")
