"""The provider over real HTTP on loopback, against a real PostgreSQL: every verb, every error."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import gzip
import logging
import os
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from lxml import etree

from tests import factories
from tests.oai_client import OAI, Answer, list_all, oai_get, oai_post, oai_raw
from tests.oai_validation import strict_checks, validate_oai
from tests.servers import RunningProvider, running_provider
from wiscat.provider.responses import XML_TYPE
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh.errors import BadResumptionToken
from wiscat.shared.oaipmh.tokens import ListPosition, TokenCodec

OWN = "WIS-GISC-TEST"


@pytest.fixture
async def provider(db: Pool, database_url: str) -> AsyncIterator[RunningProvider]:
    await factories.load_records(db, OWN, range(250))
    async with running_provider(database_url) as running:
        yield running


def check(body: bytes) -> None:
    validate_oai(body)
    strict_checks(body)


async def test_identify(provider: RunningProvider) -> None:
    """P05: Identify names the configured base URL, the deletion policy and gzip."""
    answer = await oai_get(provider.oai, verb="Identify")
    check(answer.body)
    identify = answer.tree.find(f"{OAI}Identify")
    assert identify is not None
    assert identify.findtext(f"{OAI}baseURL") == provider.settings.base_url
    assert identify.findtext(f"{OAI}protocolVersion") == "2.0"
    assert identify.findtext(f"{OAI}granularity") == "YYYY-MM-DDThh:mm:ssZ"
    assert identify.findtext(f"{OAI}deletedRecord") == "transient"
    assert identify.findtext(f"{OAI}compression") == "gzip"
    request = answer.tree.find(f"{OAI}request")
    assert request is not None and request.get("verb") == "Identify"
    assert request.text == provider.settings.base_url


async def test_list_sets_and_formats(provider: RunningProvider) -> None:
    sets = await oai_get(provider.oai, verb="ListSets")
    check(sets.body)
    assert sets.xpath("//oai:setSpec/text()") == ["WIS-CATALOGUE", OWN]
    formats = await oai_get(provider.oai, verb="ListMetadataFormats")
    check(formats.body)
    assert sorted(formats.xpath("//oai:metadataPrefix/text()")) == ["iso19139", "oai_dc"]
    one = (await list_all(provider.oai, metadataPrefix="iso19139"))[0]
    identifier = one.findtext(f"{OAI}identifier")
    for_item = await oai_get(provider.oai, verb="ListMetadataFormats", identifier=identifier)
    check(for_item.body)
    unknown = await oai_get(provider.oai, verb="ListMetadataFormats", identifier="nope")
    check(unknown.body)
    assert unknown.errors() == ["idDoesNotExist"]


async def test_get_record_in_both_formats(provider: RunningProvider, db: Pool) -> None:
    """P12: GetRecord in iso19139 and oai_dc, each valid, the stored record served as is."""
    identifier = await db.fetchval("select min(identifier) from records")
    for prefix in ("iso19139", "oai_dc"):
        answer = await oai_get(
            provider.oai, verb="GetRecord", identifier=identifier, metadataPrefix=prefix
        )
        check(answer.body)
        assert answer.xpath("//oai:header/oai:identifier/text()") == [identifier]
        assert answer.xpath("//oai:header/oai:setSpec/text()") == ["WIS-CATALOGUE", OWN]
    iso = await oai_get(
        provider.oai, verb="GetRecord", identifier=identifier, metadataPrefix="iso19139"
    )
    stored = await db.fetchval("select xml from records where identifier = $1", identifier)
    # the stored record is served as is
    assert stored.encode() in iso.body


#: RELIABILITY P02's error matrix: (query, the error code, whether ``request`` echoes it).
ERRORS = [
    ("", "badVerb", False),
    ("verb=Frobnicate", "badVerb", False),
    ("verb=Identify&verb=Identify", "badVerb", False),
    ("verb=Identify&extra=1", "badArgument", False),
    ("verb=ListRecords", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=iso19139&metadataPrefix=iso19139", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=iso19139&from=2024-13-01", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=iso19139&from=2024-01-01T00:00:00", "badArgument", False),
    (
        "verb=ListRecords&metadataPrefix=iso19139&from=2024-01-01&until=2024-02-01T00:00:00Z",
        "badArgument",
        False,
    ),
    (
        "verb=ListRecords&metadataPrefix=iso19139&from=2024-02-01&until=2024-01-01",
        "badArgument",
        False,
    ),
    ("verb=ListRecords&metadataPrefix=iso19139&resumptionToken=x", "badArgument", False),
    ("verb=GetRecord&metadataPrefix=iso19139", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=marc21", "cannotDisseminateFormat", True),
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=unknown", "idDoesNotExist", True),
    # characters no identifier can hold (the database's text cannot, nor XML): no URI
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=%00", "badArgument", False),
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=a%00b%01", "badArgument", False),
    ("verb=ListMetadataFormats&identifier=%00", "badArgument", False),
    # no xs:anyURI: echoed in the request element, they made the answer invalid (P01, P02)
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=a%5Bb%5D", "badArgument", False),
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=a%23b%23c", "badArgument", False),
    ("verb=ListMetadataFormats&identifier=a%25zz", "badArgument", False),
    ("verb=ListMetadataFormats&identifier=1a:b", "badArgument", False),
    # a URI, if an odd one: looked up
    ("verb=ListMetadataFormats&identifier=a%20b%23c%5B1%5D", "idDoesNotExist", True),
    ("verb=ListIdentifiers&metadataPrefix=iso19139&from=2999-01-01", "noRecordsMatch", True),
    ("verb=ListIdentifiers&metadataPrefix=iso19139&set=no-such-set", "noRecordsMatch", True),
    ("verb=ListRecords&resumptionToken=garbage", "badResumptionToken", True),
    ("verb=ListSets&resumptionToken=anything", "badResumptionToken", True),
]


#: The rest of RELIABILITY P02's requests: until=junk, from=junk, GetRecord without
#: metadataPrefix, a token with until, ``identifier=invalid"id``, mixed granularity.
MORE_ERRORS = [
    ("verb=ListIdentifiers&metadataPrefix=iso19139&until=junk", "badArgument", False),
    ("verb=ListIdentifiers&metadataPrefix=iso19139&from=junk", "badArgument", False),
    ("verb=GetRecord&identifier=urn:x-wmo:md:int.wmo.wis::xx.0", "badArgument", False),
    ("verb=ListIdentifiers&resumptionToken=junk&until=2000-02-05", "badArgument", False),
    ("verb=ListRecords&resumptionToken=junk", "badResumptionToken", True),
    (
        "verb=ListIdentifiers&metadataPrefix=iso19139&from=2002-02-05&until=2002-02-06T05:35:00Z",
        "badArgument",
        False,
    ),
    # Rule: an xs:anyURI (OAI-PMH.xsd's type for identifiers, README "Put records in") is
    # looked up; §3.6 gives idDoesNotExist for an identifier "unknown or illegal"
    ('verb=GetRecord&metadataPrefix=iso19139&identifier=invalid"id', "idDoesNotExist", True),
    ("verb=ListRecords&metadataPrefix=iso19139&until=2000-02-05", "noRecordsMatch", True),
]


@pytest.mark.parametrize(("query", "code", "echo_attributes"), [*ERRORS, *MORE_ERRORS])
async def test_errors(
    provider: RunningProvider, query: str, code: str, echo_attributes: bool
) -> None:
    """P02: each malformed request gets HTTP 200, text/xml, an XSD-valid body and its exact
    OAI-PMH error."""
    answer = await oai_raw(provider.oai, query)
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "text/xml; charset=utf-8"
    check(answer.body)
    assert answer.errors() == [code]
    request = answer.tree.find(f"{OAI}request")
    assert request is not None and request.text == provider.settings.base_url
    # OAI-PMH §3.2: after badVerb or badArgument, the request element has no attributes.
    assert bool(request.attrib) is echo_attributes


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


async def test_resumption_pages_cover_the_list_exactly(provider: RunningProvider, db: Pool) -> None:
    """P06: a list's pages give every record once, with cursor and completeListSize."""
    answer = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    seen: list[str] = []
    cursors = []
    while True:
        check(answer.body)
        seen += answer.xpath("//oai:header/oai:identifier/text()")
        token = answer.tree.find(f"{OAI}ListIdentifiers/{OAI}resumptionToken")
        assert token is not None
        cursors.append(int(token.get("cursor")))
        assert token.get("completeListSize") == "250"
        assert token.get("expirationDate") is None  # tokens never expire by default (P10)
        if not token.text:
            break
        answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token.text)
    assert cursors == [0, 100, 200]
    assert len(seen) == len(set(seen)) == 250
    assert set(seen) == set(await factories.catalogue(db))


