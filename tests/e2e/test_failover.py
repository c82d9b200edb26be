"""Failover: the primary crashes and its streaming standby is promoted (``pg_ctl promote``)
while a harvest and a list run; the node's provider and harvester, on a URL naming both servers
with ``target_session_attrs=read-write``, carry on without a restart.

The standby streams through a fault proxy, frozen before the primary crashes: the primary has
committed pages of the harvest that the standby never received, as asynchronous replication
loses them. The run in flight fails at its next write, its reason stored on the new primary;
the next run lists again from the high-water mark and the node ends with the peer's records.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import pytest

from tests.support import factories
from tests.support.faultproxy import FaultProxy, Freeze, Latency
from tests.support.harvest_pair import SOURCE_SET, content, link_to, sink_settings
from tests.support.oai_client import oai_get
from tests.support.replication import (
    Server,
    caught_up,
    migrated_primary,
    replication,
    several_hosts,
)
from tests.support.servers import running_provider
from wiscat.harvester.context import RunReport
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.pool import Connection, Pool, connect, create_pool

DATABASE = "node"
PAGES_LOST = re.compile(
    r"the database holds (\d+) of the (\d+) pages this run wrote: it lost the others \(a "
    r"failover to a standby that had not received them, or a restore\); this run stopped, and "
    r"the next lists again from the high-water mark"
)


async def until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 60) -> None:
    for _ in range(int(seconds / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def stored_pages(server: Server) -> int:
    conn = await connect(server.url(DATABASE))
    try:
        value = await conn.fetchval("select coalesce(max(pages), 0) from harvest_runs")
    finally:
        await conn.close()
    return int(value)


async def test_a_promoted_standby_takes_over_and_the_next_run_resumes(
    db: Pool, database_url: str
) -> None:
    await factories.load_records(db, SOURCE_SET, range(100))
    with replication() as made:
        primary = await migrated_primary(made, DATABASE)
        async with FaultProxy("127.0.0.1", primary.port) as stream:
            standby = await asyncio.to_thread(made.standby, primary, stream.port)
            both = several_hosts([primary, standby], DATABASE)
            async with (
                running_provider(database_url, page_size=50) as peer,
                FaultProxy("127.0.0.1", int(peer.root.rsplit(":", 1)[1])) as peer_line,
                running_provider(both, page_size=30) as node,
                running_provider(
                    both, database_read_url=standby.url(DATABASE), page_size=30
                ) as reader,
                harvest_context(sink_settings(both), both) as ctx,
            ):
                new = await link_to(ctx, peer_line.url + "/oai", "src")

                async def harvest() -> RunReport:
                    link = await link_store.get_link(ctx.pool, "src")
                    assert link is not None
                    return await harvest_link(ctx, link, window=False)

                first = await harvest()
                assert first.status == "ok", first.summary()
                await factories.load_records(db, SOURCE_SET, range(100, 700))
                await caught_up(primary, standby, DATABASE)

                # a list of the node's provider, begun on the primary
                begun = await oai_get(
                    node.oai,
                    verb="ListIdentifiers",
                    metadataPrefix="iso19139",
                    set=new.local_set,
                )
                listed = begun.xpath("//oai:header/oai:identifier/text()")
                token = begun.xpath("//oai:resumptionToken/text()")[0]

                # run 2, slowed down: its first page reaches the standby, the next do not
                peer_line.set(Latency("downstream", 0.3))
                running = asyncio.create_task(harvest())
                await until(lambda: _at_least(primary, 2), "run 2 wrote its first page")
                await caught_up(primary, standby, DATABASE)
                stream.set(Freeze("downstream"))
                stream.set(Freeze("upstream"))
                await until(lambda: _at_least(primary, 4), "run 2 wrote two pages more")
                peer_line.set(Freeze("downstream"))
                # the pages read ahead are written; then the harvester waits for the next
                written = -1
                while written != (written := await stored_pages(primary)):
                    await asyncio.sleep(1)
                assert written < 12, "run 2 ended before the failover: slow it down more"

                primary.stop("immediate")  # the primary is gone
                between = await oai_get(node.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
                assert between.status == 503
                assert between.body == b"The catalogue's database is unavailable; retry later.\n"
                await asyncio.to_thread(standby.promote)

                peer_line.clear()
                failed = await running
                assert failed.status == "failed", failed.summary()
                assert failed.error is not None
                assert PAGES_LOST.fullmatch(failed.error), failed.error
                conn = await connect(standby.url(DATABASE))
                try:
                    row = await conn.fetchrow(
                        "select status, error from harvest_runs where id = $1",
                        failed.run_id,
                    )
                finally:
                    await conn.close()
                assert (row["status"], row["error"]) == ("failed", failed.error)

                # the list goes on, on the new primary, through the same provider
                while token:
                    page = await oai_get(node.oai, verb="ListIdentifiers", resumptionToken=token)
                    assert page.status == 200, page.body
                    listed += page.xpath("//oai:header/oai:identifier/text()")
                    token = (page.xpath("//oai:resumptionToken/text()") or [""])[0]
                assert len(listed) == len(set(listed)) >= 100

                # a provider that read from the standby reads from it as the primary it is now
                pages = [
                    await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
                    for provider in (node, reader)
                ]
                assert [page.status for page in pages] == [200, 200]
                first_pages = [page.xpath("//oai:header/oai:identifier/text()") for page in pages]
                assert first_pages[0] == first_pages[1] != []

                # the next run resumes from the high-water mark and misses nothing
                third = await harvest()
                assert third.status == "ok", third.summary()
                assert third.mode == "incremental"
                assert await content(ctx.pool, new.local_set) == await content(db, SOURCE_SET)


async def _at_least(server: Server, pages: int) -> bool:
    # run 1's pages and run 2's are in two rows; run 2 is the latest
    conn = await connect(server.url(DATABASE))
    try:
        value = await conn.fetchval("select pages from harvest_runs order by id desc limit 1")
    finally:
        await conn.close()
    return (value or 0) >= pages - 1


async def test_with_synchronous_replication_a_failover_loses_no_commit() -> None:
    """synchronous_standby_names: a commit returns once the standby has it, so the promoted
    standby holds every record and deletion whose write returned; a write the standby never
    received never returned."""
    with replication() as made:
        primary = await migrated_primary(made, DATABASE)
        async with FaultProxy("127.0.0.1", primary.port) as stream:
            standby = await asyncio.to_thread(made.standby, primary, stream.port)
            conn = await connect(primary.url())
            try:
                await conn.execute("alter system set synchronous_standby_names = '*'")
                await conn.execute("select pg_reload_conf()")
                await until(lambda: _synchronous(conn), "the standby is synchronous", seconds=30)
            finally:
                await conn.close()
            pool = await create_pool(primary.url(DATABASE), max_size=2)
            try:
                identifiers = await factories.load_records(pool, SOURCE_SET, range(50))
                await factories.delete(pool, SOURCE_SET, identifiers[:5])
                acknowledged = await content(pool, SOURCE_SET)
                stream.set(Freeze("downstream"))
                stream.set(Freeze("upstream"))
                unacknowledged = [
                    asyncio.create_task(factories.load_records(pool, SOURCE_SET, range(50, 60))),
                    asyncio.create_task(factories.delete(pool, SOURCE_SET, identifiers[5:10])),
                ]
                await asyncio.sleep(1)
                assert not any(task.done() for task in unacknowledged)  # waiting for the standby
                primary.stop("immediate")
                for task in unacknowledged:
                    with pytest.raises(DatabaseUnavailable):
                        await task
            finally:
                pool.terminate()
            await asyncio.to_thread(standby.promote)
            promoted = await create_pool(standby.url(DATABASE), max_size=1)
            try:
                assert await content(promoted, SOURCE_SET) == acknowledged
            finally:
                await promoted.close()


async def _synchronous(conn: Connection) -> bool:
    states = await conn.fetch("select sync_state from pg_stat_replication")
    return [row["sync_state"] for row in states] == ["sync"]
