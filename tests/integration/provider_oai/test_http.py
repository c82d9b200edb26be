"""The provider's HTTP: HEAD and POST, gzip, lengths, overload and clients that stop reading or
go away.

The provider runs over real HTTP on loopback, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import collections
import gzip
import logging
import warnings

import aiohttp
import pytest
from lxml import etree

from tests.integration.provider_oai.answers import (
    ERRORS,
    MORE_ERRORS,
    OWN,
    _codec,
    _fetch,
    _normalised,
    check,
)
from tests.support import factories
from tests.support.oai_client import OAI, oai_get, oai_post
from tests.support.servers import RunningProvider, running_provider
from wiscat.provider.responses import XML_TYPE
from wiscat.shared.db.pool import Pool


async def test_head_is_a_get_without_its_body(provider: RunningProvider) -> None:
    # RFC 9110 §9.1: every general-purpose server supports HEAD (monitors probe with it)
    query = {"verb": "Identify"}
    plain = {"Accept-Encoding": "identity"}  # a body whose length does not vary
    async with aiohttp.ClientSession() as session:
        async with session.get(provider.oai, params=query, headers=plain) as got:
            body = await got.read()
        async with session.head(provider.oai, params=query, headers=plain) as head:
            assert head.status == 200
            assert head.headers["Content-Type"] == got.headers["Content-Type"]
            assert int(head.headers["Content-Length"]) == len(body) > 0
            assert await head.read() == b""
        # and for a list, compressed as a GET would be
        query = {"verb": "ListIdentifiers", "metadataPrefix": "iso19139"}
        async with session.head(provider.oai, params=query) as head:
            assert head.status == 200
            assert head.headers["Content-Encoding"] == "gzip"
            assert await head.read() == b""


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/"])
async def test_head_wherever_get_is(provider: RunningProvider, path: str) -> None:
    """Monitors that probe with HEAD got 405 from every page but /oai."""
    plain = {"Accept-Encoding": "identity"}
    async with aiohttp.ClientSession() as session:
        async with session.head(provider.root + path, headers=plain) as head:
            assert head.status == 200
            assert int(head.headers["Content-Length"]) > 0
            assert await head.read() == b""
        # a method the path does not have is still refused, and says which it has
        async with session.delete(provider.root + path) as refused:
            assert refused.status == 405
            assert refused.headers["Allow"] == "GET, HEAD"


async def test_a_method_oai_does_not_have_is_told_every_one_it_has(
    provider: RunningProvider,
) -> None:
    # Starlette named the methods of /oai's first route only: "GET"
    async with aiohttp.ClientSession() as session, session.put(provider.oai) as refused:
        assert refused.status == 405
        assert refused.headers["Allow"] == "GET, HEAD, POST"


async def test_the_openapi_schema_is_built_without_warnings(provider: RunningProvider) -> None:
    """/oai by GET and POST shared one operation id: FastAPI warned of it in the log each time
    /docs was opened."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        async with (
            aiohttp.ClientSession() as session,
            session.get(provider.root + "/openapi.json") as got,
        ):
            assert got.status == 200
            schema = await got.json()
    assert set(schema["paths"]["/oai"]) == {"get", "post"}
    operations = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert len(operations) == len(set(operations))


async def test_post_is_the_same_as_get(provider: RunningProvider) -> None:
    """P03: a POST lists what the same GET lists."""
    via_post = await oai_post(provider.oai, "verb=ListIdentifiers&metadataPrefix=iso19139")
    via_get = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    check(via_post.body)
    assert via_post.xpath("//oai:identifier/text()") == via_get.xpath("//oai:identifier/text()")
    wrong_type = await oai_post(provider.oai, "verb=Identify", content_type="text/plain")
    check(wrong_type.body)
    assert wrong_type.errors() == ["badArgument"]


