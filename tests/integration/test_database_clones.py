"""The test databases themselves: a clone waits while the template is busy."""

from __future__ import annotations

import asyncio

from tests.support import pg
from wiscat.shared.db.pool import connect


async def test_a_clone_waits_while_another_session_holds_the_template(template_ready: str) -> None:
    # PostgreSQL waits 5 s for the template's other sessions to leave, then refuses the copy
    # (ObjectInUseError), as when two workers clone at once: the clone is tried again.
    holder = await connect(pg.with_database(template_ready, pg.TEMPLATE))

    async def leave() -> None:
        await asyncio.sleep(6)
        await holder.close()

    leaving = asyncio.create_task(leave())
    url = await pg.clone_template(template_ready)
    try:
        await leaving
        conn = await connect(url)
        try:
            assert await conn.fetchval("select count(*) from schema_migrations") > 0
        finally:
            await conn.close()
    finally:
        await pg.drop_database(template_ready, url)
