"""The dashboard's WIS 2.0 section counts what the bridge's tables hold, and the admin API lists
the records that cannot be made valid, with their reasons. Real provider, real database."""

from __future__ import annotations

import json
import uuid

import aiohttp
import asyncpg
import lxml.html

from tests.support import wis2_rows
from tests.support.servers import running_provider

INVALID = """insert into wis2_invalid (identifier, reasons, report, source_datestamp)
             values ($1, $2, '{"valid": false}', now())"""
OUTBOX = """insert into wis2_outbox (message_id, wcmp2_id, centre_id, relation, sent_at, attempts,
                                     last_error)
            values ($1, 'urn:wmo:md:de-dwd:x', 'de-dwd', 'update', $2, $3, $4)"""


async def test_the_section_counts_the_bridge_tables(db: asyncpg.Pool, database_url: str) -> None:
    for n in range(3):
        await wis2_rows.store(db, wis2_rows.rendered(n))
    await wis2_rows.delete(db, wis2_rows.rendered(2).wcmp2_id)
    for identifier in ("urn:x:a", "urn:x:b"):
        await db.execute(INVALID, identifier, json.dumps([f"no centre-id for {identifier}"]))
    sent = await db.fetchval("select now()")
    for sent_at, attempts, error in ((sent, 1, None), (None, 0, None), (None, 3, "refused")):
        await db.execute(OUTBOX, uuid.uuid4(), sent_at, attempts, error)
    async with running_provider(database_url, wis2_centres="de-dwd") as provider:
        async with (
            aiohttp.ClientSession() as session,
            session.get(provider.root + "/?refresh=0") as response,
        ):
            assert response.status == 200
            page = lxml.html.fromstring(await response.read())
        [heading] = page.xpath("//h2[.='WIS 2.0']")
        [section] = heading.xpath("following-sibling::div[1]/table")
        counts = {
            row.xpath("td[1]")[0].text_content(): int(row.xpath("td[2]")[0].text_content())
            for row in section.xpath(".//tr[td]")
        }
        assert counts == {
            "WCMP2 records": 2,
            "cannot be made valid": 2,
            "announcements pending": 2,
            "announcements failing": 1,
        }
        assert section.xpath(".//a/@href") == [
            f"{provider.root}/collections/wis2-discovery-metadata/items",
            "/admin/wis2/invalid",
        ]
        # the newest of them, with their reasons, where the operator looks
        [listing] = page.xpath("//h3[.='Records that cannot be made valid']")
        [reasons] = listing.xpath("following-sibling::div[1]/table")
        shown = [
            (row.xpath("td[2]")[0].text_content(), row.xpath("td[3]")[0].text_content())
            for row in reasons.xpath(".//tr[td]")
        ]
        assert sorted(shown) == [
            ("urn:x:a", "no centre-id for urn:x:a"),
            ("urn:x:b", "no centre-id for urn:x:b"),
        ]
        url = provider.root + "/admin/wis2/invalid"
        token = provider.settings.admin_token.get_secret_value()
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as response:
                assert response.status == 401
            async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as response:
                assert response.status == 200
                listed = await response.json()
    assert sorted(row["identifier"] for row in listed) == ["urn:x:a", "urn:x:b"]
    assert {tuple(row["reasons"]) for row in listed} == {
        ("no centre-id for urn:x:a",),
        ("no centre-id for urn:x:b",),
    }
    assert listed[0]["report"] == {"valid": False}
