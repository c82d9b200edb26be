"""Harvested pages read in worker processes: the same rows as reading in a thread, and a worker
that dies fails only the run whose page it held."""

from __future__ import annotations

import os
import signal

from services.harvester.service import harvest_context
from shared.db import links as link_store
from tests import factories
from tests.harvest_pair import SOURCE_SET, Pair, add_link, content, run, sink_settings
from tests.pg import clone_template, drop_database

# what a harvest stores of a record, to the byte
STORED = (
    "select identifier, md_datestamp, content_hash, xml, set_specs, deleted "
    "from records order by identifier"
)


async def test_workers_store_exactly_what_a_thread_stores(pair: Pair, template_ready: str) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(300))
    await factories.delete(pair.source, SOURCE_SET, ids[7:8])
    assert pair.ctx.pages.workers > 0
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


async def test_a_dead_worker_fails_its_run_and_the_next_run_recovers(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(300))
    await add_link(pair)
    assert (await run(pair)).status == "ok"
    workers = pair.ctx.pages.worker_pids()
    assert workers

    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    failed = await run(pair, full=True)
    assert failed.status == "failed"
    assert failed.error is not None and "died" in failed.error, failed.error
    link = await link_store.get_link(pair.sink, "test")
    assert link is not None and link.last_error is not None and "died" in link.last_error

    await factories.load_records(pair.source, SOURCE_SET, range(300, 310))
    again = await run(pair, full=True)
    assert again.status == "ok", again.summary()
    assert set(pair.ctx.pages.worker_pids()).isdisjoint(workers)  # fresh workers
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)
