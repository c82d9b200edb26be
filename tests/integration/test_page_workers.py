"""Harvested pages read in worker processes: the same rows as reading in a thread; a worker
killed between pages is replaced; a page that kills its reader fails, and only it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, content, run, sink_settings
from tests.support.pg import clone_template, drop_database
from tests.support.servers import list_records_page, records_of
from wiscat.harvester.errors import BadResponse
from wiscat.harvester.page_content import Page, PageContent, read_copy
from wiscat.harvester.page_workers import PageReaders, _read_here
from wiscat.harvester.pager import Pager
from wiscat.harvester.service import harvest_context
from wiscat.shared.generator import identifier_for
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.pages import PageReader, PageSummary

PROJECT = Path(__file__).resolve().parents[2]

# what a harvest stores of a record, to the byte
STORED = (
    "select identifier, md_datestamp, content_hash, xml, set_specs, deleted "
    "from records order by identifier"
)


async def test_workers_store_exactly_what_a_thread_stores(pair: Pair, template_ready: str) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(300))
    await factories.delete(pair.source, SOURCE_SET, ids[7:8])
    assert pair.ctx.pages.workers > 0
    await pair.ctx.pages.warm()
    await add_link(pair)
    report = await run(pair)
    assert report.status == "ok" and report.counts["added"] == 299, report.summary()
    # the provider's pages (100 records, about 0.9 MB) went to the worker processes
    assert pair.ctx.pages.worker_pids()
    assert all(pid != os.getpid() for pid in pair.ctx.pages.worker_pids())

    threaded_url = await clone_template(template_ready)
    try:
        settings = sink_settings(threaded_url, harvest_page_workers=0)
        async with harvest_context(settings, threaded_url) as ctx:
            threaded_pair = Pair(pair.source, pair.provider, ctx.pool, ctx)
            await add_link(threaded_pair)
            threaded = await run(threaded_pair)
            assert threaded.status == "ok" and threaded.counts["added"] == 299
            assert ctx.pages.worker_pids() == []
            by_thread = [tuple(r) for r in await ctx.pool.fetch(STORED)]
    finally:
        await drop_database(template_ready, threaded_url)
    by_workers = [tuple(r) for r in await pair.sink.fetch(STORED)]
    assert len(by_workers) == 300 and by_workers == by_thread


async def test_workers_killed_between_pages_are_replaced(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(300))
    await add_link(pair)
    await pair.ctx.pages.warm()
    assert (await run(pair)).status == "ok"
    workers = pair.ctx.pages.worker_pids()
    assert workers

    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    await factories.load_records(pair.source, SOURCE_SET, range(300, 310))
    again = await run(pair, full=True)
    assert again.status == "ok", again.summary()
    assert again.counts["added"] == 10 and again.counts["unchanged"] == 300
    assert set(pair.ctx.pages.worker_pids()).isdisjoint(workers)  # fresh workers
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


def dies_on_poison(url: str, body: bytes) -> tuple[PageContent, PageSummary, int]:
    """A worker's reader that dies, as a process, on a page that names "poison"."""
    if b"poison" in body:
        os._exit(3)
    return read_copy(url, body)


def page_of(numbers: range, *, poison: bool = False) -> Page:
    body = list_records_page(records_of(numbers, SOURCE_SET))
    if poison:
        body += b"<!-- poison -->"
    return Page("http://peer/oai", len(body), PageReader(body))


async def test_a_page_that_kills_its_reader_fails_and_the_next_page_is_read() -> None:
    readers = PageReaders(1, min_bytes=0, reader=dies_on_poison)
    try:
        await readers.warm()
        with pytest.raises(BadResponse, match="died, twice"):
            await readers.read(page_of(range(3), poison=True))
        good = page_of(range(5))
        content = await readers.read(good)  # in a thread, while fresh workers start
        assert len(content.sorter.batch) == 5 and not content.sorter.quarantined
        assert good.consumed and good.reader.items_seen == 5
        await readers.warm()
        assert readers.worker_pids() and readers.workers == 1
        after = page_of(range(5, 9))
        assert len((await readers.read(after)).sorter.batch) == 4
    finally:
        readers.close()


def held_while_marked(url: str, body: bytes) -> tuple[PageContent, PageSummary, int]:
    """A worker's reader that waits, before reading, while the file a page's comment names
    (``<!-- hold:PATH -->``) exists."""
    hold = body[body.index(b"<!-- hold:") + 10 : body.index(b" -->")].decode()
    while os.path.exists(hold):
        time.sleep(0.01)
    return read_copy(url, body)


