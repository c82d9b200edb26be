"""Harvests against peers whose dates mislead: no records match on a full run, a run aborted
midway, a skewed clock, a header dated years ahead, a peer that takes only days."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.faulty_peers import add_link, high_water_mark, relaying, run
from tests.support.harvest_pair import SOURCE_SET, Pair, content
from tests.support.servers import serving
from wiscat.harvester.harvest import harvest_link
from wiscat.shared.db import links as link_store
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.dates import format_datestamp, parse_datestamp
from wiscat.shared.oaipmh.errors import BadArgument, NoRecordsMatch


async def test_h19_a_full_run_answered_no_records_match_deletes_nothing(pair: Pair) -> None:
    """H19: a full run whose peer answers noRecordsMatch (an empty set) deletes nothing: a
    record is deleted only by a deleted header (docs/harvesting.md), never for being
    absent from a list. The run is ok, as the list is; the high-water mark is kept."""
    await factories.load_records(pair.source, SOURCE_SET, range(150))
    async with relaying(pair.provider.oai) as relay:
        await add_link(pair.ctx, "emptied", relay.url)
        first = await run(pair.ctx, "emptied")
        assert first.status == "ok", first.error
        held = await content(pair.sink, "WIS-GISC-EMPTIED")
        nothing = render.render_error(datetime.now(UTC), relay.url, None, [NoRecordsMatch()])

        async def empty(request: web.Request) -> web.Response | None:
            if request.query.get("verb") == "Identify":
                return None
            return web.Response(body=nothing, content_type="text/xml")

        relay.answer = empty
        link = await link_store.get_link(pair.sink, "emptied")
        assert link is not None
        report = await harvest_link(pair.ctx, link, full=True, window=False)
    assert (report.mode, report.status, report.counts["deleted"]) == ("full", "ok", 0)
    assert relay.asked[-1].get("verb") == "ListRecords" and "from" not in relay.asked[-1]
    assert await content(pair.sink, "WIS-GISC-EMPTIED") == held
    assert len(held) == 150 and not any(deleted for _, deleted in held.values())
    assert await high_water_mark(pair.ctx, "emptied") == first.high_water_mark


async def test_h19_a_full_run_aborted_midway_deletes_nothing(pair: Pair) -> None:
    """H19: a full run that has read deleted headers (3 deletions at the provider) and then
    fails on its last page applies none of them: deletions wait for the whole list. The run
    is failed (incomplete), the high-water mark kept; the next run applies them."""
    ids = await factories.load_records(pair.source, SOURCE_SET, range(150))
    async with relaying(pair.provider.oai) as relay:
        await add_link(pair.ctx, "aborted", relay.url)
        first = await run(pair.ctx, "aborted")
        assert first.status == "ok", first.error
        await factories.delete(pair.source, SOURCE_SET, ids[:3])
        await factories.load_records(pair.source, SOURCE_SET, range(150, 270))
        pages = 0
        deleted_headers: list[int] = []

        async def abort_on_page_3(request: web.Request) -> web.Response | None:
            nonlocal pages
            if request.query.get("verb") == "Identify":
                return None
            pages += 1
            if pages < 3:
                body = await relay.forward(request)
                deleted_headers.append(body.count(b'status="deleted"'))
                return web.Response(body=body, content_type="text/xml")
            return web.Response(body=b"<html>maintenance</html>", content_type="text/html")

        relay.answer = abort_on_page_3
        link = await link_store.get_link(pair.sink, "aborted")
        assert link is not None
        report = await harvest_link(pair.ctx, link, full=True, window=False)
        assert (report.mode, report.status, report.error_kind) == ("full", "failed", "BadResponse")
        assert (report.pages, report.counts["deleted"]) == (2, 0)
        assert sum(deleted_headers) == 3  # read, and not applied
        held = await content(pair.sink, "WIS-GISC-ABORTED")
        assert [held[i][1] for i in ids[:3]] == [False, False, False]
        assert await high_water_mark(pair.ctx, "aborted") == first.high_water_mark

        relay.answer = None
        again = await harvest_link(pair.ctx, link, full=True, window=False)
    assert again.status == "ok" and again.counts["deleted"] == 3
    assert await content(pair.sink, "WIS-GISC-ABORTED") == await content(pair.source, SOURCE_SET)


@dataclasses.dataclass
class ClockPeer:
    """A one-page ListRecords peer whose clock is ``skew`` off the harvester's: its
    responseDate and the datestamps it gives are its own time; ``from`` is honoured."""

    skew: timedelta
    days_only: bool = False  # from and until in seconds are a badArgument (H15)
    records: dict[str, tuple[datetime, bytes]] = dataclasses.field(default_factory=dict)
    asked: list[dict[str, str]] = dataclasses.field(default_factory=list)

    def now(self) -> datetime:
        return (datetime.now(UTC) + self.skew).replace(microsecond=0)

    def put(self, n: int, version: int = 0, at: datetime | None = None) -> str:
        """Write record ``n`` at ``version``, stamped ``at`` (by default, the peer's now)."""
        document = generate_record(n, centre="clock", version=version)
        identifier = parse_record(document).identifier
        self.records[identifier] = (at or self.now(), document)
        return identifier

    async def answer(self, request: web.Request) -> bytes:
        query = dict(request.query)
        self.asked.append(query)
        if self.days_only and "T" in query.get("from", ""):
            refused = BadArgument("from: days only")
            return render.render_error(self.now(), "http://peer/oai", query, [refused])
        since = parse_datestamp(query["from"])[0] if "from" in query else None
        listed = sorted(
            (stamp, identifier, document)
            for identifier, (stamp, document) in self.records.items()
            if since is None or stamp >= since
        )
        now = self.now()
        if not listed:
            return render.render_error(now, "http://peer/oai", query, [NoRecordsMatch()])
        return (
            render.response_start(now, "http://peer/oai", query, "ListRecords")
            + b"".join(render.record(i, stamp, [], False, d) for stamp, i, d in listed)
            + render.response_end("ListRecords")
        )


@pytest.mark.parametrize("hours", [-3, 3])
async def test_h16_a_provider_with_a_skewed_clock_misses_nothing(pair: Pair, hours: int) -> None:
    """H16: the peer's clock is 3 h behind, or ahead of, the harvester's. The high-water mark
    is the peer's own time (its greatest datestamp, not past its responseDate), the next
    incremental run asks from it, and gets every record the peer wrote since: none missed,
    where a mark from the harvester's clock would skip 3 h of them (or ask 3 h ahead)."""
    peer = ClockPeer(timedelta(hours=hours))
    first = [peer.put(n) for n in range(3)]
    async with serving(b"", pages=peer.answer) as url:
        await add_link(pair.ctx, "skewed", url)
        one = await run(pair.ctx, "skewed")
        assert (one.status, one.counts["added"]) == ("ok", 3), one.error
        assert one.high_water_mark == max(stamp for stamp, _ in peer.records.values())
        later = [peer.put(n) for n in range(3, 6)]
        two = await run(pair.ctx, "skewed")
    assert two.status == "ok", two.error
    assert two.mode == "incremental"
    assert peer.asked[-1]["from"] == format_datestamp(one.high_water_mark)
    assert two.counts["added"] == 3
    held = await content(pair.sink, "WIS-GISC-SKEWED")
    assert sorted(held) == sorted(first + later)
    assert two.high_water_mark == max(stamp for stamp, _ in peer.records.values())


async def test_h14_a_header_datestamp_years_ahead_does_not_move_the_mark_past_the_answer(
    pair: Pair,
) -> None:
    """H14: a record listed with a header datestamp 10 years ahead. Rule: it is stored (the
    datestamp a harvester keeps is its own time of arrival, docs/harvesting.md: nothing to
    clamp) and the high-water mark is cut to the page's responseDate (docs/design.md), so the
    next run still asks from today: the record, updated at a normal datestamp, is taken."""
    peer = ClockPeer(timedelta(0))
    normal = peer.put(0)
    ahead = peer.put(1, at=peer.now() + timedelta(days=3653))
    async with serving(b"", pages=peer.answer) as url:
        await add_link(pair.ctx, "ahead", url)
        started = datetime.now(UTC).replace(microsecond=0)
        one = await run(pair.ctx, "ahead")
        assert (one.status, one.counts["added"]) == ("ok", 2), one.error
        assert one.high_water_mark is not None
        assert started <= one.high_water_mark <= datetime.now(UTC)
        stamps = dict(
            await pair.sink.fetch(
                "select identifier, datestamp from records where identifier = any($1)",
                [normal, ahead],
            )
        )
        assert all(stamp <= datetime.now(UTC) for stamp in stamps.values())
        peer.put(1, version=1)
        two = await run(pair.ctx, "ahead")
    assert two.status == "ok", two.error
    assert peer.asked[-1]["from"] == format_datestamp(one.high_water_mark)
    assert two.counts["updated"] == 1
    stored = await pair.sink.fetchval("select xml from records where identifier = $1", ahead)
    assert stored is not None
    assert (
        parse_record(stored.encode()).md_datestamp
        == parse_record(generate_record(1, centre="clock", version=1)).md_datestamp
    )
    assert two.high_water_mark is not None and two.high_water_mark <= datetime.now(UTC)


async def test_h15_an_incremental_run_falls_back_to_days(pair: Pair) -> None:
    """H15: a peer whose Identify says seconds refuses an incremental run's from in seconds
    (badArgument); the run asks again in days, from the mark's day, and completes."""
    peer = ClockPeer(timedelta(0), days_only=True)
    first = [peer.put(n) for n in range(3)]
    async with serving(b"", pages=peer.answer) as url:
        await add_link(pair.ctx, "days", url)
        one = await run(pair.ctx, "days")
        assert one.status == "ok", one.error
        assert one.high_water_mark is not None
        later = [peer.put(n) for n in range(3, 5)]
        two = await run(pair.ctx, "days")
    assert (two.status, two.mode) == ("ok", "incremental"), two.error
    assert [q["from"] for q in peer.asked[1:]] == [
        format_datestamp(one.high_water_mark),
        one.high_water_mark.strftime("%Y-%m-%d"),
    ]
    assert two.counts["added"] == 2
    assert sorted(await content(pair.sink, "WIS-GISC-DAYS")) == sorted(first + later)
