"""Harvest rules for records that cannot be used: the GetRecord strategy, quarantine, and
copies refused as older or dated too far ahead; the rest of the list goes on."""

from __future__ import annotations

import dataclasses
import logging
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, content, run
from tests.support.servers import list_records_page, serving
from wiscat.shared.db import links as link_store
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.dates import format_datestamp
from wiscat.shared.oaipmh.errors import (
    CannotDisseminateFormat,
    IdDoesNotExist,
)

if TYPE_CHECKING:
    from wiscat.harvester.context import RunReport
from tests.support.harvest_pair import new_link


async def test_list_identifiers_and_get_record_strategy(pair: Pair) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(120))
    await factories.delete(pair.source, SOURCE_SET, ids[:3])
    await add_link(pair, strategy="ListIdentifiers")
    report = await run(pair)
    assert report.status == "ok", report.summary()
    assert report.counts["added"] == 117 and report.counts["deleted"] == 3
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


async def test_a_record_that_get_record_refuses_is_quarantined(pair: Pair) -> None:
    """ListIdentifiers names four records; GetRecord answers idDoesNotExist for one (gone since,
    on a repository that keeps no deletions) and cannotDisseminateFormat for another (§3.6: "not
    supported by the item"). Those two are quarantined with the peer's answer, the others stored:
    one record the peer cannot give must not fail the run, and every run after it."""
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="peer")) for n in range(4)]
    refusals = {
        records[1].identifier: IdDoesNotExist(),
        records[2].identifier: CannotDisseminateFormat(),
    }

    async def answer(request: web.Request) -> bytes:
        verb = request.query["verb"]
        if verb == "ListIdentifiers":
            headers = b"".join(render.header(r.identifier, now, [], False) for r in records)
            start = render.response_start(now, "http://peer/oai", dict(request.query), verb)
            return start + headers + render.response_end(verb)
        identifier = request.query["identifier"]
        if identifier in refusals:
            return render.render_error(
                now, "http://peer/oai", dict(request.query), [refusals[identifier]]
            )
        [record] = [r for r in records if r.identifier == identifier]
        start = render.response_start(now, "http://peer/oai", dict(request.query), verb)
        body = render.get_record(record.identifier, now, [], False, record.xml)
        return start + body + render.response_end(verb)

    async with serving(b"", pages=answer) as url:
        await link_store.add_link(
            pair.sink, dataclasses.replace(new_link("by-id", url), strategy="ListIdentifiers")
        )
        link = await link_store.get_link(pair.sink, "by-id")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "ok", report.summary()
    assert report.counts["added"] == 2 and report.counts["quarantined"] == 2
    rows = await pair.sink.fetch("select identifier, reason, raw from quarantine")
    assert {r["identifier"]: (r["reason"], r["raw"]) for r in rows} == {
        identifier: (f"GetRecord answered {error.code}: {' '.join(error.message.split())}", b"")
        for identifier, error in refusals.items()
    }
    stored = await pair.sink.fetch("select identifier from records")
    assert {r["identifier"] for r in stored} == {records[0].identifier, records[3].identifier}


