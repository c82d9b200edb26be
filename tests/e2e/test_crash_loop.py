"""D01: SIGKILL the harvester at random moments of a full harvest, restart it, again and again.

Each trial harvests a source of 1,000 records (10 pages) into a fresh sink with `wiscat harvest`
processes, killed at a random moment (fetching, parsing, writing a page, completing the list)
one to three times, the source changing between kills; the last process runs to its end. Then
the sink holds exactly the source's records (identifiers, content, deleted flags), no duplicate
row, and a high-water mark no later than the newest datestamp the source had committed.

WISCAT_CRASH_TRIALS sets the number of trials (10 here; `make soak` runs 50).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal

from tests import factories
from tests.e2e.test_harvester_killed import WISCAT, content, env_for, wiscat
from tests.pg import clone_template, drop_database
from tests.servers import running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.linkspec import build_link

SOURCE_SET = "WIS-GISC-TEST"
TRIALS = int(os.environ.get("WISCAT_CRASH_TRIALS", "10"))
RECORDS = 1000
LEASE = 1.0  # the killed process's lease runs out this soon (env_for sets 2 s: overridden)


async def killed_after(sink_url: str, seconds: float) -> bool:
    """Start `wiscat harvest src`, SIGKILL it after ``seconds``; whether it had ended first."""
    env = env_for(sink_url) | {"WISCAT_HARVEST_LEASE_SECONDS": str(LEASE)}
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        "harvest",
        "src",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await asyncio.wait_for(process.wait(), seconds)
        return True
    except TimeoutError:
        process.send_signal(signal.SIGKILL)
        await process.wait()
        return False


async def trial(source: Pool, ids: list[str], oai: str, template: str, rng: random.Random) -> None:
    sink_url = await clone_template(template)
    sink = await create_pool(sink_url, max_size=2)
    try:
        new = build_link(
            name="src", url=oai, remote_set=SOURCE_SET, into=None, own_set="WIS-GISC-SINK"
        )
        await store.ensure_set(sink, new.local_set, new.local_set, "remote")
        await link_store.add_link(sink, new)
        for _ in range(rng.randint(1, 3)):
            # a process takes about a second to start: kill it from its start-up to its end
            if await killed_after(sink_url, rng.uniform(0.3, 3.0)):
                break
            link = await link_store.get_link(sink, "src")
            assert link is not None
            newest = await source.fetchval("select max(datestamp) from records")
            mark = link.high_water_mark
            assert mark is None or mark <= newest, "a high-water mark ahead of the data"
            # the source moves on between kills: a change and a deletion
            n = rng.randrange(RECORDS)
            await factories.load_records(source, SOURCE_SET, [n], version=rng.randint(1, 99))
            await factories.delete(source, SOURCE_SET, [ids[rng.randrange(RECORDS)]])
            await asyncio.sleep(LEASE + 0.2)  # the dead process's lease runs out
        code, out = await wiscat(sink_url, "harvest", "src")
        assert code == 0, out
        assert await content(sink) == await content(source)
        duplicates = "select count(*) - count(distinct identifier) from records"
        assert await sink.fetchval(duplicates) == 0
        link = await link_store.get_link(sink, "src")
        newest = await source.fetchval("select max(datestamp) from records")
        assert link is not None and link.high_water_mark is not None
        assert link.high_water_mark <= newest
    finally:
        await sink.close()
        await drop_database(template, sink_url)


async def test_d01_harvester_killed_at_random_moments_ends_with_the_source(
    db: Pool, database_url: str, template_ready: str
) -> None:
    ids = await factories.load_records(db, SOURCE_SET, range(RECORDS))
    rng = random.Random(os.environ.get("WISCAT_CRASH_SEED", "1"))
    async with running_provider(database_url, page_size=100) as provider:
        for _ in range(TRIALS):
            await trial(db, ids, provider.oai, template_ready, rng)