async def test_tokens_cannot_be_forged_or_reused_across_verbs(provider: RunningProvider) -> None:
    """P09: a token altered, signed elsewhere or of another verb is a badResumptionToken."""
    first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    token = first.xpath("//oai:resumptionToken/text()")[0]
    other_verb = await oai_get(provider.oai, verb="ListRecords", resumptionToken=token)
    assert other_verb.errors() == ["badResumptionToken"]
    altered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    assert (
        await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=altered)
    ).errors() == ["badResumptionToken"]
    now = datetime.now(UTC)
    foreign = TokenCodec(b"another node's secret", lifetime=timedelta(hours=1)).encode(
        ListPosition(
            verb="ListIdentifiers",
            metadata_prefix="iso19139",
            set_spec=None,
            from_=None,
            until_exclusive=None,
            upper_bound=now,
            last_datestamp=now - timedelta(days=1),
            last_identifier="a",
            cursor=100,
            complete_list_size=250,
            expires=now + timedelta(hours=1),
        )
    )
    answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=foreign)
    check(answer.body)
    assert answer.errors() == ["badResumptionToken"]


async def test_list_stays_exact_while_records_change(provider: RunningProvider, db: Pool) -> None:
    """P08: changes made during a list neither repeat nor hide a record of it."""
    before = await factories.catalogue(db)
    first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    seen = first.xpath("//oai:header/oai:identifier/text()")
    token = first.xpath("//oai:resumptionToken/text()")[0]
    untouched = sorted(before)[:50]
    # change, delete and add records while the list is in progress
    await factories.load_records(db, OWN, range(200, 220), version=1)
    victims = sorted(set(before) - set(seen))[:10]
    await factories.delete(db, OWN, victims)
    await factories.load_records(db, OWN, range(1000, 1020))
    while token:
        answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token)
        check(answer.body)
        seen += answer.xpath("//oai:header/oai:identifier/text()")
        token = (answer.xpath("//oai:resumptionToken/text()") or [None])[0]
    assert len(seen) == len(set(seen)), "a record was listed twice"
    changed = set(await factories.catalogue(db)) - set(before)
    assert not (changed & set(seen)), (
        "records added after the list began must wait for the next list"
    )
    assert set(untouched) <= set(seen)