async def test_a_record_that_is_not_well_formed_fails_its_page_and_is_quarantined_alone(
    pair: Pair,
) -> None:
    """A record with a character XML does not allow, or nested deeper than a parser goes, breaks
    the ListRecords page it is on: the run fails, at every run, and says how to get past it.
    By ListIdentifiers + GetRecord only its own answer is unreadable: that record is quarantined
    with the answer as received, the others stored, the list completed. Failing the run would
    fail every run after it (the peer keeps listing it); the list that named it, from the same
    peer, was well-formed."""
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="peer")) for n in range(4)]
    documents = {r.identifier: r.xml.encode() for r in records}
    broken = {
        # a form feed in a title: not a character of XML 1.0
        records[1].identifier: documents[records[1].identifier].replace(
            b"</gco:CharacterString>", b"\x0c</gco:CharacterString>", 1
        ),
        # nested 300 deep: past libxml2's limit of 256 without its huge-tree option
        records[2].identifier: documents[records[2].identifier].replace(
            b"</gmd:MD_Metadata>", b"<gmd:x>" * 300 + b"</gmd:x>" * 300 + b"</gmd:MD_Metadata>"
        ),
    }
    documents.update(broken)
    answers = {}

    async def answer(request: web.Request) -> bytes:
        verb = request.query["verb"]
        start = render.response_start(now, "http://peer/oai", dict(request.query), verb)
        if verb == "ListRecords":
            body = b"".join(render.record(i, now, [], False, x) for i, x in documents.items())
        elif verb == "ListIdentifiers":
            body = b"".join(render.header(i, now, [], False) for i in documents)
        else:
            identifier = request.query["identifier"]
            body = render.get_record(identifier, now, [], False, documents[identifier])
            answers[identifier] = start + body + render.response_end(verb)
        return start + body + render.response_end(verb)

    async with serving(b"", pages=answer) as url:
        await link_store.add_link(pair.sink, new_link("peer", url))
        link = await link_store.get_link(pair.sink, "peer")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
        assert (report.status, report.error_kind) == ("failed", "BadResponse")
        assert (report.error or "").startswith("not well-formed XML: PCDATA invalid Char value 12")
        assert (report.error or "").endswith(
            "if one record breaks the page, `wiscat link set peer --strategy ListIdentifiers` "
            "gets the records one by one and quarantines that one"
        )

        link = await link_store.set_strategy(pair.sink, "peer", "ListIdentifiers")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
        assert report.status == "ok", report.summary()
        assert report.counts["added"] == 2 and report.counts["quarantined"] == 2
        link = await link_store.get_link(pair.sink, "peer")
        assert link is not None and link.high_water_mark is not None  # the list is done
    rows = await pair.sink.fetch("select identifier, reason, raw from quarantine")
    quarantined = {r["identifier"]: (r["reason"], r["raw"]) for r in rows}
    assert {i: raw for i, (_, raw) in quarantined.items()} == {i: answers[i] for i in broken}
    reasons = {i: reason for i, (reason, _) in quarantined.items()}
    assert reasons[records[1].identifier].startswith("GetRecord answered not well-formed XML: ")
    assert "Excessive depth" in reasons[records[2].identifier]
    assert all(reason.endswith(f"(from {url})") for reason in reasons.values())
    stored = await pair.sink.fetch("select identifier from records")
    assert {r["identifier"] for r in stored} == {records[0].identifier, records[3].identifier}


async def test_a_header_that_cannot_be_read_is_quarantined_and_its_list_goes_on(
    pair: Pair,
) -> None:
    """A datestamp that is no date (30 February), in a record or in a deleted header: that item
    is quarantined as received, the rest of the list stored, the high-water mark taken from the
    readable datestamps. The page failed, and so every run after it, by either strategy."""
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC).replace(microsecond=0)
    good, bad, gone = (parse_record(generate_record(n, centre="peer")) for n in range(3))
    await factories.load_records(pair.sink, SOURCE_SET, [2], centre="peer")  # `gone`, stored
    when = now - timedelta(hours=1)
    page = list_records_page(
        [
            render.record(bad.identifier, when, [], False, bad.xml).replace(
                format_datestamp(when).encode(), b"2024-02-30T00:00:00Z"
            ),
            render.record(good.identifier, when, [], False, good.xml),
            render.record(gone.identifier, when, [], True, None).replace(
                format_datestamp(when).encode(), b"yesterday"
            ),
        ]
    )
    async with serving(page) as url:
        await link_store.add_link(pair.sink, new_link("peer", url))
        link = await link_store.get_link(pair.sink, "peer")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "ok", report.summary()
    assert report.counts["added"] == 1 and report.counts["quarantined"] == 2
    assert report.counts["deleted"] == 0  # a deletion that cannot be dated is not applied
    rows = await pair.sink.fetch("select identifier, reason, raw from quarantine order by reason")
    assert [(r["identifier"], r["reason"]) for r in rows] == [
        (bad.identifier, "a header whose datestamp '2024-02-30T00:00:00Z' is no date"),
        (gone.identifier, "a header whose datestamp 'yesterday' is no date"),
    ]
    assert all(r["raw"].startswith(b"<record") for r in rows)
    live = await pair.sink.fetch("select identifier from records where not deleted")
    assert {r["identifier"] for r in live} == {good.identifier, gone.identifier}
    link = await link_store.get_link(pair.sink, "peer")
    assert link is not None and link.high_water_mark == when


