"""The harvester's OAI-PMH client follows a list page by page, reading ahead, and stops a list
that loops, empties or expires; it asks each peer at the granularity the peer takes.

Each peer is a small real aiohttp server on 127.0.0.1 (an ephemeral port) serving the recorded
responses of tests/data/oai/; nothing in the HTTP path is mocked or patched."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from aiohttp import web
from multidict import MultiDict

from tests.integration.harvester_client.peers import (
    LOGGER,
    ClientFactory,
    Peer,
    Serve,
    fixture,
    identifier_of,
    identifiers,
    two_pages,
    xml,
)
from wiscat.harvester.client import OAIClient
from wiscat.harvester.errors import (
    BadResponse,
    RepeatedResumptionToken,
    TooManyEmptyPages,
)
from wiscat.harvester.page_content import Page
from wiscat.shared.oaipmh import errors
from wiscat.shared.oaipmh.pages import HeaderItem, MalformedResponse, RecordItem


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
