"""The scheduler: many links at once, two workers on one database, leases freed with their
holder's session or, a holder alive but stuck, once they run out."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from tests.support import factories
from tests.support.harvest_pair import sink_settings
from tests.support.pg import clone_template, drop_database
from tests.support.servers import RunningProvider, running_provider
from wiscat.harvester.context import HarvestContext
from wiscat.harvester.scheduler import Scheduler, lease_kept
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import leases as lease_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.leases import LeaseSession
from wiscat.shared.db.pool import Pool
from wiscat.shared.linkspec import build_link

SOURCE_SET = "WIS-GISC-TEST"
LINKS = 120


@pytest.fixture
async def sink(
    db: Pool, database_url: str, template_ready: str
) -> AsyncIterator[tuple[RunningProvider, str]]:
    await factories.load_records(db, SOURCE_SET, range(20))
    sink_url = await clone_template(template_ready)
    try:
        async with running_provider(database_url) as provider:
            yield provider, sink_url
    finally:
        await drop_database(template_ready, sink_url)


async def add_links(pool: Pool, provider: RunningProvider, count: int) -> None:
    await store.ensure_set(pool, SOURCE_SET, SOURCE_SET, "remote")
    for n in range(count):
        await link_store.add_link(
            pool,
            build_link(
                name=f"peer-{n:03d}",
                url=provider.oai,
                remote_set=SOURCE_SET,
                into=None,
                own_set="WIS-GISC-SINK",
                window_slices=0,
            ),
        )


async def test_two_workers_share_120_links_and_run_each_once(
    sink: tuple[RunningProvider, str],
) -> None:
    provider, sink_url = sink
    # Every link is of one host, whose 8 slots the two workers share: each may run 4 at once,
    # so neither can hold them all. With more, the worker that first took the host's slots
    # kept them, leasing again as soon as each run ended (105 to 120 of the 120 links).
    settings = sink_settings(
        sink_url, harvest_concurrency=4, harvest_per_host=8, harvest_poll_seconds=0.2
    )
    async with (
        harvest_context(settings, sink_url) as one,
        harvest_context(settings, sink_url) as two,
    ):
        await add_links(one.pool, provider, LINKS)
        workers = [
            Scheduler(dataclasses.replace(one, worker="worker-a")),
            Scheduler(dataclasses.replace(two, worker="worker-b")),
        ]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(w.run(stop)) for w in workers]
        try:
            # every link run and given back (a stop while a run that has recorded its success
            # is still giving its lease back ends that run as stopped, due again in 5 minutes)
            for _ in range(600):
                done, given_back = await one.pool.fetchrow(
                    "select count(*) filter (where last_success_at is not null),"
                    " count(*) filter (where lease_owner is null) from links"
                )
                if done == given_back == LINKS:
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert done == LINKS
        runs = await one.pool.fetch("select link, worker, status from harvest_runs")
        assert len(runs) == LINKS, "a link ran more than once"
        assert {r["status"] for r in runs} == {"ok"}
        by_worker = {w: sum(r["worker"] == w for r in runs) for w in ("worker-a", "worker-b")}
        assert by_worker["worker-a"] > 0 and by_worker["worker-b"] > 0, by_worker
        # every lease was released and the next run is about an hour away
        assert (
            await one.pool.fetchval("select count(*) from links where lease_owner is not null") == 0
        )
        assert await one.pool.fetchval("select min(next_run_at - now()) from links") > timedelta(
            minutes=50
        )
        assert await one.pool.fetchval("select count(*) from records where not deleted") == 20


async def survivor_runs(ctx: HarvestContext) -> dict[str, object]:
    """Run a scheduler as worker "survivor" until the link has succeeded; its one run."""
    scheduler = Scheduler(dataclasses.replace(ctx, worker="survivor"))
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        for _ in range(100):
            if await ctx.pool.fetchval("select max(last_success_at) from links") is not None:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await task
    run = await ctx.pool.fetchrow("select worker, status from harvest_runs")
    assert run is not None, "no link ran"
    return dict(run)


async def test_a_dead_workers_lease_is_taken_over_at_once(
    sink: tuple[RunningProvider, str],
) -> None:
    provider, sink_url = sink
    settings = sink_settings(sink_url, harvest_poll_seconds=0.1, harvest_lease_seconds=300)
    async with harvest_context(settings, sink_url) as ctx:
        await add_links(ctx.pool, provider, 1)
        # a worker that died holding the lease: its session is gone, its row says 5 minutes more
        dead = await LeaseSession.open(sink_url)
        lease = timedelta(minutes=5)
        assert await dead.take("peer-000", "dead-worker", lease, due=True) is not None
        other = await LeaseSession.open(sink_url)
        try:
            assert await other.take("peer-000", "other", lease, due=True) is None  # held
        finally:
            await other.close()
        dead.conn.terminate()
        assert await survivor_runs(ctx) == {"worker": "survivor", "status": "ok"}


async def test_a_stuck_workers_lease_is_taken_over_once_it_runs_out(
    sink: tuple[RunningProvider, str],
) -> None:
    provider, sink_url = sink
    settings = sink_settings(sink_url, harvest_poll_seconds=0.1, harvest_lease_seconds=1)
    async with harvest_context(settings, sink_url) as ctx:
        await add_links(ctx.pool, provider, 1)
        # a worker alive but stuck: its session holds the lock, it renews nothing
        stuck = await LeaseSession.open(sink_url)
        try:
            assert await stuck.take("peer-000", "stuck", timedelta(seconds=1), due=True)
            assert await lease_store.free_due(ctx.pool, 10, 2) == []
            assert await survivor_runs(ctx) == {"worker": "survivor", "status": "ok"}
        finally:
            await stuck.close()


async def test_requested_run_happens_now(sink: tuple[RunningProvider, str]) -> None:
    provider, sink_url = sink
    settings = sink_settings(sink_url, harvest_poll_seconds=0.1)
    async with harvest_context(settings, sink_url) as ctx:
        await add_links(ctx.pool, provider, 1)
        await ctx.pool.execute("update links set next_run_at = now() + interval '1 day'")
        assert await link_store.request_run(ctx.pool, "peer-000", "full")
        stop = asyncio.Event()
        task = asyncio.create_task(Scheduler(ctx).run(stop))
        try:
            for _ in range(100):
                if await ctx.pool.fetchval("select count(*) from harvest_runs where status = 'ok'"):
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await task
        assert await ctx.pool.fetchval("select mode from harvest_runs") == "full"
        assert await ctx.pool.fetchval("select run_requested from links") is None


async def add_quiet_link(db: Pool, name: str) -> None:
    """A link to a peer nobody answers for: for tests of its lease alone."""
    await store.ensure_set(db, SOURCE_SET, SOURCE_SET, "remote")
    link = build_link(
        name=name,
        url="http://127.0.0.1:9/oai",
        remote_set=SOURCE_SET,
        into=None,
        own_set="WIS-GISC-SINK",
    )
    await link_store.add_link(db, link)


async def test_a_run_requested_while_the_link_runs_is_not_lost(db: Pool, database_url: str) -> None:
    await add_quiet_link(db, "busy")
    lease = timedelta(minutes=5)
    session = await LeaseSession.open(database_url)
    try:
        leased = await session.take("busy", "worker", lease, due=True)
        assert leased is not None
        # "harvest now" arrives while the run is under way
        assert await link_store.request_run(db, "busy", "full")
        later = leased.next_run_at + timedelta(hours=1)
        await session.give_back("busy", "worker", later, leased)
        link = await link_store.get_link(db, "busy")
        assert link is not None
        assert link.run_requested == "full"
        assert link.next_run_at < later
        again = await session.take("busy", "worker", lease, due=True)
        assert again is not None and again.run_requested == "full"
        # with no request meanwhile, the next run is the scheduled one
        await session.give_back("busy", "worker", later, again)
        link = await link_store.get_link(db, "busy")
        assert link is not None
        assert (link.run_requested, link.next_run_at) == (None, later)
        assert await session.take("busy", "worker", lease, due=True) is None  # not due
    finally:
        await session.close()


async def test_a_lease_is_kept_through_a_database_error(
    db: Pool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal that fails (the database restarting, say) is retried at the next turn: the
    lease is not left to run out under a long run, nor its error raised at the run's end."""
    await add_quiet_link(db, "peer")
    lease = timedelta(seconds=0.3)
    session = await LeaseSession.open(database_url)
    try:
        assert await session.take("peer", "worker", lease, due=False) is not None
        expires = "select lease_expires - now() from links where lease_owner = 'worker'"
        async with lease_kept(db, "peer", "worker", lease):
            await db.execute("alter table links rename to links_away")
            await asyncio.sleep(0.5)  # every renewal meanwhile fails: the table is not there
            await db.execute("alter table links_away rename to links")
            await asyncio.sleep(0.25)
            assert await db.fetchval(expires) > timedelta(seconds=0.1)  # renewed once back
    finally:
        await session.close()
    assert "could not renew the lease of peer" in caplog.text