async def test_a_page_a_worker_reads_is_not_held_by_the_harvest_process(tmp_path: Path) -> None:
    """L04: a harvest holds several pages at once while its workers read them (one per worker
    and one more fetched), each megabytes: their bodies are in the spool, and the harvest
    process lets go of its own copies, so that it holds none of them twice."""
    hold = tmp_path / "hold"
    hold.touch()
    pieces = records_of(range(200), SOURCE_SET)
    token = render.resumption_token("next", cursor=0, complete_list_size=400, expiration=None)
    last = render.resumption_token(None, cursor=200, complete_list_size=400, expiration=None)
    size = len(list_records_page(pieces))

    async def fetch(base_url: str, query: dict[str, str]) -> bytes:
        # a new body each time, as the client's, held by nothing else
        end = last if "resumptionToken" in query else token
        return list_records_page([*pieces, end]) + f"<!-- hold:{hold} -->".encode()

    readers = PageReaders(1, min_bytes=0, reader=held_while_marked)
    await readers.warm()
    spool = readers.spool
    assert spool is not None
    pager = Pager(
        fetch,
        "http://peer/oai",
        "ListRecords",
        readers.read,
        metadata_prefix="iso19139",
        set_spec=None,
        from_=None,
        until=None,
        day_granularity=False,
        ahead=readers.ahead,
        max_requests=10,
        max_empty_pages=3,
    )
    tracemalloc.start()
    try:
        pages = pager.pages()
        first = asyncio.create_task(anext(pages))
        # both pages fetched and spooled, neither read: a file is listed as soon as it is
        # made, before its page is written and let go, so what is held is watched a while
        deadline = time.monotonic() + 10
        while True:
            spooled = len(os.listdir(spool))
            held, _ = tracemalloc.get_traced_memory()
            if (spooled == 2 and held < size / 2) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        hold.unlink()
        _, content = await first
        rest = [content async for _, content in pages]
    finally:
        tracemalloc.stop()
        readers.close()
    assert [len(c.sorter.batch) for c in (content, *rest)] == [200, 200]
    assert spooled == 2 and held < size / 2, (spooled, held, size)


async def test_a_spooled_page_is_read_from_its_file_when_no_worker_can_read_it() -> None:
    # the harvest process let go of the body once it was spooled: should the workers then be
    # gone for good (a broken pool that cannot start again), the page is read from its file
    readers = PageReaders(1, min_bytes=0)
    try:
        await readers.warm()
        page = page_of(range(4))
        spooled = readers._spool_page(page)
        assert spooled is not None and page.reader.body == b""
        content = await asyncio.to_thread(_read_here, page, spooled)
    finally:
        readers.close()
    assert [r.identifier for r in content.sorter.batch] == [identifier_for(n) for n in range(4)]
    assert page.consumed and page.reader.items_seen == 4


async def report_of(script: str) -> Any:
    """Run ``script`` in a fresh Python process; the JSON report it prints last."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=PROJECT
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0
    return json.loads(out.decode().strip().splitlines()[-1])


# A fresh process (so a fresh fork server, whose start is most of the wait) reads one page with
# one worker while a ticker runs on its event loop; it reports how long the read took and the
# longest the ticker waited.
FIRST_PAGE = """
import asyncio, json, time
from wiscat.harvester.page_workers import PageReaders
from tests.integration.test_page_workers import page_of

async def main():
    readers = PageReaders(1, min_bytes=0)
    ticks = []

    async def tick():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    started = time.monotonic()
    content = await readers.read(page_of(range(3)))
    took = time.monotonic() - started
    workers = readers.worker_pids()
    ticker.cancel()
    readers.close()
    gaps = [later - earlier for earlier, later in zip(ticks, ticks[1:])]
    print(json.dumps({"took": took, "gap": max(gaps), "read": len(content.sorter.batch),
                      "workers": len(workers)}))

