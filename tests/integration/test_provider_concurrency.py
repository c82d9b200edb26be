"""Invariant 2: a harvester that asks from = the greatest datestamp it has seen never misses a
record, while writers keep adding, changing and deleting records during its harvests."""

from __future__ import annotations

import asyncio
import random

from tests.support import factories
from tests.support.oai_client import OAI, list_all
from tests.support.servers import running_provider
from wiscat.shared.db.pool import Pool

OWN = "WIS-GISC-TEST"


async def writer(pool: Pool, seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        action = rng.random()
        numbers = rng.sample(range(400), 15)
        if action < 0.5:
            await factories.load_records(pool, OWN, numbers, version=rng.randrange(5))
        else:
            ids = await factories.load_records(pool, OWN, numbers[:3])
            await factories.delete(pool, OWN, ids)
        await asyncio.sleep(rng.random() * 0.05)


async def test_incremental_harvests_converge_under_concurrent_writes(
    db: Pool, database_url: str
) -> None:
    await factories.load_records(db, OWN, range(200))
    async with running_provider(database_url, settle_seconds=1, page_size=50) as provider:
        copy: dict[str, tuple[str, bool]] = {}
        high_water_mark: str | None = None

        async def harvest_once() -> None:
            nonlocal high_water_mark
            params = {"metadataPrefix": "iso19139"}
            if high_water_mark:
                params["from"] = high_water_mark
            for header in await list_all(provider.oai, **params):
                stamp = header.findtext(f"{OAI}datestamp")
                copy[header.findtext(f"{OAI}identifier")] = (
                    stamp,
                    header.get("status") == "deleted",
                )
                high_water_mark = max(high_water_mark or stamp, stamp)

        writers = [asyncio.create_task(writer(db, seed, 25)) for seed in range(3)]
        harvests = 0
        while not all(w.done() for w in writers):
            await harvest_once()
            harvests += 1
            await asyncio.sleep(0.05)
        for w in writers:
            w.result()
        await asyncio.sleep(2.1)  # past the settle window and the whole second it ends in
        await harvest_once()
        assert harvests > 3, f"only {harvests} harvests ran while the writers wrote"
        catalogue = await factories.catalogue(db)
        differing = {
            identifier: (copy.get(identifier), catalogue.get(identifier))
            for identifier in copy.keys() | catalogue.keys()
            if copy.get(identifier) != catalogue.get(identifier)
        }
        assert not differing, f"(harvested copy, catalogue) differ: {differing}"