async def test_a_post_larger_than_any_request_is_refused_unread(provider: RunningProvider) -> None:
    # a transport matter, answered with its HTTP status (§3.1.2.2); RELIABILITY S11
    padding = "A" * (64 * 1024)
    over = await oai_post(provider.oai, f"verb=ListRecords&resumptionToken={padding}")
    assert (over.status, over.body) == (
        413,
        b'{"detail":"an OAI-PMH request may be at most 65536 bytes"}',
    )
    # below the limit, the same request is read, and its token judged
    under = await oai_post(provider.oai, f"verb=ListRecords&resumptionToken={padding[:60000]}")
    check(under.body)
    assert under.errors() == ["badResumptionToken"]


async def test_list_records_with_gzip(provider: RunningProvider) -> None:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(
            provider.oai,
            params={"verb": "ListRecords", "metadataPrefix": "oai_dc"},
            headers={"Accept-Encoding": "gzip"},
        ) as response,
    ):
        assert response.headers["Content-Encoding"] == "gzip"
        body = gzip.decompress(await response.read())
    check(body)
    assert body.count(b"<record>") == 100


@pytest.mark.parametrize(
    ("accept", "gzipped"),
    [
        ("gzip", True),
        ("GZIP", True),
        ("deflate, gzip;q=0.5", True),
        ("x-gzip", True),
        ("*", True),
        ("br;q=1.0, *;q=0.1", True),
        ("gzip;q=0", False),  # RFC 9110 §12.5.3: "not acceptable"
        ("gzip; q=0.000, identity", False),
        ("*, gzip;q=0", False),  # gzip named: its own weight, not the wildcard's
        ("gzip;q=zero", False),  # a weight that is not one: not taken as acceptance
        ("identity", False),
        ("br", False),
        ("", False),
    ],
)
async def test_gzip_only_when_the_client_takes_it(
    provider: RunningProvider, accept: str, gzipped: bool
) -> None:
    """P13: gzip exactly when the client's Accept-Encoding takes it."""
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for verb in ({"verb": "Identify"}, {"verb": "ListIdentifiers", "metadataPrefix": "oai_dc"}):
            async with session.get(
                provider.oai, params=verb, headers={"Accept-Encoding": accept}
            ) as response:
                raw = await response.read()
                assert response.headers.get("Content-Encoding") == ("gzip" if gzipped else None)
                assert response.headers["Vary"] == "Accept-Encoding"
            check(gzip.decompress(raw) if gzipped else raw)


