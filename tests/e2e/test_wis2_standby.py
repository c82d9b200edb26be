"""The WCMP2 collection read from a hot standby (WISCAT_DATABASE_READ_URL), on real PostgreSQL
streaming replication (tests/support/replication.py): the provider serves the records from the
standby, which takes no write, and what the standby has replayed is what it serves."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.support import wis2_rows
from tests.support.replication import (
    caught_up,
    migrated_primary,
    pause_replay,
    replication,
    resume_replay,
)
from tests.support.servers import running_provider
from wiscat.shared.db.pool import connect
from wiscat.shared.wcmp2.urls import collection_url, item_url

DATABASE = "source"
IDENTITY = {"Accept-Encoding": "identity"}


async def test_the_collection_is_served_from_the_standby() -> None:
    with replication() as made:
        primary = await migrated_primary(made, DATABASE)
        standby = await asyncio.to_thread(made.standby, primary)
        writer = await connect(primary.url(DATABASE))
        try:
            old = await wis2_rows.store(writer, wis2_rows.rendered(1))
            await caught_up(primary, standby, DATABASE)
            async with (
                running_provider(
                    primary.url(DATABASE),
                    database_read_url=standby.url(DATABASE),
                    wis2_records=True,
                ) as provider,
                aiohttp.ClientSession(auto_decompress=False) as client,
            ):
                base = collection_url(provider.settings.base_url)

                async def current() -> tuple[int, bytes]:
                    url = item_url(base, old.wcmp2_id)
                    async with client.get(url, headers=IDENTITY) as answer:
                        return answer.status, await answer.read()

                assert await current() == (200, old.content)
                # the standby holds the old revision while its replay is paused: served
                await pause_replay(standby, DATABASE)
                new = await wis2_rows.store(writer, wis2_rows.rendered(1, version=2))
                second = await wis2_rows.store(writer, wis2_rows.rendered(2))
                assert await current() == (200, old.content)
                async with client.get(base + "/items", headers=IDENTITY) as answer:
                    assert json.loads(await answer.read())["numberMatched"] == 1
                await resume_replay(standby, DATABASE)
                await caught_up(primary, standby, DATABASE)
                assert await current() == (200, new.content)
                url = item_url(base, second.wcmp2_id, second.revision)
                async with client.get(url, headers=IDENTITY) as answer:
                    assert (answer.status, await answer.read()) == (200, second.content)
        finally:
            await writer.close()
