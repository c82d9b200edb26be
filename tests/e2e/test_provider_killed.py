"""D01, H12: the provider process is SIGKILLed while a harvester is in the middle of its list.

A sink harvested a source once (its high-water mark set); the source then gains enough records
for an incremental list of many pages, paced by a fault proxy (latency) so that the kill falls
mid-list. The provider (``wiscat provider``, a process) is killed after the harvester has
committed a few pages: the run fails with its reason stored, the high-water mark unchanged; the
source changes while the provider is down; the provider is started again, and the next run,
incremental from the old mark, ends with the sink equal to the source (identifiers, content
hashes, deleted flags), 0 duplicate rows, and the mark at the source's newest datestamp.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import datetime

from shared.db import links as link_store
from shared.db import records as store
from shared.db.pool import Pool, create_pool
from shared.linkspec import build_link
from tests import factories
from tests.e2e.nodes import Node
from tests.e2e.test_harvester_killed import WISCAT, content, env_for
from tests.faultproxy import FaultProxy, Latency
from tests.pg import clone_template, drop_database

SOURCE_SET = "WIS-GISC-TEST"
PAGE = 50
HARVESTER = {"WISCAT_HARVEST_MAX_RETRIES": "1", "WISCAT_HARVEST_PAGE_WORKERS": "0"}
LAST_PAGES = "select pages from harvest_runs order by id desc limit 1"


async def harvest(sink_url: str) -> tuple[int, str]:
    """``wiscat harvest src`` as the sink, one retry of a request that failed."""
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        "harvest",
        "src",
        env=env_for(sink_url) | HARVESTER,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def stamps(pool: Pool) -> dict[str, datetime]:
    rows = await pool.fetch("select identifier, datestamp from records")
    return {row["identifier"]: row["datestamp"] for row in rows}


async def until_pages(sink: Pool, pages: int) -> None:
    for _ in range(3000):
        if await sink.fetchval(LAST_PAGES) >= pages:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the harvest never got to page {pages}")


async def test_d01_h12_the_provider_killed_mid_list_then_the_run_resumes_from_the_old_mark(
    db: Pool, database_url: str, template_ready: str
) -> None:
    ids = await factories.load_records(db, SOURCE_SET, range(100))
    source = Node("TEST", database_url, extra={"WISCAT_PAGE_SIZE": str(PAGE)})
    sink_url = await clone_template(template_ready)
    sink = await create_pool(sink_url, max_size=2)
    try:
        await source.start("provider", f"http://127.0.0.1:{source.provider_port}/readyz")
        async with FaultProxy("127.0.0.1", source.provider_port) as proxy:
            new = build_link(
                name="src",
                url=f"{proxy.url}/oai",
                remote_set=SOURCE_SET,
                into=None,
                own_set="WIS-GISC-SINK",
            )
            await store.ensure_set(sink, new.local_set, new.local_set, "remote")
            await link_store.add_link(sink, new)
            code, out = await harvest(sink_url)
            assert code == 0, out
            link = await link_store.get_link(sink, "src")
            assert link is not None and link.high_water_mark is not None
            mark = link.high_water_mark

            # 600 more records: an incremental list of 12 pages, each held 0.1 s on its way
            ids += await factories.load_records(db, SOURCE_SET, range(100, 700))
            proxy.set(Latency("downstream", 0.1))
            process = asyncio.create_task(harvest(sink_url))
            await until_pages(sink, 3)
            [provider] = source.processes
            provider.send_signal(signal.SIGKILL)
            await provider.wait()
            source.processes.clear()
            code, out = await asyncio.wait_for(process, 120)
            assert code == 1, out

            [failed] = await link_store.recent_runs(sink, "src", limit=1)
            assert (failed["status"], failed["mode"]) == ("failed", "incremental"), failed
            assert failed["error_kind"] == "PeerUnreachable", failed
            # what follows is the HTTP client's word for a connection the proxy closed
            assert failed["error"].startswith(f"cannot reach {proxy.url}/oai: "), failed
            assert 3 <= failed["pages"] < 12
            link = await link_store.get_link(sink, "src")
            assert link is not None and link.high_water_mark == mark  # the list never completed
            stored = await stamps(sink)
            assert 100 < len(stored) < 700

            # the source moves on while its provider is down: deletions and changes
            await factories.delete(db, SOURCE_SET, ids[:10] + ids[-10:])
            await factories.load_records(db, SOURCE_SET, range(50, 60), version=1)
            await factories.load_records(db, SOURCE_SET, range(650, 660), version=1)
            changed = set(ids[:10] + ids[-10:] + ids[50:60] + ids[650:660])

            await source.start("provider", f"http://127.0.0.1:{source.provider_port}/readyz")
            code, out = await harvest(sink_url)
            assert code == 0, out
            [done, again] = await link_store.recent_runs(sink, "src", limit=2)
            assert (done["status"], done["mode"]) == ("ok", "incremental"), done
            assert done["from_date"] == again["from_date"]  # both from the old mark
            assert await content(sink) == await content(db)
            # what the failed run stored and the next one brought again, unchanged at the
            # source, was not written again (H12: 0 rows changed)
            after = await stamps(sink)
            assert {i: s for i, s in stored.items() if i not in changed} == {
                i: after[i] for i in stored if i not in changed
            }
            duplicates = "select count(*) - count(distinct identifier) from records"
            assert await sink.fetchval(duplicates) == 0
            link = await link_store.get_link(sink, "src")
            newest = await db.fetchval("select max(datestamp) from records")
            assert link is not None and link.high_water_mark == newest.replace(microsecond=0)
    finally:
        await source.stop()
        await sink.close()
        await drop_database(template_ready, sink_url)
