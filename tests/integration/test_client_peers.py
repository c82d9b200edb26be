"""The harvester's OAI-PMH client against misbehaving peers.

Each peer is a small real aiohttp server on 127.0.0.1 (an ephemeral port) serving the recorded
responses of tests/data/oai/; nothing in the HTTP path is mocked or patched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import ssl
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
import trustme
from aiohttp import web
from multidict import MultiDict

from tests.servers import serving_app
from wiscat.harvester.client import ClientSettings, OAIClient
from wiscat.harvester.errors import (
    BadResponse,
    PeerHTTPError,
    PeerTimeout,
    PeerUnreachable,
    RepeatedResumptionToken,
    ResponseTooLarge,
    TooManyEmptyPages,
)
from wiscat.harvester.page_records import Page
from wiscat.harvester.service import client_settings
from wiscat.shared.oaipmh import errors
from wiscat.shared.oaipmh.pages import HeaderItem, MalformedResponse, NotOAIResponse, RecordItem
from wiscat.shared.settings import Settings

FIXTURES = Path(__file__).parent.parent / "data" / "oai"
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


# --- paging -----------------------------------------------------------------------------------


async def test_a_list_is_followed_page_by_page(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return two_pages(request)

    peer = await serve(handler)
    requests_while_reading: list[int] = []
    seen: list[str] = []
    async for page in client.list_pages(
        peer.url, "ListRecords", metadata_prefix="iso19139", set_spec="WIS-GISC-PEER"
    ):
        for item in page.items():
            # a consumer that never yields to the event loop reads page N to its end before
            # the request for page N+1 (sent ahead) goes out
            requests_while_reading.append(peer.count)
            seen.append(identifier_of(item))
    assert seen == [
        "urn:x-wmo:md:int.wmo.wis::A",
        "urn:x-wmo:md:int.wmo.wis::B",
        "urn:x-wmo:md:int.wmo.wis::C",
    ]
    assert requests_while_reading == [1, 1, 2]
    assert peer.queries[0] == MultiDict(
        verb="ListRecords", metadataPrefix="iso19139", set="WIS-GISC-PEER"
    )
    # OAI-PMH 2.0 §3.5: resumptionToken is an exclusive argument
    assert peer.queries[1] == MultiDict(verb="ListRecords", resumptionToken="page-2-token")
    assert "gzip" in peer.headers[0].get("Accept-Encoding", "")


async def test_the_next_page_is_asked_for_while_a_page_is_read(
    serve: Serve, client: OAIClient
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return two_pages(request)

    peer = await serve(handler)
    asked_while_reading: list[int] = []
    seen: list[str] = []
    async for page in client.list_pages(peer.url, "ListRecords", metadata_prefix="iso19139"):
        await asyncio.sleep(0.3)  # a consumer reading in a thread lets the loop run meanwhile
        asked_while_reading.append(peer.count)
        seen.extend(identifier_of(item) for item in page.items())
    # page 2 was asked for while page 1 was being read, with its token, and only once
    assert asked_while_reading == [2, 2]
    assert seen == [
        "urn:x-wmo:md:int.wmo.wis::A",
        "urn:x-wmo:md:int.wmo.wis::B",
        "urn:x-wmo:md:int.wmo.wis::C",
    ]
    assert peer.queries[1] == MultiDict(verb="ListRecords", resumptionToken="page-2-token")


async def test_a_misleading_tail_is_not_followed(serve: Serve, client: OAIClient) -> None:
    # A comment after the document announces another token than the list's own: the request
    # sent ahead with it is dropped, and the list goes on with the token the parse found.
    decoy = fixture("ListRecords-page1.xml").rstrip() + (
        b"\n<!-- <resumptionToken>decoy</resumptionToken> -->\n"
    )

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        token = request.query.get("resumptionToken")
        if token == "decoy":
            return xml("error-badResumptionToken.xml")
        return xml("ListRecords-page2.xml") if token else xml(decoy)

    peer = await serve(handler)
    seen: list[str] = []
    async for page in client.list_pages(peer.url, "ListRecords", metadata_prefix="iso19139"):
        await asyncio.sleep(0.3)
        seen.extend(identifier_of(item) for item in page.items())
    assert seen == [
        "urn:x-wmo:md:int.wmo.wis::A",
        "urn:x-wmo:md:int.wmo.wis::B",
        "urn:x-wmo:md:int.wmo.wis::C",
    ]
    assert [q.get("resumptionToken") for q in peer.queries] == [None, "decoy", "page-2-token"]


async def test_no_request_goes_ahead_past_the_request_limit(
    serve: Serve, client_for: ClientFactory
) -> None:
    # A one-page list whose tail announces a token (a decoy in a comment): at a limit of one
    # request, the list is complete, and nothing is sent ahead that the limit would refuse.
    decoy = fixture("ListRecords-page2.xml").rstrip() + (
        b"\n<!-- <resumptionToken>decoy</resumptionToken> -->\n"
    )

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml(decoy)

    peer = await serve(handler)
    assert await identifiers(client_for(max_requests_per_list=1), peer.url) == [
        "urn:x-wmo:md:int.wmo.wis::C"
    ]
    assert peer.count == 1


def numbered_page(number: int, last: int, *, tail: bytes = b"") -> bytes:
    """Page ``number`` of a list of ``last`` pages, two headers each, tokens "p2", "p3"..."""
    token = f"<resumptionToken>p{number + 1}</resumptionToken>" if number < last else ""
    headers = "".join(
        f"<header><identifier>id-{number}-{i}</identifier>"
        "<datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        for i in (1, 2)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        "<responseDate>2024-01-02T00:00:00Z</responseDate>"
        '<request verb="ListIdentifiers">http://peer/oai</request>'
        f"<ListIdentifiers>{headers}{token}</ListIdentifiers></OAI-PMH>"
    ).encode() + tail


async def test_several_pages_are_read_at_once_and_handed_over_in_order(
    serve: Serve, client: OAIClient
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        token = request.query.get("resumptionToken")
        return xml(numbered_page(int(token[1:]) if token else 1, 6))

    peer = await serve(handler)
    reading = 0
    most_at_once = 0

    async def read(page: Page) -> list[str]:
        nonlocal reading, most_at_once
        reading += 1
        most_at_once = max(most_at_once, reading)
        await asyncio.sleep(0.1)  # a read in another process: the loop runs meanwhile
        reading -= 1
        return [identifier_of(item) for item in page.items()]

    seen: list[str] = []
    async for page, ids in client.read_pages(
        peer.url, "ListIdentifiers", read, metadata_prefix="iso19139", ahead=3
    ):
        assert page.consumed
        seen += ids
    assert seen == [f"id-{n}-{i}" for n in range(1, 7) for i in (1, 2)]
    assert most_at_once == 3
    # every page asked for once, each with the token its predecessor announced
    assert [q.get("resumptionToken") for q in peer.queries] == [None, "p2", "p3", "p4", "p5", "p6"]


async def test_pages_read_ahead_on_a_wrong_guess_are_dropped_unseen(
    serve: Serve, client: OAIClient
) -> None:
    # Page 2's tail announces "decoy" (in a comment): the request made ahead with it gets an
    # HTML page, which cannot be read, but the list goes on with the token page 2 really holds
    # and that failure is never seen.
    decoy = b"<!-- <resumptionToken>decoy</resumptionToken> -->"

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        token = request.query.get("resumptionToken")
        if token == "decoy":
            return xml(b"<html>not a page</html>")
        number = int(token[1:]) if token else 1
        return xml(numbered_page(number, 4, tail=decoy if number == 2 else b""))

    peer = await serve(handler)

    async def read(page: Page) -> list[str]:
        await asyncio.sleep(0.05)
        return [identifier_of(item) for item in page.items()]  # BadResponse for the decoy's

    seen: list[str] = []
    async for _, ids in client.read_pages(
        peer.url, "ListIdentifiers", read, metadata_prefix="iso19139", ahead=3
    ):
        seen += ids
    assert seen == [f"id-{n}-{i}" for n in range(1, 5) for i in (1, 2)]
    asked = [q.get("resumptionToken") for q in peer.queries]
    assert asked == [None, "p2", "decoy", "p3", "p4"]


async def test_gzip_responses_are_decompressed(serve: Serve, client: OAIClient) -> None:
    """H22: gzip answers are decoded."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        response = two_pages(request)
        response.enable_compression()
        return response

    peer = await serve(handler)
    assert len(await identifiers(client, peer.url)) == 3


