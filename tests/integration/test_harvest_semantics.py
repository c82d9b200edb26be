"""Harvest rules beyond the happy path: the GetRecord strategy, a new peer resets the high-water
mark, the rolling window, quarantine, and a broken peer that fails only its own run."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import logging
import re
import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

from tests import factories
from tests.forward_proxy import forward_proxy
from tests.harvest_pair import SOURCE_SET, Pair, add_link, content, run
from tests.registry_network import CountingResolver, canary, make_network
from tests.servers import identify_document, list_records_page, serving, serving_app
from wiscat.harvester.client import OAIClient
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.dates import format_datestamp, parse_datestamp
from wiscat.shared.oaipmh.errors import (
    BadArgument,
    BadResumptionToken,
    CannotDisseminateFormat,
    IdDoesNotExist,
)
from wiscat.shared.proxy import Proxy
from wiscat.shared.registry.node import NodeConfig, RegistryNode
from wiscat.shared.registry.safe_fetch import SafeFetcher

if TYPE_CHECKING:
    from wiscat.harvester.context import RunReport


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
            pair.sink, dataclasses.replace(_link("by-id", url), strategy="ListIdentifiers")
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
        await link_store.add_link(pair.sink, _link("peer", url))
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
        await link_store.add_link(pair.sink, _link("peer", url))
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


async def test_an_identify_that_is_not_well_formed_gets_no_hint_about_records(
    pair: Pair,
) -> None:
    """A peer whose Identify is unreadable (here gzip bytes sent without Content-Encoding) fails
    the run; the hint that ListIdentifiers + GetRecord gets past one broken record is for a
    broken list page, and was given for this too."""
    from wiscat.harvester.harvest import harvest_link

    async def identify(request: web.Request) -> web.Response:
        return web.Response(body=gzip.compress(identify_document(request, datetime.now(UTC))))

    app = web.Application()
    app.router.add_get("/oai", identify)
    async with serving_app(app) as root:
        await link_store.add_link(pair.sink, _link("peer", root + "/oai"))
        link = await link_store.get_link(pair.sink, "peer")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert (report.status, report.error_kind) == ("failed", "BadResponse")
    assert (report.error or "").startswith("not well-formed XML"), report.error
    assert (report.error or "").endswith(f"(Identify of {root}/oai)"), report.error


async def test_a_window_from_a_peer_whose_earliest_datestamp_is_year_one(pair: Pair) -> None:
    """A peer may state any earliestDatestamp, 0001-01-01T00:00:00Z included: the window slice
    that starts there is asked for with from=0001-01-01T00:00:00Z (a four-digit year, §3.3.1);
    strftime wrote "1-01-01T00:00:00Z", which the peer refused, failing that slice each time."""
    from wiscat.harvester.harvest import harvest_link

    record = parse_record(generate_record(0, centre="peer"))
    now = datetime.now(UTC)
    asked: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        if request.query.get("verb") == "Identify":
            earliest = datetime(1, 1, 1, tzinfo=UTC)
            return web.Response(body=identify_document(request, earliest), content_type="text/xml")
        asked.append(request.query.get("from"))
        try:
            parse_datestamp(request.query.get("from") or "2000-01-01")
        except BadArgument as exc:
            return web.Response(body=render.render_error(now, "http://peer/oai", None, [exc]))
        piece = render.record(record.identifier, now, [], False, record.xml)
        return web.Response(body=list_records_page([piece]), content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", handler)
    async with serving_app(app) as root:
        spec = dataclasses.replace(_link("year-one", root + "/oai"), window_slices=2)
        await link_store.add_link(pair.sink, spec)
        for _ in range(2):  # a full run, then an incremental one and the window's first slice
            link = await link_store.get_link(pair.sink, "year-one")
            assert link is not None
            report = await harvest_link(pair.ctx, link)
            assert report.status == "ok", report.summary()
    runs = await link_store.recent_runs(pair.sink, "year-one")
    assert [(r["mode"], r["status"]) for r in runs] == [
        ("window", "ok"),
        ("incremental", "ok"),
        ("full", "ok"),
    ]
    assert asked[-1] == "0001-01-01T00:00:00Z"


async def test_changing_the_peer_resets_the_high_water_mark(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(10))
    await add_link(pair)
    assert (await run(pair)).mode == "full"
    assert (await run(pair)).mode == "incremental"
    moved = await link_store.update_source(pair.sink, "test", pair.provider.oai + "?", SOURCE_SET)
    assert moved is not None and moved.high_water_mark is None
    await link_store.update_source(pair.sink, "test", pair.provider.oai, SOURCE_SET)
    again = await run(pair)
    assert again.mode == "full" and again.status == "ok"
    assert again.counts["unchanged"] == 10 and again.counts["added"] == 0


async def test_rolling_window_restores_a_lost_record(pair: Pair) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(30))
    await add_link(pair, window_slices=1)
    assert (await run(pair)).status == "ok"
    # lose a record behind the harvester's back (an update it never saw)
    await pair.sink.execute("delete from records where identifier = $1", ids[7])
    link = await link_store.get_link(pair.sink, "test")
    assert link is not None
    from wiscat.harvester.harvest import harvest_link

    report = await harvest_link(pair.ctx, link)  # incremental, then one window slice
    assert report.mode == "incremental"
    window = await pair.sink.fetchrow(
        "select * from harvest_runs where mode = 'window' order by id desc limit 1"
    )
    assert window is not None and window["status"] == "ok"
    assert window["from_date"] is not None and window["until_date"] is not None
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


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
        await link_store.add_link(pair.sink, _link("again", url))
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
        await link_store.add_link(pair.sink, _link("fractions", url))
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


class SlowPeer:
    """A peer whose list has 20 pages of 10 records, each sent 0.2 s after it is asked for;
    ``third`` is set when the third page is asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.third = asyncio.Event()
        self.now = datetime.now(UTC)

    async def page(self, request: web.Request) -> bytes:
        number = int(request.query.get("resumptionToken", "1"))
        self.asked.append(number)
        if number == 3:
            self.third.set()
        await asyncio.sleep(0.2)
        records = [parse_record(generate_record(n, centre="rm")) for n in range(number * 10)]
        token = f"<resumptionToken>{number + 1}</resumptionToken>" if number < 20 else ""
        return (
            render.response_start(
                self.now, "http://peer/oai", {"verb": "ListRecords"}, "ListRecords"
            )
            + b"".join(
                render.record(r.identifier, self.now, [SOURCE_SET], False, r.xml)
                for r in records[-10:]
            )
            + token.encode()
            + render.response_end("ListRecords")
        )

    async def harvest_until_third_page(
        self, pair: Pair, name: str, url: str
    ) -> asyncio.Task[RunReport]:
        """A full run of a new link ``name`` to this peer at ``url``, started; returns once the
        run has asked for the third page."""
        from wiscat.harvester.harvest import harvest_link

        await link_store.add_link(pair.sink, _link(name, url))
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        running = asyncio.create_task(harvest_link(pair.ctx, link, window=False))
        await self.third.wait()
        return running


