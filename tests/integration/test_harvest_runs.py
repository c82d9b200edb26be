"""A harvest run against what happens while it runs: its link removed or taken over, its
source changed, a failure mid-list; the mark is written once, after the whole list."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, run
from tests.support.servers import list_records_page, serving
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.errors import (
    BadResumptionToken,
)

if TYPE_CHECKING:
    from wiscat.harvester.context import RunReport
from tests.support.harvest_pair import new_link


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

        await link_store.add_link(pair.sink, new_link(name, url))
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
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    # a full harvest of a GISC takes hours, and said nothing between its first line and its last;
    # a line every WISCAT_PROGRESS_SECONDS (it was 60 s whatever that said)
    from wiscat.harvester.harvest import harvest_link

    every = 1.0
    ctx = replace(
        pair.ctx, settings=pair.ctx.settings.model_copy(update={"progress_seconds": every})
    )
    caplog.set_level(logging.INFO, logger="wiscat.harvester")
    peer = SlowPeer()  # 20 pages, 0.2 s each
    async with serving(b"", pages=peer.page) as url:
        await link_store.add_link(pair.sink, new_link("long", url))
        link = await link_store.get_link(pair.sink, "long")
        assert link is not None
        started = time.monotonic()
        report = await harvest_link(ctx, link, window=False)
        elapsed = time.monotonic() - started
    assert report.status == "ok", report.summary()
    lines = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    # one a second at most, not one a page: on a loaded machine a page may take over a second,
    # so the bound is the run's own length (20 pages take 4 s at least: 2 lines at least)
    assert 2 <= len(lines) <= elapsed / every + 1, (elapsed, lines)
    progress = [
        tuple(int(n) for n in re.findall(r"(\d+) (?:pages|records)", line)) for line in lines
    ]
    assert all(line.startswith(f"harvest long run {report.run_id}: ") for line in lines)
    assert progress == sorted(set(progress)) and progress[-1][0] <= 20
    assert all(records == (pages - 1) * 10 or records == pages * 10 for pages, records in progress)


async def test_no_progress_lines_when_progress_seconds_is_0(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    from wiscat.harvester.harvest import harvest_link

    ctx = replace(pair.ctx, settings=pair.ctx.settings.model_copy(update={"progress_seconds": 0}))
    caplog.set_level(logging.INFO, logger="wiscat.harvester")
    peer = SlowPeer()
    async with serving(b"", pages=peer.page) as url:
        await link_store.add_link(pair.sink, new_link("quiet", url))
        link = await link_store.get_link(pair.sink, "quiet")
        assert link is not None
        report = await harvest_link(ctx, link, window=False)
    assert report.status == "ok", report.summary()
    assert [r.getMessage() for r in caplog.records if "so far" in r.getMessage()] == []


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
        await link_store.add_link(pair.sink, new_link("doomed", url))
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
        await link_store.add_link(pair.sink, new_link("midway", url))
        link = await link_store.get_link(pair.sink, "midway")
        from wiscat.harvester.harvest import harvest_link

        report = await harvest_link(pair.ctx, link, window=False)  # type: ignore[arg-type]
    assert report.status == "failed" and report.error_kind == "badResumptionToken"
    assert report.pages == 1 and report.counts["added"] == 4
    stored = await link_store.get_link(pair.sink, "midway")
    assert stored is not None and stored.high_water_mark is None
    assert "badResumptionToken" in (stored.last_error or "")
    assert await pair.sink.fetchval("select count(*) from records") == 4
