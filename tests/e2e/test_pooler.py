"""A connection pooler: providers and harvesters through a real PgBouncer in transaction mode.

Behind transaction pooling a client's statements go to whichever server connection is free at
each transaction: prepared statements kept by name (asyncpg's statement cache) and anything
held by a session across transactions do not follow them. wiscat keeps no statement cache
with WISCAT_DATABASE_STATEMENT_CACHE=0, sends its session's time zone at start-up (PgBouncer
passes it on), and takes the schema migration's session lock over
WISCAT_DATABASE_SESSION_URL, the server itself.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from tests.e2e.nodes import Node
from tests.e2e.test_harvester_killed import content
from tests.support import factories
from tests.support.events import open_stream
from tests.support.harvest_pair import sink_settings
from tests.support.oai_client import NS, oai_get
from tests.support.pg import clone_template, drop_database, with_database
from tests.support.pgbouncer import running_pgbouncer
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.linkspec import build_link

SOURCE_SET = "WIS-GISC-TEST"
POOLED = {"WISCAT_DATABASE_STATEMENT_CACHE": "0"}


def name_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def session_settings(pool: Pool) -> list[tuple[str, str]]:
    """The time zone and JIT setting of each of a few uses of ``pool``, side by side and after
    one another (each connection back in the pool in between)."""

    async def use() -> tuple[str, str]:
        async with pool.acquire() as conn:
            await conn.fetchval("select pg_sleep(0.01)")
            return await conn.fetchval("show timezone"), await conn.fetchval("show jit")

    seen = []
    for _ in range(3):
        seen += await asyncio.gather(*(use() for _ in range(4)))
    return seen


async def walk(oai: str, verb: str) -> list[str]:
    """The identifiers of a whole list, page by page."""
    listed: list[str] = []
    answer = await oai_get(oai, verb=verb, metadataPrefix="iso19139")
    while True:
        assert answer.status == 200, answer.body.decode(errors="replace")
        assert answer.errors() == []
        listed += answer.tree.xpath("//oai:header/oai:identifier/text()", namespaces=NS)
        token = answer.tree.xpath("//oai:resumptionToken/text()", namespaces=NS)
        if not token:
            return listed
        answer = await oai_get(oai, verb=verb, resumptionToken=token[0])


async def test_a_session_stays_in_utc_after_its_first_use_directly_and_through_pgbouncer(
    database_url: str, template_ready: str
) -> None:
    """On a database whose own time zone is New York, every use of a pooled connection is in
    UTC, connected directly or through PgBouncer (asyncpg's RESET ALL at each release undid
    the time zone set at connect: directly, the database's came back; through PgBouncer, the
    server connection's became the session's), and JIT is off directly."""
    setup = await create_pool(database_url, max_size=1)
    try:
        await setup.execute(
            f"alter database {name_of(database_url)} set timezone = 'America/New_York'"
        )
    finally:
        await setup.close()
    direct = await create_pool(database_url, max_size=2)
    try:
        assert set(await session_settings(direct)) == {("UTC", "off")}
    finally:
        await direct.close()
    async with running_pgbouncer(template_ready) as bouncer:
        pooled = await create_pool(
            with_database(bouncer, name_of(database_url)), max_size=4, statement_cache=0
        )
        try:
            assert {zone for zone, _ in await session_settings(pooled)} == {"UTC"}
        finally:
            await pooled.close()


async def test_a_provider_and_a_harvester_work_through_pgbouncer(
    db: Pool, database_url: str, template_ready: str
) -> None:
    """A ``wiscat provider`` whose database is behind PgBouncer (transaction mode, two server
    connections, statement cache 0, its migration's lock over WISCAT_DATABASE_SESSION_URL)
    serves four lists of 3 pages at once, each whole; the harvester of a sink behind the same
    PgBouncer (statement cache 0) harvests it: the sink holds the source's 120 records, each
    once."""
    ids = await factories.load_records(db, SOURCE_SET, range(120))
    sink_url = await clone_template(template_ready)
    sink = await create_pool(sink_url, max_size=2)
    source = None
    try:
        async with running_pgbouncer(template_ready) as bouncer:
            pooled_source = with_database(bouncer, name_of(database_url))
            pooled_sink = with_database(bouncer, name_of(sink_url))
            source = Node(
                "TEST",
                pooled_source,
                extra=POOLED
                | {"WISCAT_DATABASE_SESSION_URL": database_url, "WISCAT_PAGE_SIZE": "50"},
            )
            await source.start("provider", f"http://127.0.0.1:{source.provider_port}/readyz")
            # four lists at once, so that the provider's connections share PgBouncer's two
            # server connections, each statement landing where the one before did not run
            lists = await asyncio.gather(
                *(walk(source.oai, verb) for verb in ("ListRecords", "ListIdentifiers") * 2)
            )
            assert [sorted(listed) for listed in lists] == [sorted(ids)] * 4

            new = build_link(
                name="src",
                url=source.oai,
                remote_set=SOURCE_SET,
                into=None,
                own_set="WIS-GISC-SINK",
            )
            await store.ensure_set(sink, new.local_set, new.local_set, "remote")
            await link_store.add_link(sink, new)
            settings = sink_settings(
                pooled_sink, database_statement_cache=0, database_session_url=sink_url
            )
            async with harvest_context(settings, pooled_sink) as ctx:
                link = await link_store.get_link(ctx.pool, "src")
                assert link is not None
                report = await harvest_link(ctx, link, window=False)
            assert report.status == "ok", report.summary()
            assert await content(sink) == await content(db)
            assert len(await content(sink)) == 120
            await source.stop()
    finally:
        if source is not None:
            await source.stop()
        await sink.close()
        await drop_database(template_ready, sink_url)


async def test_hints_arrive_from_a_provider_behind_pgbouncer(
    database_url: str, template_ready: str
) -> None:
    """A ``wiscat provider`` behind PgBouncer in transaction mode LISTENs over
    WISCAT_DATABASE_SESSION_URL (LISTEN through the pooler receives nothing): a write made
    through PgBouncer is hinted."""
    async with running_pgbouncer(template_ready) as bouncer:
        pooled = with_database(bouncer, name_of(database_url))
        writer = await create_pool(pooled, max_size=2, statement_cache=0)
        source = Node(
            "TEST",
            pooled,
            extra=POOLED | {"WISCAT_DATABASE_SESSION_URL": database_url, "WISCAT_HINTS": "true"},
        )
        try:
            await source.start("provider", f"http://127.0.0.1:{source.provider_port}/readyz")
            async with open_stream(source.oai + "/changes", sets=(SOURCE_SET,)) as events:
                await asyncio.sleep(1)  # the provider's listener is up
                for n in range(3):
                    await factories.load_records(writer, SOURCE_SET, [n])
                    event = await events.next(5)
                    assert (event.kind, event.json["sets"]) == ("change", [SOURCE_SET])
        finally:
            await source.stop()
            await writer.close()
