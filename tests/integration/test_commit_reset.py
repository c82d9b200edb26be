"""RELIABILITY D03: the database connection reset during COMMIT.

The connection leads through the tests' fault proxy (tests/support/faultproxy.py) to the test
PostgreSQL, and the proxy resets it (RST) exactly at the transaction's COMMIT, found by its
bytes on the wire: before the server has the COMMIT, or once it has it but before the client
has the answer, or once the server has answered. Whichever, the batch is all there or not at
all, never in part; and a retry on a fresh connection, as the harvester's next run makes,
leaves exactly the batch, each record once.

When the client learns of the reset, the server may still be committing (it had the COMMIT):
the outcome is looked at once the server's process for that connection has ended. A retry
made before that waits on the rows' locks, and finds the batch committed or not.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from tests.support import factories
from tests.support.faultproxy import Reset, postgres_url, proxy_to_postgres
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, content, run, sink_settings
from tests.support.pg import clone_template, drop_database
from tests.support.servers import running_provider
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.pool import Pool, connect
from wiscat.shared.generator import generate_record
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.model import IncomingRecord

SET = "WIS-GISC-D03"
# PostgreSQL's protocol (v3) as asyncpg speaks it: the COMMIT query as it sends it (a simple
# Query message: "Q", its length, "COMMIT;" and a NUL), and the server's CommandComplete
# answer ("C", its length, the tag "COMMIT" and a NUL). Matching these whole messages, not the
# word, keeps "BEGIN ISOLATION LEVEL READ COMMITTED" or a record's text from matching.
COMMIT_SENT = b"Q\x00\x00\x00\x0cCOMMIT;\x00"
COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"

RESETS = {
    # the server never has the COMMIT: it rolls back as its client goes
    "before the server has it": (Reset("upstream", match=COMMIT_SENT), "absent"),
    # the server has the COMMIT, the client never has the answer
    "delivered, answer lost": (Reset("upstream", match=COMMIT_SENT, deliver=True), "either"),
    # the server has committed and answered, the answer is lost
    "answered, answer lost": (Reset("downstream", match=COMMIT_DONE), "committed"),
}


def batch(size: int) -> list[IncomingRecord]:
    return [incoming(parse_record(generate_record(n, centre="d03"))) for n in range(size)]


async def stored(db: Pool, identifiers: list[str]) -> list[str]:
    rows = await db.fetch(
        "select r.identifier from records r join set_members m using (identifier) "
        "where m.set_spec = $1 and r.identifier = any($2::text[])",
        SET,
        identifiers,
    )
    return sorted(r["identifier"] for r in rows)


async def gone(db: Pool, backend: int) -> None:
    for _ in range(1000):
        if not await db.fetchval("select count(*) from pg_stat_activity where pid = $1", backend):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"server process {backend} still runs after 10 s")


@pytest.mark.parametrize("when", list(RESETS))
async def test_d03_a_reset_at_commit_leaves_all_or_nothing_and_a_retry_the_batch_once(
    db: Pool, database_url: str, when: str
) -> None:
    toxic, outcome = RESETS[when]
    records = batch(200)
    identifiers = sorted(r.identifier for r in records)
    await store.ensure_set(db, SET, SET, "remote")
    async with proxy_to_postgres(database_url) as proxy:
        url = postgres_url(proxy, database_url)
        conn = await connect(url)
        backend = conn.get_server_pid()
        try:
            proxy.set(toxic)
            with pytest.raises(DatabaseUnavailable) as reset:
                async with conn.transaction():
                    written = await store.upsert_records(conn, SET, records)
                    assert written.counts == {"added": 200}
        finally:
            conn.terminate()
        assert str(reset.value) == "connection was closed in the middle of operation"
        assert reset.value.kind == "ConnectionDoesNotExistError"
        assert isinstance(reset.value.__cause__, asyncpg.ConnectionDoesNotExistError)
        assert proxy.connections == 1  # the connection the batch was written on, reset
        # the server's end of it may still be committing: the outcome is known once it is gone
        await gone(db, backend)

        found = await stored(db, identifiers)
        expected: dict[str, list[list[str]]] = {
            "absent": [[]],
            "committed": [identifiers],
            "either": [[], identifiers],
        }
        assert found in expected[outcome], f"{len(found)} of 200 records committed"

        # the retry, on a fresh connection: the same batch again
        proxy.clear()
        conn = await connect(url)
        try:
            async with conn.transaction():
                again = await store.upsert_records(conn, SET, records)
        finally:
            await conn.close()
        assert again.counts == ({"unchanged": 200} if found else {"added": 200})
        assert await stored(db, identifiers) == identifiers
        members = await db.fetchval("select count(*) from set_members where set_spec = $1", SET)
        assert members == 200


async def test_d03_a_harvest_whose_page_commit_is_reset_fails_and_the_next_run_completes(
    db: Pool, database_url: str, template_ready: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The sink's database connection is reset as page 2 of 3 commits: the run fails with its
    reason stored, pages committed before stay, the high-water mark does not move (invariant
    3: never ahead of the committed data); the next run completes, sink = source."""
    source = sorted(await factories.load_records(db, SOURCE_SET, range(250)))
    sink_url = await clone_template(template_ready)
    try:
        async with (
            running_provider(database_url) as provider,  # 100 records a page: 3 pages
            proxy_to_postgres(sink_url) as proxy,
            harvest_context(
                sink_settings(postgres_url(proxy, sink_url)), postgres_url(proxy, sink_url)
            ) as ctx,
        ):
            pair = Pair(db, provider, ctx.pool, ctx)
            link = await add_link(pair)
            # a list page goes by datestamp then identifier, and one transaction wrote them
            # all: page 2 holds source[100:200], written with their identifiers as parameters
            proxy.set(Reset("upstream", match=COMMIT_SENT, armed_by=source[150].encode()))
            caplog.set_level(logging.INFO, logger="wiscat")
            failed = await run(pair)
            # the database failed, not wiscat: said so, and no "unexpected error" traceback
            assert (failed.status, failed.error_kind) == ("failed", "DatabaseError")
            reason = (
                "the database failed during the run: ConnectionDoesNotExistError: "
                "connection was closed in the middle of operation"
            )
            assert failed.error == reason
            assert "unexpected error" not in caplog.text
            after = await link_store.get_link(ctx.pool, link.name)
            assert after is not None
            assert (after.high_water_mark, after.last_error) == (None, reason)
            runs = await ctx.pool.fetch(
                "select status, pages, added, error from harvest_runs order by id"
            )
            assert [tuple(r) for r in runs] == [("failed", 1, 100, reason)]
            assert sorted(await content(ctx.pool, link.local_set)) == source[:100]

            proxy.clear()
            done = await run(pair)
            assert done.status == "ok", done.error
            assert done.high_water_mark is not None
            assert await content(ctx.pool, link.local_set) == await content(db, SOURCE_SET)
            assert done.counts["added"] == 150  # pages 2 and 3; page 1 came again unchanged
            assert done.counts["unchanged"] == 100
    finally:
        await drop_database(template_ready, sink_url)