async def test_unusable_records_are_quarantined_and_the_rest_stored(pair: Pair) -> None:
    now = datetime.now(UTC)
    good = [parse_record(generate_record(n, centre="qq")) for n in range(3)]
    pieces = [render.record(r.identifier, now, [SOURCE_SET], False, r.xml) for r in good]
    pieces.append(
        render.record(
            "no-file-id",
            now,
            [],
            False,
            "<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'/>",
        )
    )
    pieces.append(
        render.record("wrong-root", now, [], False, "<x:thing xmlns:x='urn:x'>hello</x:thing>")
    )
    pieces.append(render.record("mismatch", now, [], False, good[0].xml))
    report = await harvest_one_page(pair, "bad-records", pieces)
    assert report.counts["added"] == 3 and report.counts["quarantined"] == 3
    rows = await pair.sink.fetch(
        "select identifier, reason, raw, link, page from quarantine order by identifier"
    )
    reasons = {r["identifier"]: r["reason"] for r in rows}
    assert "fileIdentifier" in reasons["no-file-id"]
    assert "MD_Metadata" in reasons["wrong-root"]
    assert "differs from the OAI identifier" in reasons["mismatch"]
    assert all(r["link"] == "bad-records" and r["page"] == 1 for r in rows)
    assert b"hello" in next(r["raw"] for r in rows if r["identifier"] == "wrong-root")


async def test_a_bad_record_sent_again_keeps_one_quarantine_row(pair: Pair) -> None:
    # a peer's bad record comes back at every full and window run: each time it was stored
    # again, raw bytes and all (a peer with 5,000 such records, weekly full runs: 40 MB a week)
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC)
    bad = render.record("wrong-root", now, [], False, "<x:thing xmlns:x='urn:x'>hi</x:thing>")
    empty = "<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'/>"
    pieces = [
        bad,
        bad,  # twice in one page
        render.record("no-file-id", now, [], False, empty),
        render.record("no-file-id", now, [], False, empty.replace("/>", "><x/></gmd:MD_Metadata>")),
    ]
    async with serving(list_records_page(pieces)) as url:
        await link_store.add_link(pair.sink, new_link("again", url))
        link = await link_store.get_link(pair.sink, "again")
        assert link is not None
        first = await harvest_link(pair.ctx, link, full=True, window=False)
        second = await harvest_link(pair.ctx, link, full=True, window=False)
    assert first.status == second.status == "ok", second.summary()
    assert first.counts["quarantined"] == second.counts["quarantined"] == 4  # each one counted
    rows = await pair.sink.fetch("select identifier, run_id from quarantine order by id")
    # one row per bad record (the same identifier with other bytes is another record), each
    # from the latest run
    assert sorted(r["identifier"] for r in rows) == ["no-file-id", "no-file-id", "wrong-root"]
    assert {r["run_id"] for r in rows} == {second.run_id}