async def test_datestamps_are_arrival_times(provider: RunningProvider, db: Pool) -> None:
    """P04, D10: datestamps are arrival times; from and until include their bounds."""
    before = await factories.catalogue(db)
    await asyncio.sleep(1.1)
    await factories.load_records(db, OWN, range(0, 5))  # same content again
    await factories.load_records(db, OWN, range(5, 10), version=1)  # new content
    after = await factories.catalogue(db)
    same = [i for i in before if after[i] == before[i]]
    moved = [i for i in before if after[i] != before[i]]
    assert len(moved) == 5 and len(same) == 245
    newest = max(after[i][0] for i in moved)
    answer = await oai_get(
        provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139", **{"from": newest}
    )
    check(answer.body)
    assert sorted(answer.xpath("//oai:identifier/text()")) == sorted(moved)
    # until is inclusive too
    oldest = min(after[i][0] for i in same)
    upto = await list_all(provider.oai, metadataPrefix="iso19139", until=oldest)
    assert {h.findtext(f"{OAI}identifier") for h in upto} >= {
        i for i in same if after[i][0] == oldest
    }
    for header in upto:
        assert header.findtext(f"{OAI}datestamp") <= oldest


@pytest.mark.parametrize(
    "bounds",
    [
        {"until": "9999-12-31"},  # a day has no next day to end at
        {"until": "9999-12-31T23:59:59Z"},
        {"from": "0001-01-01", "until": "9999-12-31"},
        {"from": "0001-01-01T00:00:00Z", "until": "9999-12-31T23:59:59Z"},
    ],
)
async def test_the_widest_dates_list_everything(
    provider: RunningProvider, db: Pool, bounds: dict[str, str]
) -> None:
    """The first and last days a datestamp can name are legal from/until values (§3.3.1): the
    list is the whole catalogue, through its resumptionTokens (a 500 before: the day after
    9999-12-31 cannot be computed)."""
    headers = await list_all(provider.oai, metadataPrefix="iso19139", **bounds)
    assert sorted(h.findtext(f"{OAI}identifier") for h in headers) == sorted(
        await factories.catalogue(db)
    )


