"""Providers reading from a hot standby (WISCAT_DATABASE_READ_URL), on real PostgreSQL streaming
replication: a primary and its standby (tests/support/replication.py), replay paused and resumed.

A list read from the standby never passes a datestamp the primary may still commit or the
standby has not yet replayed: a harvester harvesting through the standby's provider misses
nothing, whatever the standby lags.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.support import factories
from tests.support.events import open_stream
from tests.support.harvest_pair import SOURCE_SET, content, link_to, sink_settings
from tests.support.oai_client import oai_get
from tests.support.pg import clone_template, drop_database
from tests.support.replication import (
    Server,
    caught_up,
    migrated_primary,
    pause_replay,
    replication,
    resume_replay,
    several_hosts,
)
from tests.support.servers import running_provider
from wiscat.harvester.context import RunReport
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.errors import DatabaseError
from wiscat.shared.db.pool import create_pool
from wiscat.shared.generator import generate_record
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import parse_record

DATABASE = "source"


@pytest.fixture(scope="module")
async def servers() -> AsyncIterator[tuple[Server, Server]]:
    """A primary holding a migrated database, and its standby (one pair for the module)."""
    with replication() as made:
        primary = await migrated_primary(made, DATABASE)
        standby = await asyncio.to_thread(made.standby, primary)
        yield primary, standby


async def test_a_harvest_through_a_lagging_standby_misses_nothing(
    servers: tuple[Server, Server], template_ready: str
) -> None:
    primary, standby = servers
    source = await create_pool(primary.url(DATABASE), max_size=4)
    sink_url = await clone_template(template_ready)
    try:
        await factories.load_records(source, SOURCE_SET, range(120))
        async with (
            running_provider(
                primary.url(DATABASE),
                database_read_url=standby.url(DATABASE),
                read_replay_wait_seconds=0.5,
                page_size=50,
            ) as provider,
            harvest_context(sink_settings(sink_url), sink_url) as ctx,
        ):
            new = await link_to(ctx, provider.oai, "src")

            async def harvest() -> RunReport:
                link = await link_store.get_link(ctx.pool, "src")
                assert link is not None
                report = await harvest_link(ctx, link, window=False)
                assert report.status == "ok", report.summary()
                return report

            await caught_up(primary, standby, DATABASE)
            await harvest()
            assert await content(ctx.pool, new.local_set) == await content(source, SOURCE_SET)
            before = await content(source, SOURCE_SET)

            # Record 1000 is written in a transaction that stays open while record 1001 is
            # written and committed after it (a later datestamp), and replayed.
            async with source.acquire() as held:
                transaction = held.transaction()
                await transaction.start()
                await store.upsert_records(
                    held, SOURCE_SET, [incoming(parse_record(generate_record(1000)))]
                )
                await factories.load_records(source, SOURCE_SET, [1001])
                await caught_up(primary, standby, DATABASE)
                # The standby stops replaying; record 1000 commits on the primary, with more
                # writes: changes and deletions of records already harvested.
                await pause_replay(standby, DATABASE)
                await transaction.commit()
            await factories.load_records(source, SOURCE_SET, range(10), version=1)
            identifiers = sorted(await content(source, SOURCE_SET))
            await factories.delete(source, SOURCE_SET, identifiers[20:25])

            # A list read from the standby now would hold 1001 and not 1000, and the harvest's
            # high-water mark would pass 1000 for ever: the list stops at a horizon the
            # standby has replayed, before both.
            paused = await harvest()
            changed = {k: paused.counts[k] for k in ("added", "updated", "deleted")}
            assert changed == {"added": 0, "updated": 0, "deleted": 0}, paused.summary()
            assert await content(ctx.pool, new.local_set) == before

            await resume_replay(standby, DATABASE)
            await caught_up(primary, standby, DATABASE)
            await harvest()
            assert await content(ctx.pool, new.local_set) == await content(source, SOURCE_SET)
    finally:
        await source.close()
        await drop_database(template_ready, sink_url)


async def test_a_list_continued_on_a_lagging_standby_waits_for_its_bound(
    servers: tuple[Server, Server],
) -> None:
    primary, standby = servers
    source = await create_pool(primary.url(DATABASE), max_size=4)
    try:
        async with (
            running_provider(primary.url(DATABASE), page_size=10) as on_primary,
            running_provider(
                primary.url(DATABASE),
                database_read_url=standby.url(DATABASE),
                read_replay_wait_seconds=0.3,
                page_size=10,
            ) as on_standby,
        ):
            await caught_up(primary, standby, DATABASE)
            await pause_replay(standby, DATABASE)
            try:
                # numbers no other test of this file uses: unknown to the standby until replayed
                await factories.load_records(source, "WIS-GISC-LATE", range(2000, 2030))
                # a list begun on the primary's provider, its bound past what the standby has
                first = await oai_get(
                    on_primary.oai,
                    verb="ListIdentifiers",
                    metadataPrefix="iso19139",
                    set="WIS-GISC-LATE",
                )
                token = first.xpath("//oai:resumptionToken/text()")[0]
                refused = await oai_get(
                    on_standby.oai, verb="ListIdentifiers", resumptionToken=token
                )
                assert refused.status == 503
                assert refused.headers["Retry-After"] == "30"
                assert refused.body == b"The catalogue's database is unavailable; retry later.\n"
                # GetRecord reads the standby too: what it has not replayed is not there yet
                late = first.xpath("//oai:header/oai:identifier/text()")[0]
                asked = {"verb": "GetRecord", "identifier": late, "metadataPrefix": "iso19139"}
                assert (await oai_get(on_primary.oai, **asked)).errors() == []
                unreplayed = await oai_get(on_standby.oai, **asked)
                assert (unreplayed.status, unreplayed.errors()) == (200, ["idDoesNotExist"]), (
                    unreplayed.body
                )
            finally:
                await resume_replay(standby, DATABASE)
            await caught_up(primary, standby, DATABASE)
            continued = await oai_get(on_standby.oai, verb="ListIdentifiers", resumptionToken=token)
            assert continued.status == 200
            listed = continued.xpath("//oai:header/oai:identifier/text()")
            again = await oai_get(on_primary.oai, verb="ListIdentifiers", resumptionToken=token)
            assert listed == again.xpath("//oai:header/oai:identifier/text()")
            assert len(listed) == 10
            assert (await oai_get(on_standby.oai, **asked)).errors() == []
    finally:
        await source.close()


async def test_a_url_whose_hosts_hold_no_primary_is_refused_with_the_reason(
    servers: tuple[Server, Server],
) -> None:
    """Between the primary's loss and its standby's promotion, the servers a URL names hold
    no primary: a service starting then says so, as for a server that refuses it."""
    _, standby = servers
    with pytest.raises(DatabaseError) as caught:
        await create_pool(several_hosts([standby], DATABASE), max_size=1)
    assert str(caught.value) == (
        "cannot connect to the database: None of the hosts match the target attribute "
        "requirement <SessionAttribute.read_write: 'read-write'>"
    )


async def test_a_change_hint_waits_until_the_standby_lists_the_change(
    servers: tuple[Server, Server],
) -> None:
    """The provider LISTENs on the primary (a standby refuses LISTEN) and hints a change only
    once the standby its lists are read from has replayed it (docs/links.md#change-hints)."""
    primary, standby = servers
    source = await create_pool(primary.url(DATABASE), max_size=4)
    hinted = "WIS-GISC-HINTED"
    try:
        async with (
            running_provider(
                primary.url(DATABASE),
                database_read_url=standby.url(DATABASE),
                read_replay_wait_seconds=0.3,
            ) as provider,
            open_stream(provider.oai + "/changes", sets=(hinted,)) as events,
        ):
            await asyncio.wait_for(provider.app.state.provider.hints.listening.wait(), 5)
            await caught_up(primary, standby, DATABASE)
            await pause_replay(standby, DATABASE)
            try:
                [identifier] = await factories.load_records(source, hinted, [3000])
                await events.none_within(3)  # committed, but not on the standby
            finally:
                await resume_replay(standby, DATABASE)
            event = await events.next(5)
            assert (event.kind, event.json["sets"]) == ("change", [hinted])
            answer = await oai_get(
                provider.oai,
                verb="ListIdentifiers",
                metadataPrefix="iso19139",
                set=hinted,
                until=event.json["until"],
            )
            assert identifier in answer.body.decode()
    finally:
        await source.close()