async def test_dates_the_schema_allows_beyond_the_protocols_two_forms(pair: Pair) -> None:
    # OAI-PMH.xsd types responseDate and expirationDate as any xs:dateTime, and datestamps as
    # xs:date or an xs:dateTime in UTC, fractions allowed; peers send them (DSpace sent
    # milliseconds). Each such page failed the run ("... is not an OAI-PMH datestamp"), and so
    # every run after it.
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="ms")) for n in range(4)]
    stamps = [
        "2017-11-09T12:50:22.485Z",
        "2017-11-09T12:50:23.9Z",
        "2017-11-10Z",
        "2017-11-10T13:00:00.5Z",
    ]

    async def page(request: web.Request) -> bytes:
        first = "resumptionToken" not in request.query
        pieces = [
            re.sub(
                rb"<datestamp>[^<]*</datestamp>",
                f"<datestamp>{stamps[n]}</datestamp>".encode(),
                render.record(records[n].identifier, now, [SOURCE_SET], False, records[n].xml),
            )
            for n in ((0, 1) if first else (2, 3))
        ]
        token = (
            b'<resumptionToken expirationDate="2030-01-01T10:00:00.25+01:00">t</resumptionToken>'
            if first
            else b""
        )
        body = list_records_page([*pieces, token])
        return re.sub(
            rb"<responseDate>[^<]*</responseDate>",
            b"<responseDate>2017-11-10T14:00:00.123+01:00</responseDate>",
            body,
        )

    async with serving(b"", pages=page) as url:
        await link_store.add_link(pair.sink, new_link("fractions", url))
        link = await link_store.get_link(pair.sink, "fractions")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "ok", report.summary()
    assert report.counts["added"] == 4 and report.pages == 2
    stored = await link_store.get_link(pair.sink, "fractions")
    assert stored is not None  # read to the second: the greatest datestamp, its fraction dropped
    assert stored.high_water_mark == datetime(2017, 11, 10, 13, tzinfo=UTC)


async def test_an_identifier_too_long_to_store_is_quarantined(pair: Pair) -> None:
    # PostgreSQL indexes no entry over 2,704 bytes: one such identifier in a page used to fail
    # the page's one statement, so the link's every run, for good
    """D09: a record the database cannot take is quarantined; the rest is stored."""
    now = datetime.now(UTC)
    good = [parse_record(generate_record(n, centre="long")) for n in range(2)]
    long_id = "urn:x-wmo:md:" + secrets.token_hex(1500)  # random: no compression shrinks it
    long_record = good[0].xml.replace(good[0].identifier, long_id)
    pieces = [render.record(r.identifier, now, [SOURCE_SET], False, r.xml) for r in good[1:]]
    pieces.append(render.record(long_id, now, [SOURCE_SET], False, long_record))
    pieces.append(render.record(long_id + "0", now, [SOURCE_SET], True, None))
    report = await harvest_one_page(pair, "long-ids", pieces)
    assert report.counts["added"] == 1 and report.counts["quarantined"] == 2
    reasons = {
        r["identifier"]: r["reason"]
        for r in await pair.sink.fetch("select identifier, reason from quarantine")
    }
    assert reasons == {
        long_id: "gmd:fileIdentifier is longer than 1024 bytes",
        long_id + "0": "a header whose identifier is longer than 1024 bytes",
    }
    stored = await pair.sink.fetch("select identifier from records")
    assert [r["identifier"] for r in stored] == [good[1].identifier]


async def test_an_identifier_no_oai_answer_can_carry_is_quarantined(pair: Pair) -> None:
    """P01: OAI-PMH.xsd types a header's identifier as an xs:anyURI. A record (or a deletion,
    kept as a tombstone) whose identifier is not one was stored, and every answer of ours that
    listed it then failed the schema. Both are quarantined; the page's good record is stored."""
    now = datetime.now(UTC)
    good, bad = (parse_record(generate_record(n, centre="uri")) for n in range(2))
    no_uri = "urn:x-wmo:md:int.wmo.wis::grid[1]"
    pieces = [
        render.record(good.identifier, now, [SOURCE_SET], False, good.xml),
        render.record(no_uri, now, [SOURCE_SET], False, bad.xml.replace(bad.identifier, no_uri)),
        render.record("urn:x#a#b", now, [SOURCE_SET], True, None),
    ]
    report = await harvest_one_page(pair, "no-uri", pieces)
    assert report.counts["added"] == 1 and report.counts["quarantined"] == 2
    reasons = {
        r["identifier"]: r["reason"]
        for r in await pair.sink.fetch("select identifier, reason from quarantine")
    }
    assert reasons == {
        no_uri: f"gmd:fileIdentifier {no_uri!r} is not a URI, as an OAI-PMH identifier must be "
        "(xs:anyURI): '[' or ']' outside the fragment and a host in brackets",
        "urn:x#a#b": "a header whose identifier 'urn:x#a#b' is not a URI, as an OAI-PMH "
        "identifier must be (xs:anyURI): more than one '#'",
    }
    stored = await pair.sink.fetch("select identifier from records")
    assert [r["identifier"] for r in stored] == [good.identifier]