async def test_deleted_records_and_set_departures(provider: RunningProvider, db: Pool) -> None:
    """P11, H21: a deleted record, or one that left a set, is a deleted header there."""
    ids = sorted(await factories.catalogue(db))
    await factories.load_records(db, "shared01", [0], kind="shared")  # record 0 also in shared01
    zero = next(i for i in ids if i.endswith(".0"))
    await factories.delete(db, OWN, ids[1:3])
    got = await oai_get(
        provider.oai, verb="GetRecord", identifier=ids[1], metadataPrefix="iso19139"
    )
    check(got.body)
    assert got.xpath("//oai:header/@status") == ["deleted"]
    assert got.xpath("//oai:metadata") == []
    await factories.delete(db, "shared01", [zero])
    in_shared = await list_all(provider.oai, metadataPrefix="iso19139", set="shared01")
    assert [(h.findtext(f"{OAI}identifier"), h.get("status")) for h in in_shared] == [
        (zero, "deleted")
    ]
    whole = {
        h.findtext(f"{OAI}identifier"): h.get("status")
        for h in await list_all(provider.oai, metadataPrefix="iso19139")
    }
    assert whole[zero] is None and whole[ids[1]] == "deleted" and whole[ids[2]] == "deleted"


async def test_sets_select_their_records(provider: RunningProvider, db: Pool) -> None:
    await factories.load_records(
        db, "WIS-GISC-OTHER", range(5000, 5007), centre="yy", kind="remote"
    )
    remote = await list_all(provider.oai, metadataPrefix="iso19139", set="WIS-GISC-OTHER")
    assert len(remote) == 7
    own = await list_all(provider.oai, metadataPrefix="iso19139", set=OWN)
    assert len(own) == 250
    union = await list_all(provider.oai, metadataPrefix="iso19139", set="WIS-CATALOGUE")
    assert len(union) == 257


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


async def test_an_identifier_that_is_no_uri_is_a_bad_argument(provider: RunningProvider) -> None:
    """P01, P02: OAI-PMH.xsd types the request element's identifier as an xs:anyURI, so an
    identifier argument that is not one is an illegal value (§3.6, badArgument), not an
    unknown item (idDoesNotExist), whose answer echoed it and was invalid."""
    answer = await oai_get(
        provider.oai, verb="GetRecord", identifier="urn:x-wmo:md:a[1]", metadataPrefix="iso19139"
    )
    check(answer.body)
    assert answer.errors() == ["badArgument"]
    assert answer.xpath("//oai:error/text()") == [
        "'urn:x-wmo:md:a[1]' is not a legal identifier, which is a URI (xs:anyURI): "
        "'[' or ']' outside the fragment and a host in brackets"
    ]
    request = answer.tree.find(f"{OAI}request")
    assert request is not None and request.attrib == {}


# ---- RELIABILITY P02 to P15: the rest of each criterion ------------------------------------


