"""The harvester benchmark's reference, the minimal sequential harvester (bench/sequential.py),
stores every record and deletion of a list, page after page: a ratio to it counts only if it
does its whole job.

A real provider on loopback, on a real PostgreSQL; the reference writes to a second database.
"""

from __future__ import annotations

import asyncpg

from bench.sequential import TABLE, harvest
from tests.support import factories, pg
from tests.support.servers import running_provider
from wiscat.shared.db.pool import Pool


async def test_the_reference_stores_every_record_and_deletion(
    db: Pool, database_url: str, postgres_server_url: str
) -> None:
    identifiers = await factories.load_records(db, "WIS-SEQ", range(250))
    await factories.delete(db, "WIS-SEQ", identifiers[:7])
    reference = await pg.clone_template(postgres_server_url)
    try:
        # pages of 100: three of them, the list followed by its resumption tokens
        async with running_provider(database_url, page_size=100) as provider:
            stored = await harvest(provider.root + "/oai", "WIS-SEQ", reference)
        conn = await asyncpg.connect(reference)
        try:
            rows = await conn.fetch(f"select identifier, deleted, xml from {TABLE}")
        finally:
            await conn.close()
    finally:
        await pg.drop_database(postgres_server_url, reference)

    assert stored == 250
    assert {row["identifier"] for row in rows} == set(identifiers)
    deleted = {row["identifier"] for row in rows if row["deleted"]}
    assert deleted == set(identifiers[:7])
    for row in rows:
        assert (row["xml"] is None) == row["deleted"]
        if row["xml"] is not None:
            assert row["identifier"] in row["xml"] and row["xml"].startswith("<gmd:MD_Metadata")
