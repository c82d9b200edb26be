"""D01: SIGKILL the harvester at random moments, full and incremental runs alike, again and again.

Each trial harvests a source of 1,000 records (10 pages) into a fresh sink with `wiscat harvest`
processes. In every other trial the first, full run is killed at a random moment one to three
times (as it starts, or after a random number of its pages were written), the source changing
between kills (an update, a deletion). In the others the full run completes; then the source
changes (updates and deletions spread over an incremental list of three pages) and an
incremental run is killed after a random number of its pages were written, with a random delay
on top. After every kill and at the end, every record the source lists up to the sink's
high-water mark is at the sink at the source's version (a mark ahead of the committed data
fails here); after every kill the mark has not moved unless the run completed its list; at the
end the sink holds each source record once, at its version, in the link's set, and the mark is
the source's newest datestamp.

WISCAT_CRASH_TRIALS sets the number of trials (6 here: three of each kind; `make soak` runs 50).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.e2e.copies import assert_copy_is_the_source, assert_mark_is_covered
from tests.e2e.test_harvester_killed import WISCAT, content, env_for, wiscat
from tests.support import factories
from tests.support.pg import clone_template, drop_database
from tests.support.servers import running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.linkspec import build_link

SOURCE_SET = "WIS-GISC-TEST"
TRIALS = int(os.environ.get("WISCAT_CRASH_TRIALS", "6"))
RECORDS = 1000
CHANGES = 250  # records each change of the source touches: an incremental list of 3 pages
LEASE = 1.0  # the killed process's lease runs out this soon (env_for sets 2 s: overridden)
LAST_RUN = "select max(id) from harvest_runs"
PAGES_OF_RUN_AFTER = "select pages from harvest_runs where id > $1 order by id desc limit 1"
MARK = "select high_water_mark, last_run_id from links where name = 'src'"


async def mark_of(sink: Pool) -> tuple[datetime | None, int | None]:
    """The link's high-water mark, and its last run."""
    row = await sink.fetchrow(MARK)
    assert row is not None
    return row["high_water_mark"], row["last_run_id"]


async def assert_mark_moved_with_a_whole_list(
    sink: Pool, before: tuple[datetime | None, int | None]
) -> None:
    """Invariant 3 itself: the mark moves only when a run completes its list, and completing a
    list sets the mark and the link's last run in one statement (links.sql, complete_list); a
    mark moved while the last run stayed that of before the kill was moved mid-list, however
    well the records below it happen to be covered (a wiscat source lists in datestamp order)."""
    (mark, last_run), (mark_before, last_run_before) = await mark_of(sink), before
    if mark != mark_before:
        assert last_run != last_run_before, (
            f"the mark moved from {mark_before} to {mark} in a run killed before its list was "
            "complete"
        )


async def killed_after(sink_url: str, seconds: float) -> bool:
    """Start `wiscat harvest src`, SIGKILL it after ``seconds``; whether it had ended first."""
    env = env_for(sink_url) | {"WISCAT_HARVEST_LEASE_SECONDS": str(LEASE)}
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        "harvest",
        "src",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await asyncio.wait_for(process.wait(), seconds)
        return True
    except TimeoutError:
        process.send_signal(signal.SIGKILL)
        await process.wait()
        return False


async def killed_at_page(sink_url: str, sink: Pool, pages: int, delay: float) -> bool:
    """Start `wiscat harvest src`, SIGKILL it ``delay`` seconds after its run wrote ``pages``
    pages; whether it had ended first."""
    before = await sink.fetchval(LAST_RUN) or 0
    env = env_for(sink_url) | {"WISCAT_HARVEST_LEASE_SECONDS": str(LEASE)}
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        "harvest",
        "src",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        for _ in range(3000):
            if process.returncode is not None:
                return True
            written = await sink.fetchval(PAGES_OF_RUN_AFTER, before)
            if written is not None and written >= pages:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(process.wait(), delay)
        return True
    except TimeoutError:
        process.send_signal(signal.SIGKILL)
        await process.wait()
        return False