async def test_p02_until_a_year_before_the_earliest_datestamp_matches_nothing(
    provider: RunningProvider,
) -> None:
    """P02: ``until`` one year before Identify's earliestDatestamp is noRecordsMatch, echoed."""
    identify = await oai_get(provider.oai, verb="Identify")
    earliest = datetime.strptime(
        identify.tree.findtext(f"{OAI}Identify/{OAI}earliestDatestamp") or "",
        "%Y-%m-%dT%H:%M:%SZ",
    )
    until = (earliest - timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for verb in ("ListIdentifiers", "ListRecords"):
        answer = await oai_get(provider.oai, verb=verb, metadataPrefix="oai_dc", until=until)
        check(answer.body)
        assert answer.errors() == ["noRecordsMatch"]
        request = answer.tree.find(f"{OAI}request")
        assert request is not None
        assert dict(request.attrib) == {"verb": verb, "metadataPrefix": "oai_dc", "until": until}


async def test_p02_the_granularity_is_seconds_so_a_seconds_from_is_legal(
    provider: RunningProvider,
) -> None:
    """P02: Rule: wiscat's granularity is always seconds (Identify; README "What the provider
    serves": datestamps are ``YYYY-MM-DDThh:mm:ssZ``), so the matrix's "seconds from against a
    day-granularity repository" cannot arise: such a from is legal, and so is a day one (§3.3.1).
    Nor can "no sets": WIS-CATALOGUE is always a set, so ListSets is never noSetHierarchy."""
    identify = await oai_get(provider.oai, verb="Identify")
    assert identify.tree.findtext(f"{OAI}Identify/{OAI}granularity") == "YYYY-MM-DDThh:mm:ssZ"
    for since in ("2000-01-01T00:00:00Z", "2000-01-01"):
        headers = await list_all(provider.oai, metadataPrefix="iso19139", **{"from": since})
        assert len(headers) == 250
    sets = await oai_get(provider.oai, verb="ListSets")
    check(sets.body)
    assert sets.errors() == []
    assert "WIS-CATALOGUE" in sets.xpath("//oai:setSpec/text()")


def _normalised(body: bytes, codec: TokenCodec) -> bytes:
    """``body`` less what names the moment it was made: its responseDate, and in its
    resumptionToken the expiry and the list's frozen upper bound (the token is replaced by the
    rest of its position, decoded)."""
    tree = etree.fromstring(body)
    for date in tree.findall(f"{OAI}responseDate"):
        date.text = "-"

    def timeless(token: str) -> str:
        position = codec.decode(token, now=datetime.now(UTC))
        return repr(dataclasses.replace(position, expires=_EPOCH, upper_bound=_EPOCH))

    for token in tree.iter(f"{OAI}resumptionToken"):
        token.attrib.pop("expirationDate", None)
        if token.text:
            token.text = timeless(token.text)
    for request in tree.findall(f"{OAI}request"):
        echoed = request.get("resumptionToken")
        if echoed and request.get("verb") in ("ListIdentifiers", "ListRecords"):
            with contextlib.suppress(BadResumptionToken):  # not one of ours: kept as it is
                request.set("resumptionToken", timeless(echoed))
    return etree.tostring(tree)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _codec(running: RunningProvider) -> TokenCodec:
    secret = running.settings.token_secret
    assert secret is not None
    return TokenCodec(secret.get_secret_value().encode(), lifetime=timedelta(hours=1))


async def _fetch(
    session: aiohttp.ClientSession, url: str, query: str, *, post: bool, encoding: str = "identity"
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Accept-Encoding": encoding}
    if post:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = session.post(url, data=query.encode(), headers=headers)
    else:
        request = session.get(url + "?" + query if query else url, headers=headers)
    async with request as response:
        return response.status, dict(response.headers), await response.read()


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


async def test_p04_bounds_at_the_second_and_at_the_day(db: Pool, database_url: str) -> None:
    """P04: records at T-1 s, T, T+1 s and about the edges of day D: ``from=T`` includes T and
    not T-1 s, ``until=T`` includes T and not T+1 s, ``until=D`` includes D 23:59:59 (not the
    next day's 00:00:00), ``from=D`` includes D 00:00:00 (not the day before's 23:59:59); in
    the whole catalogue and in a set."""
    ids = await factories.load_records(db, OWN, range(7))
    stamps = dict(
        zip(
            ids,
            [
                "2024-03-10T11:59:59Z",  # T - 1 s
                "2024-03-10T12:00:00Z",  # T
                "2024-03-10T12:00:01Z",  # T + 1 s
                "2024-03-19T23:59:59Z",  # the second before D
                "2024-03-20T00:00:00Z",  # D's first second
                "2024-03-20T23:59:59Z",  # D's last second
                "2024-03-21T00:00:00Z",  # the second after D
            ],
            strict=True,
        )
    )
    for table in ("records", "set_members"):
        await factories.backdate(
            db,
            f"update {table} t set datestamp = s.stamp::timestamptz "
            "from unnest($1::text[], $2::text[]) as s(identifier, stamp) "
            "where t.identifier = s.identifier",
            list(stamps),
            list(stamps.values()),
        )
    t_minus, t, t_plus, before_d, d_first, d_last, after_d = ids
    cases = [
        ({"from": "2024-03-10T12:00:00Z"}, set(ids) - {t_minus}),
        ({"until": "2024-03-10T12:00:00Z"}, {t_minus, t}),
        ({"from": "2024-03-10T12:00:00Z", "until": "2024-03-10T12:00:00Z"}, {t}),
        ({"from": "2024-03-10T12:00:01Z", "until": "2024-03-10T12:00:01Z"}, {t_plus}),
        ({"until": "2024-03-20"}, set(ids) - {after_d}),
        ({"from": "2024-03-20"}, {d_first, d_last, after_d}),
        ({"from": "2024-03-20", "until": "2024-03-20"}, {d_first, d_last}),
        ({"from": "2024-03-19T23:59:59Z", "until": "2024-03-20T00:00:00Z"}, {before_d, d_first}),
    ]
    async with running_provider(database_url) as running:
        for in_set in ({}, {"set": OWN}):
            for bounds, expected in cases:
                for verb in ("ListIdentifiers", "ListRecords"):
                    answer = await oai_get(
                        running.oai, verb=verb, metadataPrefix="oai_dc", **bounds, **in_set
                    )
                    check(answer.body)
                    listed = answer.xpath("//oai:header/oai:identifier/text()")
                    assert sorted(listed) == sorted(expected), (bounds, in_set, verb)
                    assert {
                        i: s
                        for i, s in zip(listed, answer.xpath("//oai:datestamp/text()"), strict=True)
                    } == {i: stamps[i] for i in expected}


async def test_p05_identify_names_the_configured_url_whatever_host_is_asked(
    provider: RunningProvider,
) -> None:
    """P05: a request naming another host (``Host``, ``X-Forwarded-Host``, ``Forwarded``) gets
    the configured baseURL, in Identify and in the request element, and so does any answer."""
    spoofed = {
        "Host": "evil.example",
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-For": "203.0.113.9",
        "Forwarded": "host=evil.example;proto=https",
    }
    async with aiohttp.ClientSession() as session:
        for query in ("verb=Identify", "verb=ListSets", "verb=Nope"):
            async with session.get(provider.oai + "?" + query, headers=spoofed) as response:
                assert response.status == 200
                body = await response.read()
            check(body)
            tree = etree.fromstring(body)
            assert tree.findtext(f"{OAI}request") == provider.settings.base_url
            assert b"evil.example" not in body
    identify = etree.fromstring(await _identify(provider.oai, spoofed))
    assert identify.findtext(f"{OAI}Identify/{OAI}baseURL") == provider.settings.base_url


async def _identify(url: str, headers: dict[str, str]) -> bytes:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, params={"verb": "Identify"}, headers=headers) as response,
    ):
        return await response.read()


