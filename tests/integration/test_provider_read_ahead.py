"""The provider reads list pages ahead of its clients (services/provider/readahead.py).

A client gets the pages it would get with nothing read ahead, and a record changed after its
page was read ahead reaches the client: as it was in this list, as it is in the next
incremental harvest.
"""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest
from lxml import etree

from tests.support import factories
from tests.support.oai_client import OAI, Answer, oai_get
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db.pool import Pool

OWN = "WIS-GISC-TEST"
READ_AHEAD = re.compile(r'^wiscat_oai_pages_read_ahead_total\{outcome="(\w+)"\} (\S+)$', re.M)


async def pages_of(oai: str, verb: str, **params: str) -> list[Answer]:
    """Every page of a list, following its resumptionTokens."""
    pages = [await oai_get(oai, verb=verb, **params)]
    while True:
        assert not pages[-1].errors(), pages[-1].body[:300]
        token = pages[-1].tree.findtext(f"{OAI}{verb}/{OAI}resumptionToken")
        if not token:
            return pages
        pages.append(await oai_get(oai, verb=verb, resumptionToken=token))


def content(page: Answer, verb: str) -> tuple[list[bytes], str | None, str | None]:
    """A page's items as sent, and its token's cursor and completeListSize (the token itself
    and the dates differ from one harvest to the next)."""
    listing = page.tree.find(f"{OAI}{verb}")
    assert listing is not None
    items = [etree.tostring(item) for item in listing if item.tag != f"{OAI}resumptionToken"]
    token = listing.find(f"{OAI}resumptionToken")
    if token is None:
        return items, None, None
    return items, token.get("cursor"), token.get("completeListSize")


async def read_ahead_counts(provider: RunningProvider) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(provider.root + "/metrics") as r:
        text = await r.text()
    return {outcome: float(value) for outcome, value in READ_AHEAD.findall(text)}


@pytest.mark.parametrize(
    ("verb", "prefix"),
    [("ListRecords", "iso19139"), ("ListRecords", "oai_dc"), ("ListIdentifiers", "iso19139")],
)
async def test_pages_read_ahead_are_the_pages_read_when_asked(
    db: Pool, database_url: str, verb: str, prefix: str
) -> None:
    identifiers = await factories.load_records(db, OWN, range(430))
    await factories.delete(db, OWN, identifiers[::40])
    async with running_provider(database_url, page_size=100) as provider:
        ahead = await pages_of(provider.oai, verb, metadataPrefix=prefix)
        ahead_counts = await read_ahead_counts(provider)
    async with running_provider(database_url, page_size=100, read_ahead_pages=0) as provider:
        asked = await pages_of(provider.oai, verb, metadataPrefix=prefix)
        asked_counts = await read_ahead_counts(provider)

    assert len(ahead) == 5
    assert [content(page, verb) for page in ahead] == [content(page, verb) for page in asked]
    assert sum(len(content(page, verb)[0]) for page in ahead) == 430
    # every page after the first was read ahead, and none with no pages to hold
    assert ahead_counts == {"used": 4}
    assert asked_counts == {"missed": 4}


async def test_a_record_changed_after_its_page_was_read_ahead_reaches_the_next_harvest(
    db: Pool, database_url: str
) -> None:
    identifiers = await factories.load_records(db, OWN, range(300))
    number = {identifier: n for n, identifier in enumerate(identifiers)}
    async with running_provider(database_url, page_size=100) as provider:
        read_ahead = provider.app.state.provider.lists.read_ahead
        first = await oai_get(provider.oai, verb="ListRecords", metadataPrefix="iso19139")
        for _ in range(500):  # pages 2 and 3 are read while the client holds page 1
            if len(read_ahead) == 2 and not read_ahead.reading():
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("pages 2 and 3 were not read ahead")

        on_first = {h.findtext(f"{OAI}identifier") for h in first.xpath("//oai:header")}
        later = [identifier for identifier in identifiers if identifier not in on_first]
        changed, deleted = later[::50], later[25::50]
        before = await factories.catalogue(db)
        await asyncio.sleep(1.05)  # datestamps are sent to the second: make the change show
        await factories.load_records(db, OWN, [number[i] for i in changed], version=1)
        await factories.delete(db, OWN, deleted)
        after = await factories.catalogue(db)
        assert all(after[i][0] > before[i][0] for i in changed + deleted)

        # the rest of this list shows them as they were when their pages were read
        token = first.tree.findtext(f"{OAI}ListRecords/{OAI}resumptionToken")
        assert token
        rest = await pages_of(provider.oai, "ListRecords", resumptionToken=token)
        seen: dict[str, tuple[str, bool]] = {}
        for page in [first, *rest]:
            for header in page.xpath("//oai:header"):
                stamp = header.findtext(f"{OAI}datestamp")
                seen[header.findtext(f"{OAI}identifier")] = (
                    stamp,
                    header.get("status") == "deleted",
                )
        assert {i: seen[i] for i in changed + deleted} == {i: before[i] for i in changed + deleted}
        assert await read_ahead_counts(provider) == {"used": 2}

        # the next incremental harvest brings what changed since
        newest = max(stamp for stamp, _ in seen.values())
        for page in await pages_of(
            provider.oai, "ListIdentifiers", metadataPrefix="iso19139", **{"from": newest}
        ):
            for header in page.xpath("//oai:header"):
                stamp = header.findtext(f"{OAI}datestamp")
                seen[header.findtext(f"{OAI}identifier")] = (
                    stamp,
                    header.get("status") == "deleted",
                )
        assert seen == after
        assert all(seen[i][1] for i in deleted)