asyncio.run(main())
"""


async def test_workers_start_on_the_first_page_without_stopping_the_event_loop() -> None:
    report = await report_of(FIRST_PAGE)
    assert report["read"] == 3 and report["workers"] == 1
    # starting the workers took 0.3 s on a busy machine, 0.09 s on a quiet one: several of
    # the ticker's 10 ms, so that a blocked event loop (as it once was) would show as one gap
    # of most of the start; it ran on all along
    assert report["took"] > 0.04, report
    assert report["gap"] < min(0.15, report["took"] / 2), report


async def test_pages_reach_workers_through_a_spool_that_is_emptied_and_removed() -> None:
    readers = PageReaders(1, min_bytes=0)
    try:
        await readers.warm()
        first = await readers.read(page_of(range(4)))
        spool = readers.spool
        assert spool is not None and os.path.isdir(spool)
        assert os.path.basename(spool).startswith(f"wiscat-pages-{os.getpid()}-")
        assert len(first.sorter.batch) == 4
        assert os.listdir(spool) == []  # each page's file goes once it is read
    finally:
        readers.close()
    assert not os.path.exists(spool)


async def test_a_page_that_cannot_be_spooled_goes_through_the_pipe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    readers = PageReaders(1, min_bytes=0)
    try:
        await readers.warm()
        assert readers.spool is not None
        shutil.rmtree(readers.spool)  # as good as a full /dev/shm: no file can be made there
        with caplog.at_level(logging.WARNING, logger="wiscat.harvester.pages"):
            page = page_of(range(6))
            content = await readers.read(page)
        assert [r.identifier for r in content.sorter.batch] == [identifier_for(n) for n in range(6)]
        assert page.consumed and page.reader.items_seen == 6
        assert readers.workers == 1 and readers.worker_pids()  # still read by a worker
        assert "cannot spool a page" in caplog.text and "goes through the pipe" in caplog.text
    finally:
        readers.close()


# A harvester process in miniature: its page workers started, then it waits to be killed.
SPOOLING = """
import asyncio
from wiscat.harvester.page_workers import PageReaders

async def main():
    readers = PageReaders(2)
    await readers.warm()
    print(readers.spool, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_the_workers_of_a_killed_harvester_remove_its_spool() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SPOOLING, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        spool = line.decode().strip()
        assert os.path.isdir(spool)
        assert os.path.basename(spool).startswith(f"wiscat-pages-{process.pid}-")
    finally:
        process.kill()  # SIGKILL: it can stop nothing itself
        await process.wait()
    for _ in range(100):  # its workers look every second
        if not os.path.exists(spool):
            break
        await asyncio.sleep(0.05)
    assert not os.path.exists(spool)


# A fresh process closes its page readers while their workers are still starting and ends (as
# a harvester stopped then does); it reports whether the start was still under way at the close,
# and what spool folders of its own are left once its event loop and the starting thread ended.
CLOSED_WHILE_STARTING = """
import asyncio, glob, json, os, time
from wiscat.harvester.page_workers import PageReaders, spool_root

async def main():
    readers = PageReaders(1)
    start = asyncio.create_task(readers.warm())
    await asyncio.sleep(0.05)
    under_way = not start.done()
    readers.close()
    return under_way  # the start is cancelled; asyncio.run waits for its thread

under_way = asyncio.run(main())
time.sleep(0.2)
left = glob.glob(os.path.join(spool_root(), f"wiscat-pages-{os.getpid()}-*"))
print(json.dumps({"under_way": under_way, "left": left}))
"""


async def test_readers_closed_while_their_workers_start_leave_no_spool() -> None:
    report = await report_of(CLOSED_WHILE_STARTING)
    assert report["under_way"], "the fork server takes longer than 50 ms to start"
    assert report["left"] == []


@pytest.mark.parametrize("workers", [1, 0])
async def test_a_page_that_answers_another_verb_fails_in_a_worker_and_in_a_thread(
    workers: int,
) -> None:
    # a ListRecords page to a ListIdentifiers request: read in a worker, its summary named the
    # other verb, and its records were taken all the same
    page = page_of(range(3))
    page.verb = "ListIdentifiers"
    readers = PageReaders(workers, min_bytes=0)
    try:
        with pytest.raises(BadResponse) as caught:
            await readers.read(page)
    finally:
        readers.close()
    assert str(caught.value) == (
        "a ListIdentifiers request to http://peer/oai was answered with 'ListRecords'"
    )
    assert await readers_read_it_as_asked(page_of(range(3))) == 3


async def readers_read_it_as_asked(page: Page) -> int:
    page.verb = "ListRecords"
    readers = PageReaders(1, min_bytes=0)
    try:
        return len((await readers.read(page)).sorter.batch)
    finally:
        readers.close()
