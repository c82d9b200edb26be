"""Kill the harvester with SIGKILL in the middle of a list, restart it: the final catalogue equals
the source, with no duplicate, no lost deletion, and the right high-water mark (invariant 3)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.e2e.copies import assert_copy_is_the_source
from tests.support import factories
from tests.support.pg import clone_template, drop_database
from tests.support.servers import running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, create_pool

SOURCE_SET = "WIS-GISC-TEST"
WISCAT = str(Path(sys.executable).with_name("wiscat"))


def env_for(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(
        {
            "WISCAT_DATABASE_URL": url,
            "WISCAT_GISC_NAME": "SINK",
            "WISCAT_SETTLE_SECONDS": "0",
            "WISCAT_HARVEST_LEASE_SECONDS": "2",
            "WISCAT_LOG_LEVEL": "INFO",
        }
    )
    return env


async def wiscat(url: str, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        *args,
        env=env_for(url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def content(pool: Pool) -> dict[str, tuple[bytes | None, bool]]:
    rows = await pool.fetch(
        "select identifier, content_hash, deleted from records order by identifier"
    )
    return {r["identifier"]: (r["content_hash"], r["deleted"]) for r in rows}


async def test_sigkill_mid_list_then_restart(
    db: Pool, database_url: str, template_ready: str
) -> None:
    """D01: killed mid-list and restarted, the harvester ends with the source's records once."""
    ids = await factories.load_records(db, SOURCE_SET, range(3000))
    sink_url = await clone_template(template_ready)
    sink = await create_pool(sink_url, max_size=2)
    try:
        async with running_provider(database_url, page_size=100) as provider:
            code, out = await wiscat(
                sink_url, "link", "add", "src", "--url", provider.oai, "--set", SOURCE_SET
            )
            assert code == 0, out
            process = await asyncio.create_subprocess_exec(
                WISCAT,
                "harvest",
                "src",
                env=env_for(sink_url),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            for _ in range(600):
                pages = await sink.fetchval("select max(pages) from harvest_runs") or 0
                if pages >= 5:
                    break
                await asyncio.sleep(0.02)
            process.send_signal(signal.SIGKILL)
            await process.wait()
            link = await link_store.get_link(sink, "src")
            assert link is not None and link.high_water_mark is None  # the list never completed
            partial = await sink.fetchval("select count(*) from records")
            assert 0 < partial < 3000

            # the source moves on meanwhile: deletions and changes must not be lost
            await factories.delete(db, SOURCE_SET, ids[:25] + ids[-25:])
            await factories.load_records(db, SOURCE_SET, range(100, 110), version=1)

            await asyncio.sleep(2.2)  # the dead worker's lease runs out
            code, out = await wiscat(sink_url, "harvest", "src")
            assert code == 0, out
            assert await content(sink) == await content(db)
            runs = await link_store.recent_runs(sink, "src")
            assert [r["status"] for r in runs] == ["ok", "failed"]
            assert runs[1]["error_kind"] == "abandoned"
            link = await link_store.get_link(sink, "src")
            greatest = await db.fetchval("select max(datestamp) from records")
            assert link is not None and link.high_water_mark is not None
            assert link.high_water_mark == greatest.replace(microsecond=0)
            await assert_copy_is_the_source(sink, db)
            assert await store.get_record(sink, ids[0]) is not None
    finally:
        await sink.close()
        await drop_database(template_ready, sink_url)