async def test_p05_earliest_datestamp_is_no_later_than_any_datestamp_served(
    db: Pool, database_url: str
) -> None:
    """P05: Identify's earliestDatestamp is at or before every datestamp a list can serve:
    the records', the tombstones' and the set memberships' (a record's membership of a set
    keeps its datestamp when the record later joins another set, which restamps the record)."""
    first = await factories.load_records(db, OWN, [0, 1])
    await asyncio.sleep(1.1)  # the next writes a second later at least
    await factories.load_records(db, "shared01", [0], kind="shared")  # record 0 joins shared01
    await factories.delete(db, OWN, [first[1]])  # record 1: a tombstone
    async with running_provider(database_url) as running:
        identify = await oai_get(running.oai, verb="Identify")
        check(identify.body)
        earliest = identify.tree.findtext(f"{OAI}Identify/{OAI}earliestDatestamp") or ""
        served = [
            h.findtext(f"{OAI}datestamp") or ""
            for in_set in ({}, {"set": OWN}, {"set": "shared01"})
            for h in await list_all(running.oai, metadataPrefix="iso19139", **in_set)
        ]
        assert len(served) == 5
        assert earliest <= min(served), (earliest, sorted(served))
        # and no list from earliestDatestamp misses anything
        since = await list_all(
            running.oai, metadataPrefix="iso19139", set=OWN, **{"from": earliest}
        )
        assert sorted(h.findtext(f"{OAI}identifier") for h in since) == sorted(first)
    oldest = await db.fetchval(
        "select min(d) from (select datestamp d from records "
        "union all select datestamp from set_members) s"
    )
    assert earliest == oldest.strftime("%Y-%m-%dT%H:%M:%SZ")


async def _pages(url: str, verb: str, **params: str) -> list[tuple[str | None, Answer]]:
    """Every page of a list, each with the token that asked for it (None: the first)."""
    pages: list[tuple[str | None, Answer]] = []
    asked: str | None = None
    answer = await oai_get(url, verb=verb, **params)
    while True:
        assert answer.status == 200 and not answer.errors(), answer.body[:300]
        pages.append((asked, answer))
        asked = answer.tree.findtext(f".//{OAI}resumptionToken")
        if not asked:
            return pages
        answer = await oai_get(url, verb=verb, resumptionToken=asked)


async def test_p07_a_token_issued_again_gives_its_page_again(provider: RunningProvider) -> None:
    """P07: once a list is done, its last token and then the one before it are issued again:
    each gives the page it gave (the same records, in the same order, the same body less
    responseDate and token times), no badResumptionToken."""
    codec = _codec(provider)
    for verb in ("ListRecords", "ListIdentifiers"):
        pages = await _pages(provider.oai, verb, metadataPrefix="iso19139")
        assert len(pages) == 3
        for token, first in (pages[2], pages[1], pages[2]):
            assert token is not None
            again = await oai_get(provider.oai, verb=verb, resumptionToken=token)
            check(again.body)
            assert again.errors() == []
            ids = "//oai:header/oai:identifier/text()"
            assert again.xpath(ids) == first.xpath(ids) and len(again.xpath(ids)) >= 50
            assert _normalised(again.body, codec) == _normalised(first.body, codec)