async def test_a_link_removed_while_it_runs_stops_its_run(pair: Pair) -> None:
    # its run went on to the end of the list, then failed with an assertion (a traceback)
    peer = SlowPeer()
    async with serving(b"", pages=peer.page) as url:
        running = await peer.harvest_until_third_page(pair, "removed", url)
        assert await link_store.remove_link(pair.sink, "removed")
        report = await asyncio.wait_for(running, 30)
    assert (report.status, report.error_kind) == ("stopped", "LinkRemoved")
    assert report.error == "link removed was removed during the run"
    assert max(peer.asked) < 20  # it stopped there, without the rest of the list
    stored = await pair.sink.fetchval("select count(*) from records")
    assert 0 < stored < 200 and stored % 10 == 0  # the pages written before stay, whole
    assert await pair.sink.fetchval("select count(*) from harvest_runs") == 0


async def test_a_long_list_says_how_far_it_has_got(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a full harvest of a GISC takes hours, and said nothing between its first line and its last
    from wiscat.harvester import harvest
    from wiscat.harvester.harvest import harvest_link

    monkeypatch.setattr(harvest, "PROGRESS_SECONDS", 1.0)
    caplog.set_level(logging.INFO, logger="wiscat.harvester")
    peer = SlowPeer()  # 20 pages, 0.2 s each
    async with serving(b"", pages=peer.page) as url:
        await link_store.add_link(pair.sink, _link("long", url))
        link = await link_store.get_link(pair.sink, "long")
        assert link is not None
        started = time.monotonic()
        report = await harvest_link(pair.ctx, link, window=False)
        elapsed = time.monotonic() - started
    assert report.status == "ok", report.summary()
    lines = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    # one a second at most, not one a page: on a loaded machine a page may take over a second,
    # so the bound is the run's own length (20 pages take 4 s at least: 2 lines at least)
    assert 2 <= len(lines) <= elapsed / harvest.PROGRESS_SECONDS + 1, (elapsed, lines)
    progress = [
        tuple(int(n) for n in re.findall(r"(\d+) (?:pages|records)", line)) for line in lines
    ]
    assert all(line.startswith(f"harvest long run {report.run_id}: ") for line in lines)
    assert progress == sorted(set(progress)) and progress[-1][0] <= 20
    assert all(records == (pages - 1) * 10 or records == pages * 10 for pages, records in progress)


async def test_a_run_whose_link_another_worker_took_over_stops(pair: Pair) -> None:
    # A worker held up for longer than its lease (paused, or cut off from the database) lets
    # another worker lease the link and run it, which closes the first run as abandoned. The
    # first run went on when its worker came back: its pages, and at the end its high-water
    # mark, written while the other run of the same link wrote its own.
    from wiscat.harvester.harvest import harvest_link

    peer = SlowPeer()
    async with serving(b"", pages=peer.page) as url:
        first = await peer.harvest_until_third_page(pair, "taken", url)
        link = await link_store.get_link(pair.sink, "taken")
        assert link is not None
        second = asyncio.create_task(harvest_link(pair.ctx, link, window=False))
        stopped, done = await asyncio.wait_for(asyncio.gather(first, second), 60)
    assert (stopped.status, stopped.error_kind) == ("failed", "RunTakenOver"), stopped.summary()
    assert stopped.error is not None and "another worker took link taken over" in stopped.error
    assert done.status == "ok", done.summary()
    assert peer.asked.count(20) == 1  # the list's end was asked for by the second run alone
    runs = await pair.sink.fetch("select id, status, error_kind from harvest_runs order by id")
    assert [tuple(r) for r in runs] == [
        (stopped.run_id, "failed", "RunTakenOver"),
        (done.run_id, "ok", None),
    ]
    state = await pair.sink.fetchrow(
        "select last_run_id, last_error from links where name = 'taken'"
    )
    assert tuple(state) == (done.run_id, None)  # the stopped run did not mark the link failed
    assert await pair.sink.fetchval("select count(*) from records") == 200


async def test_a_link_removed_while_its_list_is_completed_is_no_deadlock(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    # The list's last transaction (its deletions, then the high-water mark on the link's row)
    # holds its run's row; a removal of the link takes the link's row, then its runs'. Taken in
    # those orders, each waited for the other, and PostgreSQL ended one of them.
    from wiscat.harvester.harvest import harvest_link

    now = datetime.now(UTC)
    record = parse_record(generate_record(1, centre="dl"))
    deleted = False

    async def page(request: web.Request) -> bytes:
        return list_records_page(
            [render.record(record.identifier, now, [SOURCE_SET], deleted, record.xml)]
        )

    async with serving(b"", pages=page) as url:
        await link_store.add_link(pair.sink, _link("doomed", url))
        link = await link_store.get_link(pair.sink, "doomed")
        assert link is not None
        assert (await harvest_link(pair.ctx, link, window=False)).counts["added"] == 1
        deleted = True
        async with pair.sink.acquire() as blocker, blocker.transaction():
            # the deletion the list brings waits for this: its run's row is held by then
            await blocker.execute(
                "select 1 from records where identifier = $1 for update", record.identifier
            )
            running = asyncio.create_task(
                harvest_link(pair.ctx, link, full=True, window=False, allow_mass_delete=True)
            )
            await _until_waiting_for_locks(pair.sink, 1)
            removing = asyncio.create_task(link_store.remove_link(pair.sink, "doomed"))
            await _until_waiting_for_locks(pair.sink, 2)
        report, removed = await asyncio.wait_for(asyncio.gather(running, removing), 30)
    assert removed is True
    assert await pair.sink.fetchval("select count(*) from links") == 0
    # the run ended whole (the removal waited for it), and found its link removed or not yet
    assert (report.status, report.error_kind) in {("ok", None), ("stopped", "LinkRemoved")}
    # not with a deadlock, which the removal's "stopped" would then hide
    assert "deadlock" not in caplog.text.lower()
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


async def _until_waiting_for_locks(db: Pool, waiting: int) -> None:
    """Until ``waiting`` statements of this database wait for a lock."""
    deadline = asyncio.get_running_loop().time() + 10
    query = (
        "select count(*) from pg_stat_activity "
        "where datname = current_database() and wait_event_type = 'Lock'"
    )
    while await db.fetchval(query) < waiting:
        assert asyncio.get_running_loop().time() < deadline, "nothing waited"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("change", ["peer", "prefix"])
async def test_a_source_changed_during_a_run_keeps_its_reset_high_water_mark(
    pair: Pair, change: str
) -> None:
    # the run of the old source, once done, set the high-water mark the change had reset: the
    # next run asked the new peer only for what came after the old peer's last datestamp
    peer = SlowPeer()
    async with serving(b"", pages=peer.page) as url:
        running = await peer.harvest_until_third_page(pair, "moved", url)
        if change == "peer":
            await link_store.update_source(pair.sink, "moved", pair.provider.oai, SOURCE_SET)
        else:
            await link_store.update_source(pair.sink, "moved", url, SOURCE_SET, "iso19139.wmo")
        report = await asyncio.wait_for(running, 30)
    assert report.status == "ok" and report.high_water_mark is None
    moved = await link_store.get_link(pair.sink, "moved")
    assert moved is not None
    assert (moved.base_url, moved.metadata_prefix) == (
        (pair.provider.oai, "iso19139") if change == "peer" else (url, "iso19139.wmo")
    )
    assert (moved.high_water_mark, moved.last_full_at) == (None, None)


async def test_a_registry_link_reaches_only_global_addresses(pair: Pair) -> None:
    # its URL was chosen by whoever registered it: it must not reach into the node's network
    """S10: a harvest never connects to a registry link's non-global address."""
    from wiscat.harvester.harvest import harvest_link

    good = parse_record(generate_record(1, centre="reg"))
    page = list_records_page(
        [render.record(good.identifier, datetime.now(UTC), [], False, good.xml)]
    )
    asked: list[str] = []

    async def pages(request: web.Request) -> bytes:
        asked.append(request.query.get("verb", ""))
        return page

    async with serving(page, pages=pages) as url:  # on 127.0.0.1
        await link_store.add_link(pair.sink, _link("registry-0123abcd", url))
        link = await link_store.get_link(pair.sink, "registry-0123abcd")
        assert link is not None
        refused = await harvest_link(pair.ctx, link, window=False)
        assert (refused.status, refused.error_kind) == ("failed", "PeerUnreachable")
        assert "127.0.0.1 is not a global address" in (refused.error or "")
        assert asked == []  # not even connected to, and not retried
        # nor through the node's proxy, which would connect past the address check
        async with forward_proxy() as proxy:
            client = pair.ctx.client
            proxied = OAIClient(
                client.http, dataclasses.replace(client.settings, proxy=Proxy(proxy.url))
            )
            refused = await harvest_link(dataclasses.replace(pair.ctx, client=proxied), link)
        assert "127.0.0.1 is not a global address" in (refused.error or "")
        assert (asked, proxy.asked) == ([], [])
        # a closed network allows it
        settings = pair.ctx.settings.model_copy(update={"allow_private_fetch": True})
        allowed = await harvest_link(dataclasses.replace(pair.ctx, settings=settings), link)
        assert allowed.status == "ok" and allowed.counts["added"] == 1


async def test_s10_a_registered_name_re_pointed_to_loopback_is_never_connected(
    pair: Pair, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """S10: a URL the registry accepted while its name pointed at an allowed address (here
    127.0.0.2 stands in for a public one) is re-pointed to 127.0.0.1 by its name server; the
    harvest of its registry link refuses the connection at its socket (the canary listening
    there sees none), fails as PeerUnreachable saying why, and raises what the suggested
    alerts read: a warning, a failed run and a PeerUnreachable error in the metrics."""
    from wiscat.harvester.harvest import harvest_link

    async def identify(request: web.Request) -> web.Response:
        body = identify_document(request, datetime(2020, 1, 1, tzinfo=UTC))
        return web.Response(body=body, content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", identify)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.2", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://repo.test:{port}/oai"
    resolver = CountingResolver({"repo.test": "127.0.0.2"})
    net = make_network(tmp_path, 1)
    config = NodeConfig("http://127.0.0.1:9", "http://127.0.0.1:9/oai", "WIS-GISC-TEST")
    try:
        async with SafeFetcher(
            address_policy=lambda address: address == "127.0.0.2",
            ports=(port,),
            resolver=resolver,
        ) as fetcher:
            await RegistryNode(pair.source, net.network, net.keys[0], fetcher, config).validate(url)
    finally:
        await runner.cleanup()

    resolver.names["repo.test"] = "127.0.0.1"  # the name is re-pointed after registration
    caplog.set_level(logging.INFO)
    name = "registry-5e1ec7ed"
    async with canary(port) as listening:
        await link_store.add_link(pair.sink, _link(name, url))
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        settings = pair.ctx.client.settings
        async with OAIClient.session(settings, resolver) as http:
            ctx = dataclasses.replace(pair.ctx, client=OAIClient(http, settings))
            report = await harvest_link(ctx, link, window=False)
        assert listening.connections == 0
    assert resolver.queries.count("repo.test") >= 2
    assert (report.status, report.error_kind) == ("failed", "PeerUnreachable")
    assert (
        "127.0.0.1 is not a global address, and this link came from the registry "
        "(WISCAT_ALLOW_PRIVATE_FETCH allows it)"
    ) in (report.error or "")
    sample = pair.ctx.metrics.registry.get_sample_value
    runs = {"link": name, "mode": report.mode, "status": "failed"}
    assert sample("wiscat_harvest_runs_total", runs) == 1
    assert sample("wiscat_harvest_errors_total", {"link": name, "kind": "PeerUnreachable"}) == 1
    assert any(
        r.levelno == logging.WARNING and name in r.getMessage() and "127.0.0.1" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


async def harvest_one_page(pair: Pair, name: str, pieces: list[bytes]) -> RunReport:
    """One full run of a new link ``name`` to a peer serving ``pieces`` as one page; it must
    succeed."""
    from wiscat.harvester.harvest import harvest_link

    async with serving(list_records_page(pieces)) as url:
        await link_store.add_link(pair.sink, _link(name, url))
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "ok", report.summary()
    return report


def _link(name: str, url: str) -> link_store.NewLink:
    from wiscat.shared.linkspec import REGISTRY_LINK_PREFIX, build_link

    return build_link(
        name=name,
        url=url,
        remote_set=SOURCE_SET,
        into=None,
        own_set="WIS-GISC-SINK",
        window_slices=0,
        by_registry=name.startswith(REGISTRY_LINK_PREFIX),
    )


async def test_a_broken_peer_fails_its_own_run_with_a_stored_reason(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, name="healthy")
    html = b"<!DOCTYPE html><html><body><h1>Service temporarily down</h1></body></html>"
    async with serving(html, content_type="text/html") as url:
        await link_store.add_link(pair.sink, _link("broken", url))
        broken = await link_store.get_link(pair.sink, "broken")
        from wiscat.harvester.harvest import harvest_link

        failed = await harvest_link(pair.ctx, broken, window=False)  # type: ignore[arg-type]
    assert failed.status == "failed" and failed.error_kind == "BadResponse"
    assert "HTML" in (failed.error or "")
    stored = await link_store.get_link(pair.sink, "broken")
    assert stored is not None and "HTML" in (stored.last_error or "")
    assert stored.high_water_mark is None
    healthy = await run(pair, "healthy")
    assert healthy.status == "ok" and healthy.counts["added"] == 5


async def test_credentials_in_a_peer_url_are_never_stored(pair: Pair) -> None:
    from wiscat.harvester.harvest import harvest_link
    from wiscat.shared.linkspec import build_link

    await link_store.add_link(
        pair.sink,
        build_link(
            name="secret",
            url="http://user:s3cret@127.0.0.1:9/oai",
            remote_set=SOURCE_SET,
            into=None,
            own_set="WIS-GISC-SINK",
            window_slices=0,
        ),
    )
    link = await link_store.get_link(pair.sink, "secret")
    assert link is not None
    report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "failed"
    stored = await link_store.get_link(pair.sink, "secret")
    runs = await link_store.recent_runs(pair.sink, "secret")
    assert stored is not None and "127.0.0.1:9" in (stored.last_error or "")
    assert "s3cret" not in (stored.last_error or "") and "s3cret" not in str(runs)


async def test_incremental_asks_from_the_high_water_mark_minus_overlap(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, overlap=timedelta(hours=1))
    await run(pair)
    link = await link_store.get_link(pair.sink, "test")
    assert link is not None and link.high_water_mark is not None
    second = await run(pair)
    assert second.mode == "incremental"
    assert second.from_ == link.high_water_mark - timedelta(hours=1)
    stored = await pair.sink.fetchval(
        "select from_date from harvest_runs where id = $1", second.run_id
    )
    assert stored == second.from_


async def test_full_reharvest_when_its_interval_has_passed(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, full_every=timedelta(days=7))
    assert (await run(pair)).mode == "full"
    assert (await run(pair)).mode == "incremental"
    await pair.sink.execute("update links set last_full_at = now() - interval '8 days'")
    full = await run(pair)
    assert full.mode == "full" and full.from_ is None and full.counts["unchanged"] == 5


async def test_an_area_link_changes_the_own_set(pair: Pair) -> None:
    own = pair.ctx.settings.own_set
    await factories.load_records(pair.sink, own, [3], centre="xx")  # the sink's own copy
    await factories.load_records(pair.source, SOURCE_SET, range(5), version=1)
    await add_link(pair, into=own)  # a DCPC of the sink's area, into the own set
    report = await run(pair)
    assert report.status == "ok" and report.counts["updated"] == 1 and report.counts["added"] == 4
    assert report.counts["refused"] == 0
    assert (
        await pair.sink.fetchval(
            "select count(*) from set_members where set_spec = $1 and not deleted", own
        )
        == 5
    )


async def test_a_peer_s_long_error_message_is_stored_cut(pair: Pair) -> None:
    # the reason is the peer's text: stored with the run and the link, shown on the dashboard
    now = datetime.now(UTC)
    answer = render.render_error(now, "http://peer/oai", None, [BadArgument("x" * 100_000)])
    async with serving(answer) as url:
        await link_store.add_link(pair.sink, _link("verbose", url))
        link = await link_store.get_link(pair.sink, "verbose")
        assert link is not None
        from wiscat.harvester.harvest import harvest_link

        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "failed" and report.error_kind == "badArgument"
    stored = await link_store.get_link(pair.sink, "verbose")
    assert stored is not None and stored.last_error is not None
    run_error = await pair.sink.fetchval("select error from harvest_runs")
    assert stored.last_error == run_error == "peer answered badArgument: " + "x" * 970 + "..."


# D04: triggers on the sink note every write of a record, of a run's page count and of a link's
# high-water mark, with the transaction that made it, in the order made
_WRITES_AUDIT = """
create table d04_writes (
    seq bigserial primary key, txid bigint not null default txid_current(),
    what text not null, identifier text, deleted boolean
);
create function d04_record() returns trigger language plpgsql as $$
begin
    insert into d04_writes (what, identifier, deleted) values ('record', new.identifier,
        new.deleted);
    return new;
end $$;
create function d04_page() returns trigger language plpgsql as $$
begin
    if new.pages is distinct from old.pages then
        insert into d04_writes (what) values ('page');
    end if;
    return new;
end $$;
create function d04_mark() returns trigger language plpgsql as $$
begin
    if new.high_water_mark is distinct from old.high_water_mark then
        insert into d04_writes (what) values ('mark');
    end if;
    return new;
end $$;
create trigger d04_record after insert or update on records
    for each row execute function d04_record();
create trigger d04_page after update on harvest_runs
    for each row execute function d04_page();
create trigger d04_mark after update on links
    for each row execute function d04_mark();
"""


async def test_d04_the_mark_is_written_once_after_every_page_with_the_deletions(
    pair: Pair,
) -> None:
    """D04, as the Rule says (docs/harvesting.md): each page's records are committed in one
    transaction with the run's page count; the high-water mark is written once, in a later
    transaction of its own that holds the list's deletions and no other record."""
    ids = await factories.load_records(pair.source, SOURCE_SET, range(60))
    await add_link(pair)
    assert (await run(pair)).status == "ok"
    # the changes come a second after the first run's responseDate at least: the second run's
    # mark is then later than the first's, and its write shows (a mark capped at a responseDate
    # of the same second as the first run's would be the same value, and write nothing new)
    await asyncio.sleep(1.1)
    added = await factories.load_records(pair.source, SOURCE_SET, range(60, 200))
    await factories.load_records(pair.source, SOURCE_SET, range(10), version=1)
    await factories.delete(pair.source, SOURCE_SET, ids[50:55])
    await pair.sink.execute(_WRITES_AUDIT)

    report = await run(pair)
    assert (report.mode, report.status) == ("incremental", "ok") and report.pages >= 2
    assert (report.counts["added"], report.counts["updated"], report.counts["deleted"]) == (
        140,
        10,
        5,
    )
    rows = await pair.sink.fetch("select * from d04_writes order by seq")
    by_tx: dict[int, list[tuple[str, str | None, bool | None]]] = {}
    for row in rows:
        by_tx.setdefault(row["txid"], []).append((row["what"], row["identifier"], row["deleted"]))
    marks = [txid for txid, writes in by_tx.items() if ("mark", None, None) in writes]
    assert len(marks) == 1 and [r["what"] for r in rows].count("mark") == 1
    mark_tx = marks[0]
    assert list(by_tx)[-1] == mark_tx  # the last transaction to write anything
    last = by_tx.pop(mark_tx)
    assert sorted(w for w in last if w[0] == "record") == sorted(
        ("record", identifier, True) for identifier in ids[50:55]
    )
    assert [w[0] for w in last if w[0] != "record"] == ["mark"]
    # the pages: each a transaction of its own with its records and the page count
    pages = list(by_tx.values())
    assert len(pages) == report.pages
    assert all([w[0] for w in page].count("page") == 1 for page in pages)
    stored = [w[1] for page in pages for w in page if w[0] == "record"]
    assert sorted(stored) == sorted(ids[:10] + added)
    assert all(w[2] is False for page in pages for w in page if w[0] == "record")


async def test_failure_mid_list_keeps_committed_pages_and_the_old_mark(pair: Pair) -> None:
    now = datetime.now(UTC)
    good = [parse_record(generate_record(n, centre="mid")) for n in range(4)]
    first_page = (
        render.response_start(now, "http://peer/oai", {"verb": "ListRecords"}, "ListRecords")
        + b"".join(render.record(r.identifier, now, [], False, r.xml) for r in good)
        + render.resumption_token("page-2", cursor=0, complete_list_size=8, expiration=None)
        + render.response_end("ListRecords")
    )
    expired = render.render_error(now, "http://peer/oai", None, [BadResumptionToken("expired")])

    async def pages(request: web.Request) -> bytes:
        return expired if request.query.get("resumptionToken") else first_page

    async with serving(first_page, pages=pages) as url:
        await link_store.add_link(pair.sink, _link("midway", url))
        link = await link_store.get_link(pair.sink, "midway")
        from wiscat.harvester.harvest import harvest_link

        report = await harvest_link(pair.ctx, link, window=False)  # type: ignore[arg-type]
    assert report.status == "failed" and report.error_kind == "badResumptionToken"
    assert report.pages == 1 and report.counts["added"] == 4
    stored = await link_store.get_link(pair.sink, "midway")
    assert stored is not None and stored.high_water_mark is None
    assert "badResumptionToken" in (stored.last_error or "")
    assert await pair.sink.fetchval("select count(*) from records") == 4


@pytest.mark.parametrize("into", [None, "shared01"])
async def test_two_peers_that_disagree_on_a_record_do_not_churn_it(
    pair: Pair, caplog: pytest.LogCaptureFixture, into: str | None
) -> None:
    """Two GISCs list one identifier in their own sets with the same gmd:dateStamp and other
    content (one edited it without a new dateStamp). Each full or window run of either link
    replaced the other's copy with a new datestamp, which every harvester downstream then took
    again. Now the first copy stays, the other link's run refuses it and says why; also where
    both links file it under one set (two GISCs serving a shared set)."""
    from wiscat.harvester.harvest import harvest_link
    from wiscat.shared.linkspec import build_link

    record = generate_record(5, centre="dup")
    edited = record.replace(b"</gmd:MD_Metadata>", b"<gmd:series/></gmd:MD_Metadata>")
    identifier = parse_record(record).identifier

    def page(xml: bytes) -> bytes:
        return list_records_page([render.record(identifier, datetime.now(UTC), [], False, xml)])

    async def runs(name: str, url: str, remote_set: str) -> RunReport:
        await link_store.add_link(
            pair.sink,
            build_link(
                name=name, url=url, remote_set=remote_set, into=into,
                own_set="WIS-GISC-SINK", window_slices=0,
            ),
        )  # fmt: skip
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        return await harvest_link(pair.ctx, link, full=True, window=False)

    async with serving(page(record)) as a_url, serving(page(edited)) as b_url:
        a = await runs("a", a_url, "WIS-GISC-A")
        first = await pair.sink.fetchrow("select datestamp, xml from records")
        with caplog.at_level(logging.WARNING, logger="wiscat.harvester"):
            b = await runs("b", b_url, "WIS-GISC-B")
        link_a = await link_store.get_link(pair.sink, "a")
        assert link_a is not None
        again = await harvest_link(pair.ctx, link_a, full=True, window=False)
    assert (a.counts["added"], b.counts["refused"], again.counts["unchanged"]) == (1, 1, 1)
    assert b.counts["updated"] == 0 and again.counts["updated"] == 0
    assert await pair.sink.fetchrow("select datestamp, xml from records") == first
    assert "<gmd:series/>" not in first["xml"]
    assert f"harvest b: refused {identifier}: the copy stored from another link" in caplog.text
    run_b = await pair.sink.fetchrow("select refused, updated from harvest_runs where link = 'b'")
    assert dict(run_b) == {"refused": 1, "updated": 0}


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