async def test_a_full_hosts_links_are_not_leased_and_others_run(
    sink: tuple[RunningProvider, str],
) -> None:
    """A host whose slots are all held (by runs of other processes) keeps its due links
    unleased, and they take no run slot: a link of another host, due after them all, runs."""
    provider, sink_url = sink
    settings = sink_settings(
        sink_url, harvest_concurrency=1, harvest_per_host=2, harvest_poll_seconds=0.1
    )
    async with harvest_context(settings, sink_url) as ctx:
        for n in range(10):
            await add_quiet_link(ctx.pool, f"full-{n}")
        await ctx.pool.execute("update links set next_run_at = now() - interval '1 hour'")
        await add_links(ctx.pool, provider, 1)
        # two runs elsewhere hold the quiet host's two slots
        holders = [await LeaseSession.open(sink_url) for _ in range(2)]
        try:
            for holder in holders:
                assert await holder.take_host_slot("127.0.0.1:9", 2)
            assert await survivor_runs(ctx) == {"worker": "survivor", "status": "ok"}
            leased = await ctx.pool.fetchval(
                "select count(*) from links where lease_owner is not null"
            )
            assert leased == 0
            assert await ctx.pool.fetchval("select count(*) from harvest_runs") == 1
        finally:
            for holder in holders:
                await holder.close()


async def test_a_lease_whose_session_was_cut_is_taken_again_at_its_renewal(
    db: Pool, database_url: str
) -> None:
    """A run's session cut under it (a restarted server, a dropped connection): its renewal
    opens a new one and takes the link's lock and host slot again, where nobody took them."""
    await add_quiet_link(db, "cut")
    lease = timedelta(minutes=5)
    session = await LeaseSession.open(database_url)
    other = await LeaseSession.open(database_url)
    try:
        assert await session.take_host_slot("127.0.0.1:9", 1)
        assert await session.take("cut", "worker", lease, due=False) is not None
        assert session.session_held
        pid = session.conn.get_server_pid()
        assert await db.fetchval("select pg_terminate_backend($1)", pid)
        for _ in range(100):  # the server ends the session a moment later
            if session.conn.is_closed():
                break
            await asyncio.sleep(0.02)
        assert await session.renew("cut", "worker", lease)
        assert session.conn.get_server_pid() != pid and session.session_held
        # both locks are the new session's: nobody else takes the link, nor the host's slot
        assert await other.take("cut", "other", lease, due=False) is None
        assert not await other.take_host_slot("127.0.0.1:9", 1)
    finally:
        await session.close()
        await other.close()