async def test_p09_tampered_tokens_are_bad_resumption_tokens_and_nothing_worse(
    provider: RunningProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """P09: a token truncated, base64 of garbage, SQL, 10 KB long, one byte flipped, signed
    elsewhere or of the other list verb: badResumptionToken, HTTP 200, XSD-valid, for both list
    verbs; not one 5xx, and nothing in the log (no database error, no warning)."""
    caplog.set_level(logging.DEBUG)
    first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    token = first.tree.findtext(f".//{OAI}resumptionToken") or ""
    assert len(token) > 40
    flipped = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    flipped[len(flipped) // 2] ^= 0x01
    tampered = [
        token[: len(token) // 2],  # truncated
        token[:-1],  # one character short
        base64.urlsafe_b64encode(b"\x01" + os.urandom(80)).decode().rstrip("="),  # garbage
        base64.b64encode(b"' OR 1=1 --; drop table records").decode(),
        "' OR 1=1 --",
        "1' UNION SELECT xml FROM records --",
        "A" * 10_240,  # 10 KB, of the token alphabet
        base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("="),
        "%00",
        "\u00e9\u20ac",
    ]
    for verb in ("ListIdentifiers", "ListRecords"):
        for bad in [*tampered, token if verb == "ListRecords" else ""]:
            if not bad:
                continue
            answer = await oai_get(provider.oai, verb=verb, resumptionToken=bad)
            assert answer.status == 200, (verb, bad)
            check(answer.body)
            assert answer.errors() == ["badResumptionToken"], (verb, bad)
    # the untampered token still continues its own list
    assert (
        await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token)
    ).errors() == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    text = caplog.text.lower()
    for trace in ("asyncpg", "postgres", "sql", "syntax error", "traceback"):
        assert trace not in text


async def test_p11_a_tombstone_is_stamped_when_deleted_and_a_record_made_again_is_live(
    provider: RunningProvider, db: Pool
) -> None:
    """P11: delete X, then re-create it. A list from before the deletion gives X's deleted
    header, stamped at the deletion, with no metadata; GetRecord X gives that header; once X is
    made again, ListIdentifiers and GetRecord give it live, once, at a newer datestamp."""
    (x,) = await factories.load_records(db, OWN, [7])
    await asyncio.sleep(1.1)  # the deletion a second after anything else
    since = datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    await asyncio.sleep(0.1)
    deleting = datetime.now(UTC)
    await factories.delete(db, OWN, [x])
    deleted = datetime.now(UTC)
    stamp = await db.fetchval("select datestamp from records where identifier = $1", x)
    assert deleting <= stamp <= deleted
    stamped = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    for verb in ("ListRecords", "ListIdentifiers"):
        for in_set in ({}, {"set": OWN}):
            answer = await oai_get(
                provider.oai, verb=verb, metadataPrefix="iso19139", **{"from": since}, **in_set
            )
            check(answer.body)
            assert answer.xpath("//oai:header/oai:identifier/text()") == [x]
            assert answer.xpath("//oai:header/@status") == ["deleted"]
            assert answer.xpath("//oai:header/oai:datestamp/text()") == [stamped]
            assert answer.xpath("//oai:metadata | //oai:about") == []
    got = await oai_get(provider.oai, verb="GetRecord", identifier=x, metadataPrefix="iso19139")
    check(got.body)
    assert got.errors() == []
    assert got.xpath("//oai:header/@status") == ["deleted"]
    assert got.xpath("//oai:header/oai:datestamp/text()") == [stamped]
    assert got.xpath("//oai:metadata") == []
    await factories.load_records(db, OWN, [7])  # made again
    for in_set in ({}, {"set": OWN}):
        headers = [
            h
            for h in await list_all(provider.oai, metadataPrefix="iso19139", **in_set)
            if h.findtext(f"{OAI}identifier") == x
        ]
        assert len(headers) == 1 and headers[0].get("status") is None
        assert (headers[0].findtext(f"{OAI}datestamp") or "") >= stamped
    got = await oai_get(provider.oai, verb="GetRecord", identifier=x, metadataPrefix="iso19139")
    check(got.body)
    assert got.xpath("//oai:header/@status") == []
    assert len(got.xpath("//oai:metadata")) == 1


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


async def test_p01_every_answer_is_utf8_text_xml_and_valid(
    provider: RunningProvider, db: Pool
) -> None:
    """P01: every verb, by its normal path, through a whole list and with tombstones and a set:
    HTTP 200, ``Content-Type: text/xml; charset=utf-8``, an XML declaration naming UTF-8, valid
    against OAI-PMH.xsd (oai_dc and the gmd stand-in loaded offline) and every strict check
    (dates, bounds, deleted headers without metadata or about, identifiers once a page); the
    error paths are test_errors'."""
    ids = sorted(await factories.catalogue(db))
    await factories.delete(db, OWN, ids[:3])
    queries = [
        "verb=Identify",
        "verb=ListSets",
        "verb=ListMetadataFormats",
        f"verb=ListMetadataFormats&identifier={ids[5]}",
        f"verb=GetRecord&metadataPrefix=iso19139&identifier={ids[5]}",
        f"verb=GetRecord&metadataPrefix=oai_dc&identifier={ids[5]}",
        f"verb=GetRecord&metadataPrefix=iso19139&identifier={ids[0]}",  # a tombstone
        f"verb=GetRecord&metadataPrefix=oai_dc&identifier={ids[0]}",
        "verb=ListIdentifiers&metadataPrefix=iso19139&from=2000-01-01&until=2999-12-31",
        f"verb=ListRecords&metadataPrefix=oai_dc&set={OWN}",
        "verb=ListRecords&metadataPrefix=iso19139",
    ]
    seen_deleted = 0
    async with aiohttp.ClientSession() as session:
        for query in queries:
            while query:
                status, headers, body = await _fetch(session, provider.oai, query, post=False)
                assert status == 200, query
                assert headers["Content-Type"] == "text/xml; charset=utf-8", query
                check(body)
                tree = etree.fromstring(body)
                assert tree.find(f"{OAI}error") is None, query
                seen_deleted += len(tree.findall(f".//{OAI}header[@status='deleted']"))
                token = tree.findtext(f".//{OAI}resumptionToken")
                verb = query.split("&")[0]
                query = f"{verb}&resumptionToken={token}" if token else ""
    assert seen_deleted == 2 + 3 * 3  # two GetRecords, three lists


#: identifiers holding XPath's metacharacters, each a legal xs:anyURI (RELIABILITY X09)
XPATH_METACHARACTERS = [
    "urn:x-wmo:md:int.wmo.wis::q'uote",
    'urn:x-wmo:md:int.wmo.wis::d"quote',
    "urn:x-wmo:md:int.wmo.wis::paren)or(1",
    "urn:x-wmo:md:int.wmo.wis::x'%20or%20'1'='1",
    "urn:x-wmo:md:int.wmo.wis::a/b|c*@d",
    "urn:x-wmo:md:int.wmo.wis::e#frag]ment[1]",
]


async def test_x09_identifiers_and_sets_with_xpath_metacharacters_find_their_own_records(
    db: Pool, database_url: str
) -> None:
    """X09: records whose identifiers hold ``'``, ``"``, ``)``, ``]``, ``|``, ``*``, ``@``, and a
    set named ``x'(y)*``: GetRecord and ListMetadataFormats of each find exactly that record, the
    set lists exactly its records, and look-alike arguments (``x' or '1'='1``) match nothing."""
    template = generate_record(1, centre="xx").decode()
    original = parse_record(template).identifier
    records = [
        parse_record(template.replace(original, identifier.replace('"', "&quot;")))
        for identifier in XPATH_METACHARACTERS
    ]
    assert [r.identifier for r in records] == XPATH_METACHARACTERS
    odd_set = "x'(y)*"
    await factories.load_records(db, OWN, range(20))
    await store.ensure_set(db, odd_set, "a set named with XPath's characters", "shared")
    async with db.acquire() as conn, conn.transaction():
        await store.upsert_records(conn, odd_set, [incoming(r) for r in records])
    async with running_provider(database_url) as running:
        for identifier in XPATH_METACHARACTERS:
            got = await oai_get(
                running.oai, verb="GetRecord", identifier=identifier, metadataPrefix="iso19139"
            )
            check(got.body)
            assert got.errors() == []
            assert got.xpath("//oai:header/oai:identifier/text()") == [identifier]
            assert parse_record(etree.tostring(got.xpath("//oai:metadata/*")[0])).identifier == (
                identifier
            )
            formats = await oai_get(running.oai, verb="ListMetadataFormats", identifier=identifier)
            assert formats.errors() == []
        in_set = await list_all(running.oai, metadataPrefix="iso19139", set=odd_set)
        assert sorted(h.findtext(f"{OAI}identifier") for h in in_set) == sorted(
            XPATH_METACHARACTERS
        )
        for identifier in ("urn:x' or '1'='1", "urn:x') or ('1'='1", "urn:x-wmo:md:int.wmo.wis::*"):
            got = await oai_get(
                running.oai, verb="GetRecord", identifier=identifier, metadataPrefix="iso19139"
            )
            check(got.body)
            assert got.errors() == ["idDoesNotExist"]
        for spec, code in (("x')or('1", "noRecordsMatch"), ("x' or '1'='1", "badArgument")):
            listed = await oai_get(
                running.oai, verb="ListIdentifiers", metadataPrefix="iso19139", set=spec
            )
            check(listed.body)
            assert listed.errors() == [code]