async def test_list_pages_are_sent_with_their_length(db: Pool, database_url: str) -> None:
    await factories.load_records(db, OWN, range(260))
    # one page of 250 records: over 2 MiB, so sent in more than one piece
    async with (
        running_provider(database_url, page_size=250) as running,
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for encoding in ("identity", "gzip"):
            async with session.get(
                running.oai,
                params={"verb": "ListRecords", "metadataPrefix": "iso19139"},
                headers={"Accept-Encoding": encoding},
            ) as response:
                raw = await response.read()
                assert "Transfer-Encoding" not in response.headers
                assert int(response.headers["Content-Length"]) == len(raw)
            body = gzip.decompress(raw) if encoding == "gzip" else raw
            assert len(body) > 2 * 1024 * 1024
            check(body)
            assert body.count(b"<record>") == 250


async def test_overload_gets_503_with_retry_after(db: Pool, database_url: str) -> None:
    """P15: past the list slots, 503 with Retry-After, then 200."""
    await factories.load_records(db, OWN, range(3000))
    async with running_provider(database_url, max_concurrent_lists=1, page_size=3000) as running:
        # a slow reader holds the only list slot: 3,000 records do not fit in socket buffers
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", int(running.root.rsplit(":", 1)[1])
        )
        writer.write(
            b"GET /oai?verb=ListRecords&metadataPrefix=iso19139 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        busy = await oai_get(running.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
        assert busy.status == 503
        assert busy.headers["Retry-After"].isdigit()
        writer.close()
        await writer.wait_closed()
        for _ in range(50):
            answer = await oai_get(running.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
            if answer.status == 200:
                break
            await asyncio.sleep(0.1)
        assert answer.status == 200


async def test_a_client_that_stops_reading_is_cut_off(
    db: Pool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await factories.load_records(db, OWN, range(3000))
    overrides = {"max_concurrent_lists": 1, "page_size": 3000, "send_timeout_seconds": 1}
    async with running_provider(database_url, **overrides) as running:
        # a client that asks for a page and then reads nothing, neither closing its connection
        # (a frozen harvester): it used to hold the only list slot for as long as it lived
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", int(running.root.rsplit(":", 1)[1])
        )
        writer.write(
            b"GET /oai?verb=ListRecords&metadataPrefix=iso19139 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        await writer.drain()
        head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
        length = int(head.split("content-length: ")[1].split("\r\n")[0])
        busy = await oai_get(running.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
        assert busy.status == 503
        for _ in range(100):
            answer = await oai_get(running.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
            if answer.status == 200:
                break
            await asyncio.sleep(0.1)
        assert answer.status == 200  # the slot is free again
        # and the stalled client's connection was closed: what it reads ends short of the page
        rest = await asyncio.wait_for(reader.read(), 10)
        assert len(rest) < length
        writer.close()
        await writer.wait_closed()
    assert "127.0.0.1 took no piece of a list page in 1 s: cut off" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_clients_that_go_away_do_not_leak_list_slots(db: Pool, database_url: str) -> None:
    await factories.load_records(db, OWN, range(600))
    async with running_provider(database_url, max_concurrent_lists=2, page_size=500) as running:
        port = int(running.root.rsplit(":", 1)[1])
        for _ in range(6):  # more than the slots: each must be given back
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"GET /oai?verb=ListRecords&metadataPrefix=iso19139 HTTP/1.1\r\n"
                b"Host: 127.0.0.1\r\n\r\n"
            )
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")
            writer.close()  # gone before reading the body
            await writer.wait_closed()
        for _ in range(50):
            answer = await oai_get(running.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
            if answer.status == 200:
                break
            await asyncio.sleep(0.1)
        assert answer.status == 200


async def test_p03_every_request_by_post_is_answered_as_by_get(
    provider: RunningProvider, db: Pool
) -> None:
    """P03: every verb and the whole error matrix, by GET and by POST (form-encoded): the same
    status and the same body less responseDate (and the tokens' expiry and frozen bound, which
    name the moment of the request); a list followed by POST to its end gives the GET's pages."""
    identifier = await db.fetchval("select min(identifier) from records")
    queries = [q for q, _, _ in (*ERRORS, *MORE_ERRORS)] + [
        "verb=Identify",
        "verb=ListSets",
        "verb=ListMetadataFormats",
        f"verb=ListMetadataFormats&identifier={identifier}",
        f"verb=GetRecord&metadataPrefix=iso19139&identifier={identifier}",
        f"verb=GetRecord&metadataPrefix=oai_dc&identifier={identifier}",
        "verb=ListRecords&metadataPrefix=oai_dc&set=WIS-GISC-TEST",
        "verb=ListIdentifiers&metadataPrefix=iso19139&from=2000-01-01&until=2999-01-01",
    ]
    codec = _codec(provider)
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for query in queries:
            got = await _fetch(session, provider.oai, query, post=False)
            posted = await _fetch(session, provider.oai, query, post=True)
            assert got[0] == posted[0] == 200, query
            assert got[1]["Content-Type"] == posted[1]["Content-Type"] == XML_TYPE
            assert _normalised(got[2], codec) == _normalised(posted[2], codec), query
        # a whole list, page by page, by each method
        pages: dict[bool, list[bytes]] = {}
        for post in (False, True):
            query = "verb=ListRecords&metadataPrefix=iso19139"
            pages[post] = []
            while query:
                status, _, body = await _fetch(session, provider.oai, query, post=post)
                assert status == 200
                pages[post].append(_normalised(body, codec))
                token = etree.fromstring(body).findtext(f".//{OAI}resumptionToken")
                query = f"verb=ListRecords&resumptionToken={token}" if token else ""
        assert len(pages[False]) == 3
        assert pages[False] == pages[True]


@pytest.mark.parametrize(
    ("accept", "gzipped"),
    [
        (None, False),
        ("gzip", True),
        ("gzip;q=1.0, identity;q=0.5", True),
        ("identity", False),
        ("gzip;q=0", False),
    ],
)
async def test_p13_a_gzipped_body_is_the_identity_body(
    provider: RunningProvider, db: Pool, accept: str | None, gzipped: bool
) -> None:
    """P13: for each Accept-Encoding (none at all included), gzip exactly when acceptable, and
    the body, decompressed, is the identity body (less responseDate and token times), for
    Identify, GetRecord, a ListRecords page and an error."""
    identifier = await db.fetchval("select min(identifier) from records")
    codec = _codec(provider)
    queries = [
        "verb=Identify",
        f"verb=GetRecord&metadataPrefix=oai_dc&identifier={identifier}",
        "verb=ListRecords&metadataPrefix=iso19139",
        "verb=ListRecords&metadataPrefix=nope",
    ]
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=["Accept-Encoding"]) as bare,
    ):
        for query in queries:
            _, _, plain = await _fetch(session, provider.oai, query, post=False)
            headers = {} if accept is None else {"Accept-Encoding": accept}
            async with bare.get(provider.oai + "?" + query, headers=headers) as response:
                assert response.status == 200
                raw = await response.read()
                assert response.headers.get("Content-Encoding") == ("gzip" if gzipped else None)
            body = gzip.decompress(raw) if gzipped else raw
            check(body)
            assert _normalised(body, codec) == _normalised(plain, codec), query


async def test_p15_forty_clients_against_four_list_slots_all_complete(
    db: Pool, database_url: str
) -> None:
    """P15: 40 clients list at once while the 4 list slots are taken: each answer is 200 or
    503 with an integer Retry-After of 1 to 300 (WISCAT_OVERLOAD_RETRY_AFTER_SECONDS), never
    another 5xx nor a client timeout, and every client, waiting as told, gets its whole list."""
    await factories.load_records(db, OWN, range(1000))
    overrides = {"max_concurrent_lists": 4, "page_size": 1000, "overload_retry_after_seconds": 1}
    statuses: collections.Counter[int] = collections.Counter()
    retry_afters: set[str] = set()
    turned_away = asyncio.Event()

    async def harvester() -> int:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for _ in range(120):
                params = {"verb": "ListIdentifiers", "metadataPrefix": "iso19139"}
                async with session.get(running.oai, params=params) as response:
                    body = await response.read()
                    statuses[response.status] += 1
                    if response.status == 200:
                        check(body)
                        return body.count(b"<header>")
                    assert response.status == 503, body[:200]
                    retry_after = response.headers["Retry-After"]
                    retry_afters.add(retry_after)
                    if statuses[503] >= 40:
                        turned_away.set()
                await asyncio.sleep(int(retry_after))
            raise AssertionError("no list after 120 attempts")

    async with running_provider(database_url, **overrides) as running:
        port = int(running.root.rsplit(":", 1)[1])
        holders = []
        for _ in range(4):  # slow readers hold the slots: 1,000 records (9 MB) fit in no buffer
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"GET /oai?verb=ListRecords&metadataPrefix=iso19139 HTTP/1.1\r\n"
                b"Host: 127.0.0.1\r\n\r\n"
            )
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")
            holders.append(writer)
        clients = [asyncio.create_task(harvester()) for _ in range(40)]
        await asyncio.wait_for(turned_away.wait(), 30)
        for writer in holders:
            writer.close()
            await writer.wait_closed()
        listed = await asyncio.gather(*clients)
    assert listed == [1000] * 40
    assert set(statuses) == {200, 503}
    assert statuses[200] == 40 and statuses[503] >= 40
    assert retry_afters == {"1"}
    assert all(1 <= int(value) <= 300 for value in retry_afters)
