"""P14: characters XML 1.0 does not allow (§2.2), in stored records and on every way in.

A record row holding one (written by direct SQL, or by an older version) is served well-formed:
each such character replaced by U+FFFD, counted and logged; one still not well-formed then (the
character sat inside a tag) is served as its header alone. Every write path refuses them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from lxml import etree
from prometheus_client.parser import text_string_to_metric_families

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, run
from tests.support.oai_client import NS, OAI, Answer, oai_get
from tests.support.oai_validation import strict_checks, validate_oai
from tests.support.servers import RunningProvider, running_provider, serving
from tests.unit.test_invalid_characters import CODES, allowed
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.errors import UnstorableText
from wiscat.shared.db.pool import Pool
from wiscat.shared.db.records import Executor
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.ingest import incoming, ingest_paths
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.oaipmh import render

OWN = "WIS-GISC-TEST"
GMD = "{http://www.isotc211.org/2005/gmd}"
DC = "{http://purl.org/dc/elements/1.1/}"
TITLE_END = "</gco:CharacterString></gmd:title>"
LANGUAGE = 'codeListValue="eng"'
ABSTRACT_END = "</gco:CharacterString></gmd:abstract>"
ROOT_START = "<gmd:MD_Metadata "

# record number -> (text replaced in its stored document, what replaces it): one character
# XML 1.0 does not allow in a title, in an attribute value, three in an abstract, and one
# inside a start tag, where U+FFFD cannot stand either
BROKEN = {
    1: (TITLE_END, "\x0b" + TITLE_END),
    2: (TITLE_END, "\ufffe" + TITLE_END),
    3: (LANGUAGE, 'codeListValue="eng\uffff"'),
    4: (ABSTRACT_END, "\x01\x1f\x0c" + ABSTRACT_END),
    5: (ROOT_START, ROOT_START + "\x0b "),
}
REPLACED, WITHHELD = [1, 2, 3, 4], [5]
TITLE = f"{GMD}identificationInfo//{GMD}title/*"


def title_of(n: int) -> str:
    """The title of generated record ``n``."""
    return etree.fromstring(generate_record(n)).findtext(TITLE) or ""


@pytest.fixture
async def broken(db: Pool) -> list[str]:
    """Eight records, five of them then changed by direct SQL; their identifiers."""
    identifiers = await factories.load_records(db, OWN, range(8))
    for n, (old, new) in BROKEN.items():
        await break_record(db, identifiers[n], old, new)
    return identifiers


async def break_record(db: Executor, identifier: str, old: str, new: str) -> None:
    """Replace the first ``old`` in a stored document by ``new``, by SQL (neither holds a
    character a regular expression or its replacement treats specially)."""
    changed = await db.execute(
        "update records set xml = regexp_replace(xml, $2, $3) where identifier = $1 "
        "and strpos(xml, $2) > 0",
        identifier,
        old,
        new,
    )
    assert changed == "UPDATE 1"


@pytest.fixture
async def provider(broken: list[str], database_url: str) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url) as running:
        yield running


def check(answer: Answer) -> None:
    assert answer.status == 200, answer.body[-500:]
    validate_oai(answer.body)
    strict_checks(answer.body)


async def mended_counts(provider: RunningProvider) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(provider.root + "/metrics") as response,
    ):
        text = await response.text()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "wiscat_oai_records_with_invalid_characters"
        for sample in family.samples
    }


def metadata_of(answer: Answer) -> dict[str, etree._Element | None]:
    """identifier -> the record's metadata payload (None: the record has no metadata)."""
    found = {}
    for record in answer.xpath("//oai:record"):
        payload = record.xpath("oai:metadata/*", namespaces=NS)
        found[record.findtext(f"{OAI}header/{OAI}identifier")] = payload[0] if payload else None
    return found


def log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "wiscat.provider"]


REPLACED_LINES = {
    1: "record {!r} holds 1 character XML 1.0 does not allow (U+000B): "
    "served with U+FFFD in its place",
    2: "record {!r} holds 1 character XML 1.0 does not allow (U+FFFE): "
    "served with U+FFFD in its place",
    3: "record {!r} holds 1 character XML 1.0 does not allow (U+FFFF): "
    "served with U+FFFD in its place",
    4: "record {!r} holds 3 characters XML 1.0 does not allow (the first U+0001): "
    "served with U+FFFD in their place",
}
WITHHELD_LINE = (
    "record {!r} holds 1 character XML 1.0 does not allow (U+000B), and is not "
    "well-formed with U+FFFD in its place either (not well-formed XML: Specification mandates "
    "value for attribute \ufffd, line 1, column 20): served without its metadata"
)