async def harvest_one_page(pair: Pair, name: str, pieces: list[bytes]) -> RunReport:
    """One full run of a new link ``name`` to a peer serving ``pieces`` as one page; it must
    succeed."""
    from wiscat.harvester.harvest import harvest_link

    async with serving(list_records_page(pieces)) as url:
        await link_store.add_link(pair.sink, new_link(name, url))
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "ok", report.summary()
    return report


async def test_a_record_dated_far_ahead_is_quarantined(pair: Pair) -> None:
    """H14: a peer's record whose gmd:dateStamp says 2102 (for 2012): stored, it would block every
    true copy after it as older, on this node and on every node that harvests it here."""
    from wiscat.shared.generator import identifier_for

    now = datetime.now(UTC)
    good = parse_record(generate_record(0, centre="ahead"))
    typo = generate_record(1, centre="ahead", md_datestamp=datetime(2102, 3, 4, tzinfo=UTC))
    pieces = [
        render.record(good.identifier, now, [], False, good.xml),
        render.record(identifier_for(1, "ahead"), now, [], False, typo),
    ]
    report = await harvest_one_page(pair, "ahead", pieces)
    assert (report.counts["added"], report.counts["quarantined"]) == (1, 1)
    row = await pair.sink.fetchrow("select identifier, reason from quarantine")
    assert row["identifier"] == identifier_for(1, "ahead")
    assert row["reason"].startswith("gmd:dateStamp 2102-03-04T00:00:00Z is in the future")


async def test_a_copy_without_md_datestamp_is_refused_over_a_dated_one(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer's copy with no gmd:dateStamp replaced the dated copy stored: it is not newer."""
    now = datetime.now(UTC)
    dated = parse_record(generate_record(0, centre="undated"))
    undated = re.sub(
        rb"<gmd:dateStamp>.*?</gmd:dateStamp>", b"", generate_record(0, centre="undated", version=1)
    )
    first = [render.record(dated.identifier, now, [], False, dated.xml)]
    assert (await harvest_one_page(pair, "dated", first)).counts["added"] == 1
    second = [render.record(dated.identifier, now, [], False, undated)]
    with caplog.at_level(logging.INFO, logger="wiscat.harvester"):
        report = await harvest_one_page(pair, "undated", second)
    assert (report.counts["refused"], report.counts["updated"]) == (1, 0)
    assert "<gmd:dateStamp>" in await pair.sink.fetchval("select xml from records")
    reason = "no gmd:dateStamp, and the stored copy has one"
    assert f"harvest undated: refused {dated.identifier}: {reason}" in caplog.text


async def test_a_run_of_nothing_but_quarantined_records_says_so(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """A link whose metadataPrefix is not the peer's ISO 19139 format (oai_dc, say): each run
    was 'ok', every record quarantined, with no word on what was wrong with the link."""
    from wiscat.shared.crosswalk import to_oai_dc

    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="dc")) for n in range(3)]
    pieces = [render.record(r.identifier, now, [], False, to_oai_dc(r.xml)) for r in records]
    with caplog.at_level(logging.WARNING, logger="wiscat.harvester"):
        report = await harvest_one_page(pair, "dc", pieces)
    assert (report.counts["quarantined"], report.counts["added"]) == (3, 0)
    assert (
        f"harvest dc: every record of run {report.run_id} was quarantined (3; `wiscat link "
        "quarantine dc` says why); if none is gmd:MD_Metadata, metadataPrefix 'iso19139' is not "
        "the peer's ISO 19139 format: its ListMetadataFormats names them"
    ) in caplog.text
    # one good record in the run, and the link is not in doubt
    caplog.clear()
    good = generate_record(9, centre="dc")
    pieces.append(render.record(parse_record(good).identifier, now, [], False, good))
    with caplog.at_level(logging.WARNING, logger="wiscat.harvester"):
        report = await harvest_one_page(pair, "dc-and-one", pieces)
    assert (report.counts["quarantined"], report.counts["added"]) == (3, 1)
    assert "every record" not in caplog.text
