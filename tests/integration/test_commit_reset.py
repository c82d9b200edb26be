"""RELIABILITY D03: the database connection reset during COMMIT.

The connection leads through the tests' fault proxy (tests/faultproxy.py) to the test
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

import asyncpg
import pytest

from shared.db import records as store
from shared.db.pool import Pool, connect
from shared.generator import generate_record
from shared.ingest import incoming
from shared.iso19139 import parse_record
from tests.faultproxy import Reset, postgres_url, proxy_to_postgres

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


def batch(size: int) -> list[store.IncomingRecord]:
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
            with pytest.raises(asyncpg.ConnectionDoesNotExistError) as reset:
                async with conn.transaction():
                    written = await store.upsert_records(conn, SET, records)
                    assert written.counts == {"added": 200}
        finally:
            conn.terminate()
        assert str(reset.value) == "connection was closed in the middle of operation"
        assert proxy.connections == 1  # the connection the batch was written on, reset
        # the server's end of it may still be committing: the outcome is known once it is gone
        await gone(db, backend)

        found = await stored(db, identifiers)
        expected = {"absent": [[]], "committed": [identifiers], "either": [[], identifiers]}
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