def expected_lines(identifiers: list[str]) -> list[str]:
    """The lines logged for the records changed, sorted."""
    return sorted(
        [REPLACED_LINES[n].format(identifiers[n]) for n in REPLACED]
        + [WITHHELD_LINE.format(identifiers[n]) for n in WITHHELD]
    )


async def test_p14_list_records_serves_stored_invalid_characters_as_u_fffd(
    provider: RunningProvider, broken: list[str], db: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """P14: ListRecords in iso19139 is HTTP 200, well-formed and valid against OAI-PMH.xsd;
    each character XML 1.0 does not allow is U+FFFD in the record served, the record with one
    inside a tag is its header alone; each is counted and logged with its identifier."""
    caplog.set_level(logging.WARNING, logger="wiscat.provider")
    answer = await oai_get(provider.oai, verb="ListRecords", metadataPrefix="iso19139")
    check(answer)
    served = metadata_of(answer)
    assert sorted(served) == sorted(broken)  # the whole list, in one page
    for n in (1, 2):
        element = served[broken[n]]
        assert element is not None
        assert element.findtext(TITLE) == title_of(n) + "\ufffd"
    element = served[broken[3]]
    assert element is not None
    assert element.find(f"{GMD}language/*").get("codeListValue") == "eng\ufffd"  # type: ignore[union-attr]
    element = served[broken[4]]
    assert element is not None
    assert (element.findtext(f"{GMD}identificationInfo//{GMD}abstract/*") or "").endswith(
        "\ufffd\ufffd\ufffd"
    )
    assert served[broken[5]] is None
    # the others as they are stored
    for n in (0, 6, 7):
        stored = await db.fetchval("select xml from records where identifier = $1", broken[n])
        assert stored.encode() in answer.body
    assert await mended_counts(provider) == {"replaced": 4.0, "withheld": 1.0, "unlisted": 0.0}
    assert sorted(log_lines(caplog)) == expected_lines(broken)


async def test_p14_list_records_in_oai_dc_serves_stored_invalid_characters_as_u_fffd(
    provider: RunningProvider, broken: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """P14: ListRecords in oai_dc, which parses each stored record for the crosswalk, is HTTP
    200 (it was a 500), well-formed and valid; the titles carry U+FFFD, the record with a
    character inside a tag is its header alone."""
    caplog.set_level(logging.WARNING, logger="wiscat.provider")
    answer = await oai_get(provider.oai, verb="ListRecords", metadataPrefix="oai_dc")
    check(answer)
    served = metadata_of(answer)
    assert sorted(served) == sorted(broken)
    for n in (1, 2):
        element = served[broken[n]]
        assert element is not None
        assert element.findtext(f"{DC}title") == title_of(n) + "\ufffd"
    assert served[broken[5]] is None
    assert all(served[broken[n]] is not None for n in (0, 3, 4, 6, 7))
    assert await mended_counts(provider) == {"replaced": 4.0, "withheld": 1.0, "unlisted": 0.0}
    assert sorted(log_lines(caplog)) == expected_lines(broken)


@pytest.mark.parametrize("prefix", ["iso19139", "oai_dc"])
async def test_p14_get_record_serves_stored_invalid_characters_as_u_fffd(
    provider: RunningProvider, broken: list[str], prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """P14: GetRecord of each changed record, in both formats: HTTP 200, well-formed and valid;
    each counted and logged once."""
    caplog.set_level(logging.WARNING, logger="wiscat.provider")
    for n in BROKEN:
        answer = await oai_get(
            provider.oai, verb="GetRecord", identifier=broken[n], metadataPrefix=prefix
        )
        check(answer)
        served = metadata_of(answer)
        assert list(served) == [broken[n]]
        assert (served[broken[n]] is None) == (n in WITHHELD)
        if prefix == "iso19139" and n in REPLACED:
            assert "\ufffd".encode() in answer.body
    assert await mended_counts(provider) == {"replaced": 4.0, "withheld": 1.0, "unlisted": 0.0}
    assert sorted(log_lines(caplog)) == expected_lines(broken)


async def test_p14_a_harvest_of_such_a_provider_stores_what_it_serves(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """P14, from the other end: a wiscat harvester harvests a wiscat provider whose database
    holds those rows. The run is ok (its first page was not well-formed before): the records
    with U+FFFD are stored, the one served without metadata quarantined, the others stored."""
    caplog.set_level(logging.WARNING, logger="wiscat.provider")
    identifiers = await factories.load_records(pair.source, SOURCE_SET, range(8))
    for n, (old, new) in BROKEN.items():
        await break_record(pair.source, identifiers[n], old, new)
    await add_link(pair)
    report = await run(pair)
    assert report.status == "ok", report.summary()
    assert (report.counts["added"], report.counts["quarantined"]) == (7, 1)
    rows = await pair.sink.fetch("select identifier, reason from quarantine")
    assert [(r["identifier"], r["reason"]) for r in rows] == [
        (identifiers[5], "record without metadata")
    ]
    stored = await pair.sink.fetchval(
        "select xml from records where identifier = $1", identifiers[1]
    )
    assert "XX #1\ufffd</gco:CharacterString>" in stored


async def flagged(db: Pool) -> list[str]:
    """The identifiers of the rows marked to be mended when served (migration 0009), sorted."""
    rows = await db.fetch("select identifier from records where xml_mend order by identifier")
    return [r["identifier"] for r in rows]


async def test_p14_the_database_check_is_xml_1_0s_rule_for_every_character(db: Pool) -> None:
    """P14: migration 0009's ``wiscat_xml_needs_mend``, which flags rows as they are written,
    holds a document for mending exactly when it has a character XML 1.0 does not allow, for
    every character PostgreSQL can store (all but U+0000 and the surrogates)."""
    codes = [c for c in CODES if c]
    rows = await db.fetch(
        "select c from unnest($1::int[]) as c "
        "where wiscat_xml_needs_mend('<a>x' || chr(c) || 'y</a>') order by c",
        codes,
    )
    assert [r["c"] for r in rows] == [c for c in codes if not allowed(c)]


async def test_p14_rows_given_such_characters_by_sql_are_flagged_as_written(
    provider: RunningProvider, broken: list[str], db: Pool
) -> None:
    """P14: a row wiscat wrote clean and SQL then gave such a character, or SQL inserted with
    one, is flagged by the write itself; a write of its other columns, or of the flag alone,
    leaves the flag as its document says, and the record is served mended."""
    assert await flagged(db) == sorted(broken[n] for n in BROKEN)
    await db.execute(
        "insert into records (identifier, datestamp, xml) values "
        "('sql:bad', now(), '<a>x' || chr(11) || '</a>'), ('sql:good', now(), '<a>x</a>')"
    )
    assert await flagged(db) == sorted([*(broken[n] for n in BROKEN), "sql:bad"])
    await db.execute("update records set set_specs = '{OTHER}' where identifier = 'sql:bad'")
    await db.execute("update records set xml_mend = not xml_mend")
    assert await flagged(db) == sorted([*(broken[n] for n in BROKEN), "sql:bad"])
    answer = await oai_get(
        provider.oai, verb="GetRecord", identifier=broken[1], metadataPrefix="iso19139"
    )
    check(answer)
    element = metadata_of(answer)[broken[1]]
    assert element is not None
    assert element.findtext(TITLE) == title_of(1) + "\ufffd"
    assert await mended_counts(provider) == {"replaced": 1.0, "withheld": 0.0, "unlisted": 0.0}


async def test_p14_a_record_corrected_by_sql_is_unflagged_and_sent_as_stored(
    provider: RunningProvider, broken: list[str], db: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """P14: a flagged row whose character SQL then takes out is no longer flagged, and is sent
    as it is stored, neither counted nor logged."""
    caplog.set_level(logging.WARNING, logger="wiscat.provider")
    old, new = BROKEN[1]
    await break_record(db, broken[1], new, old)
    assert broken[1] not in await flagged(db)
    answer = await oai_get(
        provider.oai, verb="GetRecord", identifier=broken[1], metadataPrefix="iso19139"
    )
    check(answer)
    stored = await db.fetchval("select xml from records where identifier = $1", broken[1])
    assert stored.encode() in answer.body
    assert await mended_counts(provider) == {"replaced": 0.0, "withheld": 0.0, "unlisted": 0.0}
    assert log_lines(caplog) == []


async def test_p14_a_wiscat_write_of_a_clean_record_leaves_its_row_unflagged(
    broken: list[str], db: Pool
) -> None:
    """P14: upsert_records and backup_records, whose documents lxml wrote, leave the rows they
    write unflagged, flagged ones included; a write by SQL later in the same transaction is
    checked again."""
    assert await flagged(db) == sorted(broken[n] for n in BROKEN)
    later = datetime.now(UTC) + timedelta(minutes=1)
    async with db.acquire() as conn, conn.transaction():
        written = await store.upsert_records(
            conn, OWN, [incoming(parse_record(generate_record(n, version=1))) for n in (1, 8)]
        )
        assert written.outcomes == {broken[1]: "updated", identifier_for(8, "xx"): "added"}
        taken = await store.backup_records(
            conn, OWN, [incoming(parse_record(generate_record(2, version=1)))], [later]
        )
        assert taken.outcomes == {broken[2]: "taken"}
        await break_record(conn, broken[0], *BROKEN[1])
    assert await flagged(db) == sorted(broken[n] for n in (0, 3, 4, 5))


# Ways a character XML 1.0 does not allow can be written in a document's text: as itself, or by
# a character reference (which lxml may have been thought to let through).
FORMS = {
    "a vertical tab": (b"\x0b", "PCDATA invalid Char value 11"),
    "a unit separator": (b"\x1f", "PCDATA invalid Char value 31"),
    "U+FFFE": ("\ufffe".encode(), "PCDATA invalid Char value 65534"),
    "U+FFFF": ("\uffff".encode(), "PCDATA invalid Char value 65535"),
    "&#11;": (b"&#11;", "xmlParseCharRef: invalid xmlChar value 11"),
    "&#x1F;": (b"&#x1F;", "xmlParseCharRef: invalid xmlChar value 31"),
    "&#xFFFE;": (b"&#xFFFE;", "xmlParseCharRef: invalid xmlChar value 65534"),
    "&#xFFFF;": (b"&#xFFFF;", "xmlParseCharRef: invalid xmlChar value 65535"),
    "&#xD800;": (b"&#xD800;", "xmlParseCharRef: invalid xmlChar value 55296"),
    "&#0;": (b"&#0;", "xmlParseCharRef: invalid xmlChar value 0"),
}


def with_character(n: int, form: str) -> tuple[str, bytes]:
    """Record ``n`` with the character of ``form`` at the end of its title: its identifier
    and its bytes."""
    document = generate_record(n)
    end = TITLE_END.encode()
    return parse_record(document).identifier, document.replace(end, FORMS[form][0] + end, 1)


def position(data: bytes, form: str) -> str:
    """Where libxml2 reports the character of ``form`` in ``data``: the line, and the column
    of the character, or of the one after a character reference."""
    before = data[: data.index(FORMS[form][0] + TITLE_END.encode())]
    line = before.count(b"\n") + 1
    column = len(before) - before.rfind(b"\n")
    if form.startswith("&"):
        column += len(form)
    return f"line {line}, column {column}"


def reason(data: bytes, form: str) -> str:
    return f"not well-formed XML: {FORMS[form][1]}, {position(data, form)}"


@pytest.mark.parametrize("form", FORMS)
async def test_p14_ingest_refuses_a_record_with_an_invalid_character(
    db: Pool, tmp_path: Path, form: str
) -> None:
    """P14: ``wiscat ingest`` refuses a file whose record holds a character XML 1.0 does not
    allow, whatever its form, with the reason; the good file beside it is stored, nothing of
    the bad one."""
    identifier, document = with_character(1, form)
    (tmp_path / "bad.xml").write_bytes(document)
    (tmp_path / "good.xml").write_bytes(generate_record(2))
    report = await ingest_paths(db, OWN, [tmp_path])
    assert report.refused == [(str(tmp_path / "bad.xml"), reason(document, form))]
    assert report.counts == {"added": 1}
    assert not await db.fetchval(
        "select exists (select from records where identifier = $1)", identifier
    )


@pytest.mark.parametrize("form", ["a vertical tab", "U+FFFE", "&#xFFFE;", "&#11;"])
async def test_p14_the_admin_api_refuses_a_record_with_an_invalid_character(
    db: Pool, database_url: str, form: str
) -> None:
    """P14: PUT /admin/records/... answers 400 with the reason; nothing is stored."""
    identifier, document = with_character(1, form)
    async with (
        running_provider(database_url) as provider,
        aiohttp.ClientSession() as http,
        http.put(
            f"{provider.root}/admin/records/{identifier}",
            data=document,
            headers={"Authorization": "Bearer test-admin-token"},
        ) as response,
    ):
        assert (response.status, await response.json()) == (
            400,
            {"detail": f"record refused: {reason(document, form)}"},
        )
    assert await db.fetchval("select count(*) from records") == 0


async def test_p14_a_harvested_record_with_an_invalid_character_is_quarantined(
    pair: Pair,
) -> None:
    """P14: a peer's record holding a character XML 1.0 does not allow, literal or by reference,
    is quarantined as received with the reason (one by one, by ListIdentifiers + GetRecord; by
    ListRecords its whole page is refused, and nothing of it written); the others are stored."""
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC)
    forms = ["U+FFFF", "&#11;", "&#xFFFE;", "&#x1F;"]
    documents: dict[str, bytes] = {}
    broken: dict[str, str] = {}
    for n, form in enumerate(forms):
        identifier, document = with_character(n, form)
        documents[identifier] = document.split(b"?>", 1)[1].lstrip()
        broken[identifier] = form
    good = [parse_record(generate_record(n)) for n in range(10, 12)]
    documents.update({r.identifier: r.xml.encode() for r in good})
    answers: dict[str, bytes] = {}

    async def answer(request: web.Request) -> bytes:
        verb = request.query["verb"]
        start = render.response_start(now, "http://peer/oai", dict(request.query), verb)
        if verb == "ListRecords":
            body = b"".join(render.record(i, now, [], False, x) for i, x in documents.items())
            answers[verb] = start + body + render.response_end(verb)
        elif verb == "ListIdentifiers":
            body = b"".join(render.header(i, now, [], False) for i in documents)
        else:
            identifier = request.query["identifier"]
            body = render.get_record(identifier, now, [], False, documents[identifier])
            answers[identifier] = start + body + render.response_end(verb)
        return start + body + render.response_end(verb)

    async with serving(b"", pages=answer) as url:
        new = build_link(
            name="peer",
            url=url,
            remote_set=SOURCE_SET,
            into=None,
            own_set="WIS-GISC-SINK",
            window_slices=0,
        )
        await link_store.add_link(pair.sink, new)
        link = await link_store.get_link(pair.sink, "peer")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
        assert (report.status, report.error_kind, report.error) == (
            "failed",
            "BadResponse",
            f"{reason(answers.pop('ListRecords'), forms[0])} (from {url}); if one record breaks "
            "the page, `wiscat link set peer --strategy ListIdentifiers` gets the records one by "
            "one and quarantines that one",
        )
        assert await pair.sink.fetchval("select count(*) from records") == 0
        link = await link_store.set_strategy(pair.sink, "peer", "ListIdentifiers")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "ok", report.summary()
    assert (report.counts["added"], report.counts["quarantined"]) == (2, 4)
    rows = await pair.sink.fetch("select identifier, reason, raw from quarantine")
    quarantined = {r["identifier"]: (r["reason"], r["raw"]) for r in rows}
    assert quarantined == {
        i: (f"GetRecord answered {reason(answers[i], form)} (from {url})", answers[i])
        for i, form in broken.items()
    }
    stored = await pair.sink.fetch("select identifier from records")
    assert {r["identifier"] for r in stored} == {r.identifier for r in good}


async def test_p14_neither_a_lone_surrogate_nor_nul_can_be_stored(
    broken: list[str], db: Pool
) -> None:
    """P14: PostgreSQL's text holds neither a lone surrogate nor U+0000, by whatever SQL; so
    the provider has only the other characters XML 1.0 does not allow to deal with."""
    attempts = {
        "select E'\\uD800'": 'invalid Unicode surrogate pair at or near "\'"',
        "select convert_from('\\xeda080'::bytea, 'UTF8')": (
            'invalid byte sequence for encoding "UTF8": 0xed 0xa0 0x80'
        ),
        "select E'a\\x00b'": 'invalid byte sequence for encoding "UTF8": 0x00',
        "select chr(0)": "null character not permitted",
    }
    for query, message in attempts.items():
        # the driver's refusal, or wiscat's UnstorableText for the text PostgreSQL cannot hold
        with pytest.raises((asyncpg.PostgresError, UnstorableText)) as caught:
            await db.fetchval(query)
        assert str(caught.value) == message, query
    with pytest.raises(asyncpg.DataError) as refused:
        await db.execute("update records set xml = $2 where identifier = $1", broken[0], "\ud800")
    assert str(refused.value) == (
        "invalid input for query argument $2: '\\ud800' ('utf-8' codec can't encode character "
        "'\\ud800' in position 0: surrogates not allowed)"
    )