@pytest.mark.parametrize(
    ("encoding", "wbits"),
    [("deflate", 15), ("deflate", -15), ("gzip", 31), ("deflate", 31)],
    ids=["deflate-zlib", "deflate-raw", "gzip", "gzip-called-deflate"],
)
async def test_every_deflate_framing_is_read(
    serve: Serve, client: OAIClient, encoding: str, wbits: int
) -> None:
    # "deflate" is zlib-wrapped (RFC 9110 §8.4.1.2), yet some servers send it raw: that failed
    # the list with "broken deflate stream"
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        packed = zlib.compressobj(6, zlib.DEFLATED, wbits)
        body = packed.compress(two_pages(request).body) + packed.flush()  # type: ignore[arg-type]
        return web.Response(
            body=body, headers={"Content-Type": "text/xml", "Content-Encoding": encoding}
        )

    peer = await serve(handler)
    assert len(await identifiers(client, peer.url)) == 3


async def test_a_broken_gzip_stream_fails_the_list(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        whole = zlib.compress(two_pages(request).body, wbits=31)  # type: ignore[arg-type]
        broken = whole[:20] + bytes(b ^ 0x5A for b in whole[20:60]) + whole[60:]
        return web.Response(
            body=broken, headers={"Content-Type": "text/xml", "Content-Encoding": "gzip"}
        )

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await identifiers(client, peer.url)
    assert "broken gzip stream" in caught.value.reason
    assert peer.count == 1  # the peer's answer, not a transient failure


async def test_records_out_of_datestamp_order_are_all_delivered(
    serve: Serve, client: OAIClient
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("ListRecords-out-of-order.xml")

    peer = await serve(handler)
    assert await identifiers(client, peer.url) == ["late", "early", "middle"]


async def test_no_records_match_is_an_empty_complete_list(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("error-noRecordsMatch.xml")

    peer = await serve(handler)
    pages = 0
    async for page in client.list_pages(peer.url, "ListRecords", metadata_prefix="iso19139"):
        pages += 1
        assert list(page.items()) == []
        assert page.summary.resumption_token is None
    assert pages == 1 and peer.count == 1


async def test_a_token_that_expires_mid_list(serve: Serve, client: OAIClient) -> None:
    """H12: badResumptionToken mid-list ends the list after the pages read."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if "resumptionToken" in request.query:
            return xml("error-badResumptionToken.xml")
        return xml("ListRecords-page1.xml")

    peer = await serve(handler)
    seen: list[str] = []
    completed_pages = 0
    with pytest.raises(errors.BadResumptionToken):
        async for page in client.list_pages(peer.url, "ListRecords", metadata_prefix="iso19139"):
            seen.extend(identifier_of(item) for item in page.items())
            completed_pages += 1
    # the page before the failure was delivered whole
    assert seen == ["urn:x-wmo:md:int.wmo.wis::A", "urn:x-wmo:md:int.wmo.wis::B"]
    assert completed_pages == 1 and peer.count == 2


async def test_a_repeated_token_stops_the_list(serve: Serve, client: OAIClient) -> None:
    """H08: a resumptionToken sent again stops the list."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("ListRecords-page1.xml")  # always the same token: a paging loop

    peer = await serve(handler)
    with pytest.raises(RepeatedResumptionToken) as caught:
        await identifiers(client, peer.url)
    assert peer.count == 2
    assert "page-2-token" in caught.value.reason


async def test_too_many_empty_pages(serve: Serve, client_for: ClientFactory) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml(
            b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
            b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request>"
            b"<ListRecords><resumptionToken>t%d</resumptionToken></ListRecords></OAI-PMH>"
            % peer.count
        )

    peer = await serve(handler)
    with pytest.raises(TooManyEmptyPages):
        await identifiers(client_for(max_empty_pages=2), peer.url)
    assert peer.count == 3


# --- granularity ------------------------------------------------------------------------------


async def test_a_day_granularity_peer_is_asked_in_days(serve: Serve, client: OAIClient) -> None:
    """H15: a peer whose Identify says days is asked in days."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if request.query["verb"] == "Identify":
            return xml("Identify-day-granularity.xml")
        return xml("ListIdentifiers-day-granularity.xml")

    peer = await serve(handler)
    info = await client.identify(peer.url)
    assert info.day_granularity
    headers: list[HeaderItem | RecordItem] = []
    async for page in client.list_pages(
        peer.url,
        "ListIdentifiers",
        metadata_prefix="iso19139",
        from_=datetime(2024, 3, 1, 23, 59, 30, tzinfo=UTC),
        until=datetime(2024, 3, 5, 6, 0, tzinfo=UTC),
        day_granularity=info.day_granularity,
    ):
        headers.extend(page.items())
    # from rounds down to its day, so nothing of 2024-03-01 is missed
    assert peer.queries[1]["from"] == "2024-03-01"
    assert peer.queries[1]["until"] == "2024-03-05"
    assert [h.datestamp_parsed for h in headers if isinstance(h, HeaderItem)] == [
        datetime(2024, 3, 4, tzinfo=UTC),
        datetime(2024, 3, 5, tzinfo=UTC),
    ]


async def test_a_seconds_peer_is_asked_in_seconds(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("ListRecords-out-of-order.xml")

    peer = await serve(handler)
    await identifiers(client, peer.url, from_=datetime(2024, 3, 1, 23, 59, 30, 999_999, tzinfo=UTC))
    assert peer.queries[0]["from"] == "2024-03-01T23:59:30Z"


# --- retries ----------------------------------------------------------------------------------


def unavailable_once(retry_after: Callable[[], str], then: str) -> Handler:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if peer.count == 1:
            return web.Response(
                status=503, text="overloaded", headers={"Retry-After": retry_after()}
            )
        return xml(then)

    return handler


async def test_503_retry_after_seconds(serve: Serve, client: OAIClient) -> None:
    """H03: a 503's Retry-After in seconds is waited out."""
    peer = await serve(unavailable_once(lambda: "1", "Identify.xml"))
    info = await client.identify(peer.url)
    assert info.repository_name == "GISC Peer"
    assert peer.count == 2
    assert 0.9 <= peer.times[1] - peer.times[0] < 1.8


async def test_503_retry_after_http_date(serve: Serve, client: OAIClient) -> None:
    """H04: a 503's Retry-After as an HTTP date is waited out."""

    def in_two_seconds() -> str:
        return format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)

    peer = await serve(unavailable_once(in_two_seconds, "Identify.xml"))
    await client.identify(peer.url)
    assert peer.count == 2
    # an HTTP-date has whole seconds: the wait is between 1 and 2 s
    assert 0.9 <= peer.times[1] - peer.times[0] < 2.6


async def test_retry_after_is_capped(serve: Serve, client_for: ClientFactory) -> None:
    peer = await serve(unavailable_once(lambda: "3600", "Identify.xml"))
    await client_for(retry_after_cap=0.3).identify(peer.url)
    assert 0.25 <= peer.times[1] - peer.times[0] < 1.5


async def test_500_then_success_is_retried_and_logged(
    serve: Serve, client: OAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if peer.count == 1:
            return web.Response(status=500, text="Internal Server Error")
        return xml("Identify.xml")

    peer = await serve(handler)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await client.identify(peer.url)
    assert peer.count == 2
    retries = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(retries) == 1
    assert peer.url in retries[0] and "attempt 1" in retries[0] and "500" in retries[0]


@pytest.mark.parametrize(("status", "text"), [(404, "Not Found"), (302, "moved somewhere")])
async def test_h05_h11_a_404_or_a_302_without_location_is_final(
    serve: Serve, client: OAIClient, status: int, text: str
) -> None:
    """H05: a 404 is final; H11: a 302 with no Location leads nowhere, and is final too (aiohttp
    lists it in its own redirect history, but nothing was followed): one request, its status in
    the reason."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(status=status, text=text)

    peer = await serve(handler)
    with pytest.raises(PeerHTTPError) as caught:
        await client.identify(peer.url)
    assert caught.value.status == status
    assert caught.value.reason == f"HTTP {status} from {peer.url}, answering Identify"
    assert peer.count == 1


async def test_a_status_retried_in_vain_says_how_often_and_what_the_peer_asked(
    serve: Serve, client: OAIClient
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "0"})

    peer = await serve(handler)
    with pytest.raises(PeerHTTPError) as caught:
        await client.identify(peer.url)
    attempts = SETTINGS.max_retries + 1
    assert caught.value.reason == (
        f"HTTP 429 from {peer.url}, answering Identify, after {attempts} attempts "
        "(the last with Retry-After: 0)"
    )
    assert peer.count == attempts


async def test_an_oai_error_sent_with_http_422(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("error-cannotDisseminateFormat.xml", status=422)

    peer = await serve(handler)
    with pytest.raises(errors.CannotDisseminateFormat):
        await identifiers(client, peer.url)
    assert peer.count == 1


async def test_a_peer_that_hangs_times_out(serve: Serve, client_for: ClientFactory) -> None:
    """H02: a peer that never answers is given up at its timeout, after the attempts set."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        await peer.release.wait()
        return web.Response(status=503)

    peer = await serve(handler)
    client = client_for(read_timeout=0.4, max_retries=1)
    started = time.monotonic()
    with pytest.raises(PeerTimeout) as caught:
        await client.identify(peer.url)
    elapsed = time.monotonic() - started
    # two attempts of 0.4 s each, and a short backoff between them
    assert 0.7 <= elapsed < 2.0
    assert peer.count == 2
    assert len(caught.value.reason) < 300


async def test_a_peer_that_drips_its_answer_times_out(
    serve: Serve, client_for: ClientFactory
) -> None:
    """A byte now and then keeps the read timeout from ever firing; the response's total time
    bounds it (WISCAT_HARVEST_TIMEOUT_SECONDS, or 15 minutes, whichever is longer)."""

    async def handler(request: web.Request, peer: Peer) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/xml"})
        await response.prepare(request)
        while not peer.release.is_set():
            await response.write(b" ")
            await asyncio.sleep(0.05)
        return response

    peer = await serve(handler)
    client = client_for(read_timeout=0.5, total_timeout=1.0, max_retries=0)
    try:
        with pytest.raises(PeerTimeout) as caught:
            await client.identify(peer.url)
    finally:
        peer.release.set()
    assert caught.value.reason == f"no answer from {peer.url} in time (after 1 attempts)"


def test_the_whole_response_may_take_at_least_the_read_timeout() -> None:
    default = client_settings(Settings(_env_file=None, gisc_name="T"))  # type: ignore[call-arg]
    assert (default.read_timeout, default.total_timeout) == (120, 900)
    longer = Settings(_env_file=None, gisc_name="T", harvest_timeout_seconds=3600)  # type: ignore[call-arg]
    assert client_settings(longer).total_timeout == 3600


async def test_an_unreachable_peer(client_for: ClientFactory) -> None:
    """H01: a refused connection is PeerUnreachable."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(PeerUnreachable):
        await client_for(max_retries=1).identify(f"http://127.0.0.1:{port}/oai")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HELLO THERE\r\n\r\n", "Bad status line: Expected HTTP/, RTSP/ or ICE/: b'HELLO THERE'"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nxx",
            "Invalid character in Content-Length: b'Content-Length: abc'",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n",
            "Invalid character in chunk size: b'ZZ'",
        ),
        (
            b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 20_000 + b"\r\n\r\n",
            "Got more than 8190 bytes when reading: b'aaaa",
        ),
    ],
)
async def test_an_answer_that_is_not_http(
    client: OAIClient, answer: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer (or a broken proxy before it) whose answer HTTP cannot read: retried as a
    transient fault, then the list fails as BadResponse with the parser's first line; it was
    an 'unexpected error' with a traceback, as if wiscat had failed, and a made-up HTTP 400."""
    asked = 0

    async def answer_with(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal asked
        asked += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_with, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/oai"
    try:
        with pytest.raises(BadResponse) as caught:
            await client.identify(url)
    finally:
        server.close()
        await server.wait_closed()
    # the parser's message on one line, the bytes it stumbled on included, its caret left out
    assert caught.value.reason.startswith(f"broken HTTP response from {url}: {reason}")
    assert "\n" not in caught.value.reason and "^" not in caught.value.reason
    assert len(caught.value.reason) < 300
    assert asked == SETTINGS.max_retries + 1
    assert "broken HTTP response" in caplog.text  # each retry logged as such


async def test_redirects_that_lead_nowhere(serve: Serve, client: OAIClient) -> None:
    """H11: a redirect loop is given up at its 5th redirect (ClientSettings.max_redirects;
    aiohttp's own default is 10), a redirect to another scheme at once; neither is retried."""

    async def loop(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPFound(f"{peer.url}?hop={peer.count}")

    looping = await serve(loop)
    with pytest.raises(BadResponse) as caught:
        await client.identify(looping.url)
    assert caught.value.reason == f"{looping.url} redirected 5 times without an answer"
    assert looping.count == 5  # not retried

    async def elsewhere(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPMovedPermanently("ftp://user:secret@peer.example/oai")

    moved = await serve(elsewhere)
    with pytest.raises(BadResponse) as caught:
        await client.identify(moved.url)
    assert caught.value.reason == (
        f"{moved.url} redirected to 'ftp://user:***@peer.example/oai', "
        "which is not a valid http(s) URL"
    )
    assert moved.count == 1


async def test_an_http_error_after_a_redirect_names_where_it_came_from(
    serve: Serve, client: OAIClient
) -> None:
    """The peer moved its endpoint and the old one redirects to a page that is gone: the
    reason names the URL that answered 404, not the one asked, which answered 302."""

    async def moved(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPFound("/gone/oai")  # nothing is served there: the server answers 404

    peer = await serve(moved)
    with pytest.raises(PeerHTTPError) as caught:
        await client.identify(peer.url)
    gone = peer.url.replace("/oai", "/gone/oai")
    assert caught.value.reason == (
        f"HTTP 404 from {gone} (redirected from {peer.url}), answering Identify"
    )
    assert caught.value.status == 404 and peer.count == 1


async def test_a_peer_that_moved_permanently_is_followed_and_told_once(
    serve: Serve, client: OAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def new_home(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    home = await serve(new_home)

    async def old_home(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPMovedPermanently(f"{home.url}?{request.query_string}")

    old = await serve(old_home)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            await client.identify(old.url)
    told = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert told == [
        f"{old.url} moved permanently to {home.url} (HTTP 301): every request to it is "
        f"redirected; point its links at the new URL (wiscat link set NAME --url {home.url})"
    ]
    assert client.moved == {old.url: home.url}
    assert (old.count, home.count) == (3, 3)

    # a temporary redirect is the peer's business: nothing to tell
    async def away(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPFound(f"{home.url}?{request.query_string}")

    caplog.clear()
    temporary = await serve(away)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await client.identify(temporary.url)
    assert [r for r in caplog.records if r.name == LOGGER] == []
    assert temporary.url not in client.moved


async def test_https_is_not_followed_to_plain_http(
    serve: Serve, client_for: ClientFactory, tmp_path: Path
) -> None:
    """A redirect from https to http would take what any machine on the way wrote for the
    peer's records; from http to https (a peer that moved to https) is followed."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client = client_for(ca_file=tmp_path / "ca.pem")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)

    async def plain(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    http_peer = await serve(plain)
    secure = web.Application()

    async def down(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{http_peer.url}?{request.query_string}")

    async def answer(request: web.Request) -> web.Response:
        return xml("Identify.xml")

    secure.router.add_get("/down/oai", down)
    secure.router.add_get("/oai", answer)
    async with serving_app(secure, tls) as root:
        with pytest.raises(BadResponse) as caught:
            await client.identify(f"{root}/down/oai")
        assert caught.value.reason == (
            f"{root}/down/oai redirected to {http_peer.url}: from https to plain http, which a "
            "harvest does not follow"
        )

        async def up(request: web.Request, peer: Peer) -> web.Response:
            raise web.HTTPMovedPermanently(f"{root}/oai?{request.query_string}")

        upgraded = await serve(up)
        await client.identify(upgraded.url)  # answered by the https peer
        assert upgraded.count == 1


# --- bodies that are not usable ---------------------------------------------------------------


async def fails_with(
    serve: Serve, client: OAIClient, body: bytes, content_type: str = "text/xml"
) -> BadResponse:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(body=body, content_type=content_type)

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await identifiers(client, peer.url)
    assert peer.count == 1  # a broken body is the peer's answer, not a transient failure
    return caught.value


async def test_an_html_page_with_status_200(serve: Serve, client: OAIClient) -> None:
    """H07: an HTML page with status 200 is not OAI-PMH."""
    failure = await fails_with(serve, client, fixture("not-oai-html-error.html"), "text/html")
    assert isinstance(failure.__cause__, NotOAIResponse)
    assert "HTML" in failure.reason


async def test_a_list_answered_with_another_verb(serve: Serve, client: OAIClient) -> None:
    # a ListRecords request answered with ListIdentifiers headers: read as records to get, or
    # as a list that ended, the run went on as if the peer had answered what it was asked
    failure = await fails_with(serve, client, fixture("ListIdentifiers-day-granularity.xml"))
    assert "a ListRecords request to" in failure.reason
    assert failure.reason.endswith("was answered with 'ListIdentifiers'")


async def test_get_record_answered_with_a_list(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("ListRecords-page1.xml")

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await client.get_record(peer.url, "urn:x-wmo:md:int.wmo.wis::A", "iso19139")
    assert caught.value.reason == (
        f"a GetRecord request to {peer.url} was answered with 'ListRecords'"
    )


async def test_truncated_xml(serve: Serve, client: OAIClient) -> None:
    """H06: a page whose XML is cut short is refused, naming the line."""
    failure = await fails_with(serve, client, fixture("malformed-truncated.xml"))
    assert isinstance(failure.__cause__, MalformedResponse)
    assert "line 21" in failure.reason


async def test_invalid_xml_characters(serve: Serve, client: OAIClient) -> None:
    """H09: a page holding a character XML forbids is refused."""
    failure = await fails_with(serve, client, fixture("malformed-invalid-characters.xml"))
    assert isinstance(failure.__cause__, MalformedResponse)
    assert "invalid Char" in failure.reason


async def test_billion_laughs_is_refused(serve: Serve, client: OAIClient) -> None:
    """X01: a billion-laughs page is refused quickly, its content not echoed."""
    started = time.monotonic()
    failure = await fails_with(serve, client, fixture("malformed-billion-laughs.xml"))
    assert isinstance(failure.__cause__, MalformedResponse)
    assert time.monotonic() - started < 2
    assert "lollol" not in failure.reason


async def test_xxe_is_refused_and_its_target_never_read(
    serve: Serve, client: OAIClient, tmp_path: Path
) -> None:
    """X03: an XXE page is refused and its target never read."""
    target = tmp_path / "secret.txt"
    target.write_text("TOP-SECRET-CONTENT")
    os.utime(target, (0, time.time()))  # atime before mtime: any read moves it (relatime)
    body = fixture("malformed-xxe.xml").replace(b"@TARGET@", str(target).encode())
    failure = await fails_with(serve, client, body)
    assert isinstance(failure.__cause__, MalformedResponse)
    assert "TOP-SECRET" not in failure.reason and "TOP-SECRET" not in repr(failure.__cause__)
    untouched = os.stat(target).st_atime == 0
    target.read_text()
    if os.stat(target).st_atime != 0:  # atime is tracked on this filesystem: it proves no read
        assert untouched, "the XXE target was read"


# --- gzip bomb --------------------------------------------------------------------------------

BOMB_PREFIX = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
    b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request><ListRecords>"
)
BOMB_SUFFIX = b"</ListRecords></OAI-PMH>"


def gzip_bomb(megabytes: int) -> Iterator[bytes]:
    """A gzip stream of BOMB_PREFIX, ``megabytes`` MiB of spaces and BOMB_SUFFIX, made lazily.

    After a full flush a deflate stream needs no history, so one compressed megabyte of spaces
    (about 1 KiB) stands for every megabyte: the bomb costs no CPU to build.
    """
    spaces = b" " * (1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    yield compressor.compress(BOMB_PREFIX) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(spaces) + compressor.flush(zlib.Z_FULL_FLUSH)
    for _ in range(megabytes):
        yield block
    tail = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the final block
    yield tail.compress(BOMB_SUFFIX) + tail.flush()
    crc = zlib.crc32(BOMB_PREFIX)
    for _ in range(megabytes):
        crc = zlib.crc32(spaces, crc)
    crc = zlib.crc32(BOMB_SUFFIX, crc)
    size = len(BOMB_PREFIX) + megabytes * len(spaces) + len(BOMB_SUFFIX)
    yield struct.pack("<II", crc, size & 0xFFFFFFFF)


def test_the_bomb_is_an_honest_gzip_stream() -> None:
    import gzip

    assert gzip.decompress(b"".join(gzip_bomb(3))) == BOMB_PREFIX + b" " * (3 << 20) + BOMB_SUFFIX


async def test_a_gzip_bomb_is_stopped_at_the_cap(serve: Serve, client_for: ClientFactory) -> None:
    """X08: a gzip bomb is stopped at the page cap, with bounded memory."""

    async def handler(request: web.Request, peer: Peer) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/xml", "Content-Encoding": "gzip"}
        )
        await response.prepare(request)
        try:
            for piece in gzip_bomb(1024):  # 1 GiB once decompressed, about 1 MiB on the wire
                await response.write(piece)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client hung up, as it should
        return response

    peer = await serve(handler)
    client = client_for(max_decompressed_bytes=8 * 1024 * 1024)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.monotonic()
    with pytest.raises(ResponseTooLarge) as caught:
        await identifiers(client, peer.url)
    assert time.monotonic() - started < 5
    assert peer.count == 1
    assert caught.value.reason == (
        f"response from 127.0.0.1 exceeds {8 * 1024 * 1024} bytes decompressed "
        "(the cap is WISCAT_HARVEST_MAX_PAGE_BYTES)"
    )
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < 100 * 1024, f"peak memory grew by {grown} KiB"


# --- GetRecord --------------------------------------------------------------------------------


async def test_get_record(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("GetRecord.xml")

    peer = await serve(handler)
    item = await client.get_record(peer.url, "urn:x-wmo:md:int.wmo.wis::A", "iso19139")
    assert item.header.identifier == "urn:x-wmo:md:int.wmo.wis::A"
    assert item.metadata is not None
    assert peer.queries[0] == MultiDict(
        verb="GetRecord", identifier="urn:x-wmo:md:int.wmo.wis::A", metadataPrefix="iso19139"
    )


# --- RELIABILITY H01-H23 at the client --------------------------------------------------------


async def test_h01_attempts_to_a_refused_peer_are_spaced_by_the_backoff(
    client_for: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """H01: a peer that refuses connections is tried max_retries + 1 times, each retry after
    the full-jitter backoff it logs (uniform in 0 to base * 2^(attempt - 1), capped), and the
    attempts take at least those waits in all."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    url = f"http://127.0.0.1:{port}/oai"
    client = client_for(max_retries=3, backoff_base=0.2, backoff_cap=0.5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(PeerUnreachable) as caught:
        await client.identify(url)
    elapsed = time.monotonic() - started
    assert caught.value.reason.startswith(f"cannot reach {url}: Cannot connect to host")
    retries = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [m.split(" (attempt ")[1].split(")")[0] for m in retries] == [
        "1 of 4",
        "2 of 4",
        "3 of 4",
    ]
    waits = [float(m.rsplit("retrying in ", 1)[1].removesuffix(" s")) for m in retries]
    # each wait within its ceiling: 0.2, 0.4, then 0.8 cut to the cap of 0.5 (logged to 0.1 s)
    assert all(0 <= w <= ceiling + 0.05 for w, ceiling in zip(waits, [0.2, 0.4, 0.5], strict=True))
    assert elapsed >= sum(waits) - 0.15  # the waits were slept, not skipped


async def test_h04_a_503_without_retry_after_is_retried_after_the_usual_backoff(
    serve: Serve, client_for: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """H04. Rule: a 503 without Retry-After is retried after the usual full-jitter backoff
    (docs/harvesting.md: "retried with backoff (honouring Retry-After)"), not after a fixed
    60 s: WISCAT_HARVEST_MAX_RETRIES bounds how often."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if peer.count <= 2:
            return web.Response(status=503, text="busy")
        return xml("Identify.xml")

    peer = await serve(handler)
    client = client_for(max_retries=2, backoff_base=0.2, backoff_cap=0.3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        info = await client.identify(peer.url)
    assert info.repository_name == "GISC Peer"
    assert peer.count == 3
    retries = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [m.split(" s")[0].rsplit(" ", 1)[0] for m in retries] == [
        f"HTTP 503 from {peer.url} (attempt 1 of 3): retrying in",
        f"HTTP 503 from {peer.url} (attempt 2 of 3): retrying in",
    ]
    waits = [float(m.rsplit("retrying in ", 1)[1].removesuffix(" s")) for m in retries]
    assert waits[0] <= 0.2 + 0.05 and waits[1] <= 0.3 + 0.05
    gaps = [later - earlier for earlier, later in zip(peer.times, peer.times[1:], strict=False)]
    assert all(gap >= wait - 0.06 for gap, wait in zip(gaps, waits, strict=True))
    assert all(gap < 5 for gap in gaps)


@pytest.mark.parametrize("status", [401, 403])
async def test_h05_401_and_403_are_final(serve: Serve, client: OAIClient, status: int) -> None:
    """H05: a peer that wants credentials, or refuses us, is asked once: no retry would
    change its answer."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if request.query["verb"] == "Identify":
            return xml("Identify.xml")
        return web.Response(status=status, text="go away")

    peer = await serve(handler)
    await client.identify(peer.url)
    with pytest.raises(PeerHTTPError) as caught:
        await identifiers(client, peer.url)
    assert caught.value.status == status
    assert caught.value.reason == f"HTTP {status} from {peer.url}, answering ListRecords"
    assert peer.count == 2


def token_page(number: int, token: str | None) -> bytes:
    """A ListIdentifiers page of one header, id-NUMBER, announcing ``token``."""
    tail = f"<resumptionToken>{token}</resumptionToken>" if token else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        "<responseDate>2024-01-02T00:00:00Z</responseDate>"
        '<request verb="ListIdentifiers">http://peer/oai</request>'
        f"<ListIdentifiers><header><identifier>id-{number}</identifier>"
        f"<datestamp>2024-01-01T00:00:00Z</datestamp></header>{tail}</ListIdentifiers></OAI-PMH>"
    ).encode()


async def test_h08_a_token_seen_earlier_in_the_list_stops_it(
    serve: Serve, client: OAIClient
) -> None:
    """H08: tokens A, B, then A again: the list stops at the first repeat, after the pages
    before it, and A is asked for once only."""
    following = {None: "A", "A": "B", "B": "A"}

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        token = request.query.get("resumptionToken")
        return xml(token_page(peer.count, following[token]))

    peer = await serve(handler)
    seen: list[str] = []
    with pytest.raises(RepeatedResumptionToken) as caught:
        async for page in client.list_pages(
            peer.url, "ListIdentifiers", metadata_prefix="iso19139"
        ):
            seen.extend(identifier_of(item) for item in page.items())
    assert caught.value.reason == f"{peer.url} sent the resumptionToken 'A' twice in one list"
    assert seen == ["id-1", "id-2", "id-3"]
    assert [q.get("resumptionToken") for q in peer.queries] == [None, "A", "B"]


async def test_h09_a_broken_page_asked_with_a_token_is_named_with_it(
    serve: Serve, client: OAIClient
) -> None:
    """H09: the reason of a page refused for a character XML forbids names the peer and the
    resumptionToken the page was asked with, so that the operator can ask for it again."""
    broken = fixture("ListRecords-page2.xml").replace(
        b"</gco:CharacterString></gmd:fileIdentifier>",
        b"\x0b</gco:CharacterString></gmd:fileIdentifier>",
    )

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if "resumptionToken" in request.query:
            return xml(broken)
        return xml("ListRecords-page1.xml")

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await identifiers(client, peer.url)
    assert isinstance(caught.value.__cause__, MalformedResponse)
    assert "invalid Char" in caught.value.reason
    assert caught.value.reason.endswith(f"(from {peer.url}, resumptionToken 'page-2-token')")
    assert peer.count == 2


def one_record_page(title: str) -> str:
    """A ListRecords page of one record whose title is ``title``, as text to encode."""
    return (
        "<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        "<responseDate>2024-01-02T00:00:00Z</responseDate>"
        "<request verb='ListRecords'>http://peer/oai</request><ListRecords><record>"
        "<header><identifier>id-1</identifier><datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        "<metadata><title xmlns='urn:t'>" + title + "</title></metadata>"
        "</record></ListRecords></OAI-PMH>"
    )


ENCODED_PAGES = {
    "iso-8859-1 declared": b"<?xml version='1.0' encoding='ISO-8859-1'?>"
    + one_record_page("caf\u00e9").encode("latin-1"),
    "utf-16 with a bom": (
        "<?xml version='1.0' encoding='UTF-16'?>" + one_record_page("caf\u00e9")
    ).encode("utf-16"),  # Python writes the BOM
    "utf-8 with a bom": b"\xef\xbb\xbf<?xml version='1.0' encoding='UTF-8'?>"
    + one_record_page("caf\u00e9").encode(),
}


@pytest.mark.parametrize("form", list(ENCODED_PAGES))
async def test_h10_a_page_is_read_by_its_encoding(
    serve: Serve, client: OAIClient, form: str
) -> None:
    """H10: a whole page in ISO-8859-1 (declared so), in UTF-16 with a BOM, or in UTF-8 after
    a BOM, gives the exact text."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(body=ENCODED_PAGES[form], headers={"Content-Type": "text/xml"})

    peer = await serve(handler)
    titles: list[str | None] = []
    async for page in client.list_pages(peer.url, "ListRecords", metadata_prefix="iso19139"):
        for item in page.items():
            assert isinstance(item, RecordItem) and item.metadata is not None
            titles.append(item.metadata.text)
    assert titles == ["caf\u00e9"]


async def test_h10_latin1_bytes_declared_as_utf8_are_refused(
    serve: Serve, client: OAIClient
) -> None:
    """H10: a page declared UTF-8 whose bytes are Latin-1 is refused, not read with U+FFFD."""
    body = b"<?xml version='1.0' encoding='UTF-8'?>" + one_record_page("caf\u00e9").encode(
        "latin-1"
    )
    failure = await fails_with(serve, client, body)
    assert isinstance(failure.__cause__, MalformedResponse)
    assert failure.reason.startswith("not well-formed XML: Invalid bytes in character encoding")
    assert "\ufffd" not in failure.reason


async def test_h22_requests_accept_identity_too(serve: Serve, client: OAIClient) -> None:
    """H22: a request asks for gzip or deflate and says an uncompressed answer is welcome too
    (identity with q > 0), for a peer that cannot compress."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    peer = await serve(handler)
    await client.identify(peer.url)
    assert peer.headers[0]["Accept-Encoding"] == "gzip, deflate, identity;q=0.5"


async def test_h23_requests_name_the_node_and_its_contact(serve: Serve) -> None:
    """H23: a harvest names its software and version (User-Agent) and the node's contact
    address (From, RFC 9110 §10.1.2: the operator of a robot), which is WISCAT_ADMIN_EMAIL."""
    settings = client_settings(
        Settings(_env_file=None, gisc_name="T", admin_email="ops@gisc.example")  # type: ignore[call-arg]
    )

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    peer = await serve(handler)
    async with OAIClient.session(settings) as session:
        await OAIClient(session, settings).identify(peer.url)
    from wiscat.shared.version import VERSION

    assert peer.headers[0]["User-Agent"] == f"wiscat-harvester/{VERSION} (OAI-PMH 2.0)"
    assert peer.headers[0]["From"] == "ops@gisc.example"


async def test_h23_connections_to_one_peer_are_capped(serve: Serve) -> None:
    """H23: however many requests a harvester process has for one peer host (links harvested
    at once, pages read ahead, GetRecords), at most ClientSettings.connections_per_host (4)
    connections to it are open at once; the rest wait for one."""
    settings = client_settings(Settings(_env_file=None, gisc_name="T"))  # type: ignore[call-arg]
    assert settings.connections_per_host == 4
    at_once = 0
    most = 0
    ports: set[int] = set()

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        nonlocal at_once, most
        assert request.transport is not None
        ports.add(request.transport.get_extra_info("peername")[1])
        at_once += 1
        most = max(most, at_once)
        await asyncio.sleep(0.3)
        at_once -= 1
        return xml("Identify.xml")

    peer = await serve(handler)
    async with OAIClient.session(settings) as session:
        client = OAIClient(session, settings)
        await asyncio.gather(*(client.identify(peer.url) for _ in range(12)))
    assert peer.count == 12
    assert most == 4
    assert len(ports) == 4  # the connections are kept and reused


def refuses_seconds(request: web.Request) -> web.Response:
    """A peer whose Identify says seconds but which takes from and until in days only (as
    repositories whose Identify was written by hand do): a seconds value is a badArgument."""
    if request.query["verb"] == "Identify":
        return xml("Identify.xml")
    dates = [request.query[name] for name in ("from", "until") if name in request.query]
    if any("T" in value for value in dates):
        return xml(
            b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
            b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request>"
            b'<error code="badArgument">from: days only</error></OAI-PMH>'
        )
    return xml("ListIdentifiers-day-granularity.xml")


async def test_h15_a_peer_that_refuses_seconds_is_asked_again_in_days(
    serve: Serve, client: OAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    """H15: a peer whose Identify says seconds answers badArgument to a from in seconds: the
    list's first request is made again in days (from rounded down to its day: nothing is
    missed), once, with a warning, and the list completes."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return refuses_seconds(request)

    peer = await serve(handler)
    assert not (await client.identify(peer.url)).day_granularity
    seen: list[str] = []
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async for page in client.list_pages(
            peer.url,
            "ListIdentifiers",
            metadata_prefix="iso19139",
            from_=datetime(2024, 3, 1, 23, 59, 30, tzinfo=UTC),
            until=datetime(2024, 3, 5, 6, 0, tzinfo=UTC),
        ):
            seen.extend(identifier_of(item) for item in page.items())
    assert seen == ["urn:x-wmo:md:int.wmo.wis::D", "urn:x-wmo:md:int.wmo.wis::E"]
    assert [(q.get("from"), q.get("until")) for q in peer.queries[1:]] == [
        ("2024-03-01T23:59:30Z", "2024-03-05T06:00:00Z"),
        ("2024-03-01", "2024-03-05"),
    ]
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"{peer.url} refused from and until in seconds (badArgument: from: days only), though "
        "its Identify says seconds: asking again in days"
    ]


async def test_h15_a_bad_argument_without_dates_is_not_asked_again(
    serve: Serve, client: OAIClient
) -> None:
    """H15: a badArgument to a list without from or until (nothing to ask in days) is the
    peer's answer, and so is one to the request in days."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if "from" in request.query or request.query["verb"] == "Identify":
            return refuses_seconds(request)
        return xml(
            b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
            b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request>"
            b'<error code="badArgument">no such set</error></OAI-PMH>'
        )

    peer = await serve(handler)
    with pytest.raises(errors.BadArgument):
        await identifiers(client, peer.url)
    assert peer.count == 1


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "content-length"])
async def test_x08_a_300_mib_plain_body_is_stopped_at_the_cap(
    serve: Serve, client_for: ClientFactory, declared: bool
) -> None:
    """X08: a plain (not compressed) 300 MiB answer, streamed by the peer chunked or with its
    length declared, is stopped at the 8 MiB cap, not retried, the process's peak memory
    growing less than the cap + 64 MiB."""
    megabyte = b" " * (1 << 20)
    size = len(BOMB_PREFIX) + 300 * len(megabyte) + len(BOMB_SUFFIX)

    async def handler(request: web.Request, peer: Peer) -> web.StreamResponse:
        headers = {"Content-Type": "text/xml"}
        if declared:
            headers["Content-Length"] = str(size)
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        try:
            await response.write(BOMB_PREFIX)
            for _ in range(300):
                await response.write(megabyte)
            await response.write(BOMB_SUFFIX)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client hung up, as it should
        return response

    peer = await serve(handler)
    cap = 8 * 1024 * 1024
    client = client_for(max_decompressed_bytes=cap)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with pytest.raises(ResponseTooLarge) as caught:
        await identifiers(client, peer.url)
    assert peer.count == 1
    assert caught.value.reason == (
        f"response from 127.0.0.1 exceeds {cap} bytes (the cap is WISCAT_HARVEST_MAX_PAGE_BYTES)"
    )
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < (cap >> 10) + 64 * 1024, f"peak memory grew by {grown} KiB"


@pytest.mark.parametrize("where", ["after", "before"])
async def test_x08_many_concatenated_empty_gzip_members_cost_little_cpu(
    serve: Serve, client: OAIClient, where: str
) -> None:
    """X08: a page gzipped as one member beside 200,000 empty gzip members (4 MB on the wire):
    the page is read, or refused as a bad response, within 2 s of the process's CPU (aiohttp
    before 3.14.4 took unbounded CPU on such a stream)."""
    import gzip

    page = gzip.compress(fixture("ListRecords-page2.xml"))
    empty = gzip.compress(b"")
    members = empty * 200_000
    body = page + members if where == "after" else members + page

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(
            body=body, headers={"Content-Type": "text/xml", "Content-Encoding": "gzip"}
        )

    peer = await serve(handler)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    try:
        outcome: object = await identifiers(client, peer.url)
    except BadResponse as refused:
        outcome = refused
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert usage.ru_utime + usage.ru_stime - cpu_before < 2.0
    assert peer.count == 1
    # aiohttp decodes the first member alone: the members after the page are never inflated,
    # and members before it leave an empty body
    if where == "after":
        assert outcome == ["urn:x-wmo:md:int.wmo.wis::C"]
    else:
        assert isinstance(outcome, BadResponse), outcome
        assert outcome.reason == f"the response body is empty (from {peer.url})"