async def change(source: Pool, ids: list[str], rng: random.Random, versions: Iterator[int]) -> None:
    """The source moves on: CHANGES updates and deletions in a few transactions, so that the
    sink's incremental list has pages with both. Each update is a newer version than any
    before it (a sink refuses an older gmd:dateStamp, D06, and the revival of a deleted record
    by a copy no newer than it, D07: rules a local write at the source does not follow)."""
    for _ in range(4):
        numbers = rng.sample(range(RECORDS), CHANGES // 5)
        await factories.load_records(source, SOURCE_SET, numbers, version=next(versions))
        await factories.delete(source, SOURCE_SET, rng.sample(ids, CHANGES // 20))


async def trial(
    source: Pool,
    ids: list[str],
    oai: str,
    template: str,
    rng: random.Random,
    versions: Iterator[int],
    *,
    incremental: bool,
) -> None:
    sink_url = await clone_template(template)
    sink = await create_pool(sink_url, max_size=2)
    try:
        new = build_link(
            name="src", url=oai, remote_set=SOURCE_SET, into=None, own_set="WIS-GISC-SINK"
        )
        await store.ensure_set(sink, new.local_set, new.local_set, "remote")
        await link_store.add_link(sink, new)
        if not incremental:
            # the first, full run killed one to three times, the source changing between
            # kills: as it starts (a process takes about half a second), or part way through
            # its list of ten pages. Kills timed from the start alone mostly came after the
            # list's end once harvests got quicker, and a mark moved mid-list went unseen.
            for _ in range(rng.randint(1, 3)):
                before = await mark_of(sink)
                if rng.random() < 0.5:
                    ended = await killed_after(sink_url, rng.uniform(0.1, 1.0))
                else:
                    pages = rng.randint(1, 9)
                    ended = await killed_at_page(sink_url, sink, pages, rng.uniform(0, 0.05))
                if ended:
                    break
                await assert_mark_moved_with_a_whole_list(sink, before)
                await assert_mark_is_covered(sink, source)
                n = rng.randrange(RECORDS)
                await factories.load_records(source, SOURCE_SET, [n], version=next(versions))
                await factories.delete(source, SOURCE_SET, [ids[rng.randrange(RECORDS)]])
                await asyncio.sleep(LEASE + 0.2)  # the dead process's lease runs out
        else:
            # a completed full run, then incremental runs killed part way through their list
            code, out = await wiscat(sink_url, "harvest", "src")
            assert code == 0, out
            await assert_mark_is_covered(sink, source)
            await change(source, ids, rng, versions)
            before = await mark_of(sink)
            if not await killed_at_page(sink_url, sink, rng.randint(1, 3), rng.uniform(0, 0.3)):
                await assert_mark_moved_with_a_whole_list(sink, before)
                await assert_mark_is_covered(sink, source)
                await asyncio.sleep(LEASE + 0.2)
        code, out = await wiscat(sink_url, "harvest", "src")
        assert code == 0, out
        await assert_mark_is_covered(sink, source)
        assert await content(sink) == await content(source)
        await assert_copy_is_the_source(sink, source)
        link = await link_store.get_link(sink, "src")
        newest = await source.fetchval("select max(datestamp) from records")
        assert link is not None and link.high_water_mark == newest.replace(microsecond=0)
    finally:
        await sink.close()
        await drop_database(template, sink_url)


@pytest.mark.timeout(600)  # about 90 s on two cores, over 200 s when they are busy
async def test_d01_harvester_killed_at_random_moments_ends_with_the_source(
    db: Pool, database_url: str, template_ready: str
) -> None:
    ids = await factories.load_records(db, SOURCE_SET, range(RECORDS))
    rng = random.Random(os.environ.get("WISCAT_CRASH_SEED", "1"))
    versions = itertools.count(1)
    async with running_provider(database_url, page_size=100) as provider:
        for n in range(TRIALS):
            incremental = n % 2 == 1  # every other trial kills incremental runs
            await trial(
                db, ids, provider.oai, template_ready, rng, versions, incremental=incremental
            )
