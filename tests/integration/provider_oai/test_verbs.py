"""Every verb and every error of the provider, its dates and its Identify.

The provider runs over real HTTP on loopback, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from lxml import etree

from tests.integration.provider_oai.answers import ERRORS, MORE_ERRORS, OWN, _fetch, check
from tests.support import factories
from tests.support.oai_client import OAI, list_all, oai_get, oai_raw
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh.pages import PageReader, RecordItem


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


async def test_p01_a_page_of_records_that_share_a_gml_id_is_valid(
    provider: RunningProvider, db: Pool
) -> None:
    """P01: an XML ID is unique within its document only, and real records reuse one (every
    TimePeriod an ``extent``). A ListRecords page of three records with the same ``gml:id`` is
    valid against OAI-PMH.xsd with strict gmd, in both formats: the repeats are served renamed,
    each with its own record's suffix. GetRecord serves each record as stored, and a harvester
    reading the page gets each record back as stored."""
    shared = await factories.load_records(db, "WIS-GISC-DUP", [900, 901, 902], gml_id="extent")
    gml_id = "{http://www.opengis.net/gml/3.2}id"
    for prefix in ("iso19139", "oai_dc"):
        answer = await oai_get(
            provider.oai, verb="ListRecords", metadataPrefix=prefix, set="WIS-GISC-DUP"
        )
        assert answer.status == 200
        check(answer.body)
        assert answer.errors() == []
        assert sorted(answer.xpath("//oai:header/oai:identifier/text()")) == sorted(shared)
        if prefix == "iso19139":
            served = [e.get(gml_id) for e in answer.tree.iter() if e.get(gml_id)]
            assert len(set(served)) == 3 and "extent" in served, served
            read = [
                item.metadata.find(".//{http://www.opengis.net/gml/3.2}TimePeriod")
                for item in PageReader(answer.body).items()
                if isinstance(item, RecordItem) and item.metadata is not None
            ]
            assert [e.get(gml_id) for e in read if e is not None] == ["extent"] * 3
    for identifier in shared:
        got = await oai_get(
            provider.oai, verb="GetRecord", metadataPrefix="iso19139", identifier=identifier
        )
        check(got.body)
        assert [e.get(gml_id) for e in got.tree.iter() if e.get(gml_id)] == ["extent"]


async def _xml_ids(db: Pool, identifier: str) -> str | None:
    value: str | None = await db.fetchval(
        "select xml_ids from records where identifier = $1", identifier
    )
    return value


async def test_p01_ids_stored_with_a_record_follow_every_change_of_its_document(
    provider: RunningProvider, db: Pool
) -> None:
    """P01 with the IDs found when a record is written (records.xml_ids, migration 0019), not
    as it is served: each write of a record's document, by a harvest or ingest, by a backup
    synchronisation or by SQL, leaves its stored IDs those of the new document or unknown. Three
    records come to use ``extent``, each by another writer; the page still renames the repeats."""
    spec = "WIS-GISC-IDS"
    first, second, third = await factories.load_records(db, spec, [910, 911, 912])
    assert await _xml_ids(db, first) == 'temporal-extent-910"'
    # by wiscat's upsert (a harvest, an ingest), as an update of the record
    await factories.load_records(db, spec, [910], version=1, gml_id="extent")
    await factories.load_records(db, spec, [911], version=1, gml_id="extent")
    assert await _xml_ids(db, second) == 'extent"'
    # by a backup synchronisation, a newer copy replacing the record
    newer = parse_record(generate_record(912, version=2, gml_id="spare"))
    async with db.acquire() as conn, conn.transaction():
        result = await store.backup_records(conn, spec, [incoming(newer)], [datetime.now(UTC)])
    assert result.outcomes == {third: "taken"}
    assert await _xml_ids(db, third) == 'spare"'
    # by SQL, which cannot know the IDs: unknown, so the record is searched as it is served
    await db.execute(
        "update records set xml = replace(xml, 'gml:id=\"spare\"', 'gml:id=\"extent\"') "
        "where identifier = $1",
        third,
    )
    assert await _xml_ids(db, third) is None
    answer = await oai_get(provider.oai, verb="ListRecords", metadataPrefix="iso19139", set=spec)
    check(answer.body)
    gml_id = "{http://www.opengis.net/gml/3.2}id"
    served = sorted(e.get(gml_id) for e in answer.tree.iter() if e.get(gml_id))
    assert len(served) == 3 and served[0] == "extent", served
    assert all(value.startswith("extent.page-dup-") for value in served[1:]), served


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
