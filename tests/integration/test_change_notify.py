"""Migration 0012: a write transaction in which a datestamp moved sends one notification on
wiscat_changes, its write stamp; a write that moved none sends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest

from tests.support import factories
from wiscat.shared.db.pool import Pool, connect

OWN = "WIS-GISC-TEST"


class Heard:
    """The payloads heard on wiscat_changes by a session of its own."""

    def __init__(self) -> None:
        self.payloads: list[str] = []

    def __call__(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self.payloads.append(payload)

    async def quiet(self) -> list[str]:
        """The payloads heard once nothing more comes for a while; forgotten after."""
        await asyncio.sleep(0.5)
        heard, self.payloads = self.payloads, []
        return heard


@pytest.fixture
async def heard(database_url: str) -> AsyncIterator[Heard]:
    conn: asyncpg.Connection = await connect(database_url)
    listener = Heard()
    await conn.add_listener("wiscat_changes", listener)
    try:
        yield listener
    finally:
        await conn.close()


async def test_a_page_of_100_records_is_one_notification(db: Pool, heard: Heard) -> None:
    await factories.load_records(db, OWN, range(100))
    payloads = await heard.quiet()
    assert len(payloads) == 1, payloads
    stamps = {r["datestamp"] for r in await db.fetch("select datestamp from records")}
    assert stamps == {datetime.fromisoformat(payloads[0])}


async def test_a_rewrite_that_changes_nothing_sends_nothing(db: Pool, heard: Heard) -> None:
    await factories.load_records(db, OWN, range(20))
    assert len(await heard.quiet()) == 1
    await factories.load_records(db, OWN, range(20))  # the same content: no datestamp moves
    assert await heard.quiet() == []
    await factories.load_records(db, OWN, range(3), version=1)  # three change
    assert len(await heard.quiet()) == 1


async def test_a_deletion_and_a_set_membership_each_notify(db: Pool, heard: Heard) -> None:
    ids = await factories.load_records(db, OWN, range(5))
    await heard.quiet()
    await factories.delete(db, OWN, ids[:2])
    assert len(await heard.quiet()) == 1
    await factories.load_records(db, "OTHER", range(1), kind="remote")  # joins another set
    assert len(await heard.quiet()) == 1
