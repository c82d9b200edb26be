"""D01, H12: the provider process is SIGKILLed while a harvester is in the middle of its list.

A sink harvested a source once (its high-water mark set); the source then gains enough records
for an incremental list of 12 pages, paced by a fault proxy (latency) so that the kill falls
mid-list. The provider (``wiscat provider``, a process) is killed after the harvester
(``wiscat harvest``, a process) has committed three pages. Either the run fails with its reason
stored, the high-water mark unchanged, and the next run, incremental from the old mark, ends
with the sink equal to the source; or, the provider back before the harvester's retry, the run
goes on with the token it had (tokens outlive the process that signed them). Either way: the
sink equal to the source (identifiers, content hashes, deleted flags), 0 duplicate rows, the
mark at the source's newest datestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from tests.e2e.copies import assert_copy_is_the_source
from tests.e2e.nodes import Node
from tests.e2e.test_harvester_killed import WISCAT, content, env_for
from tests.support import factories
from tests.support.faultproxy import FaultProxy, Latency
from tests.support.pg import clone_template, drop_database
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.linkspec import build_link

SOURCE_SET = "WIS-GISC-TEST"
PAGE = 50
HARVESTER = {"WISCAT_HARVEST_PAGE_WORKERS": "0"}
LAST_PAGES = "select pages from harvest_runs order by id desc limit 1"


async def start_harvest(sink_url: str, retries: int = 1) -> asyncio.subprocess.Process:
    """``wiscat harvest src`` as the sink, ``retries`` retries of a request that failed."""
    return await asyncio.create_subprocess_exec(
        WISCAT,
        "harvest",
        "src",
        env=env_for(sink_url) | HARVESTER | {"WISCAT_HARVEST_MAX_RETRIES": str(retries)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def harvest(sink_url: str) -> tuple[int, str]:
    process = await start_harvest(sink_url)
    out, _ = await asyncio.wait_for(process.communicate(), 120)
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


@dataclass
class Setup:
    source: Node
    proxy: FaultProxy
    sink: Pool
    sink_url: str
    ids: list[str]  # the source's records, by number
    mark: datetime  # the sink's high-water mark after its first harvest

    async def kill_provider(self) -> None:
        [provider] = self.source.processes
        provider.send_signal(signal.SIGKILL)
        await provider.wait()
        self.source.processes.clear()

    async def start_provider(self) -> None:
        port = self.source.provider_port
        await self.source.start("provider", f"http://127.0.0.1:{port}/readyz")

    async def assert_sink_is_the_source(self, db: Pool) -> None:
        assert await content(self.sink) == await content(db)
        await assert_copy_is_the_source(self.sink, db)
        link = await link_store.get_link(self.sink, "src")
        newest = await db.fetchval("select max(datestamp) from records")
        assert link is not None and link.high_water_mark == newest.replace(microsecond=0)


@contextlib.asynccontextmanager
async def harvested_once(db: Pool, database_url: str, template_ready: str) -> AsyncIterator[Setup]:
    """A sink that harvested the source's 100 records through a proxy; then the source gains
    600 more (an incremental list of 12 pages), and the proxy holds each chunk 0.1 s."""
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
            ids += await factories.load_records(db, SOURCE_SET, range(100, 700))
            proxy.set(Latency("downstream", 0.1))
            yield Setup(source, proxy, sink, sink_url, ids, link.high_water_mark)
    finally:
        await source.stop()
        await sink.close()
        await drop_database(template_ready, sink_url)


async def test_d01_h12_the_provider_killed_mid_list_then_the_run_resumes_from_the_old_mark(
    db: Pool, database_url: str, template_ready: str
) -> None:
    async with harvested_once(db, database_url, template_ready) as setup:
        sink, ids, proxy = setup.sink, setup.ids, setup.proxy
        process = asyncio.create_task(harvest(setup.sink_url))
        await until_pages(sink, 3)
        await setup.kill_provider()
        code, out = await process
        assert code == 1, out

        [failed] = await link_store.recent_runs(sink, "src", limit=1)
        assert (failed["status"], failed["mode"]) == ("failed", "incremental"), failed
        assert failed["error_kind"] == "PeerUnreachable", failed
        # what follows is the HTTP client's word for a connection the proxy closed
        assert failed["error"].startswith(f"cannot reach {proxy.url}/oai: "), failed
        assert 3 <= failed["pages"] < 12
        link = await link_store.get_link(sink, "src")
        assert link is not None and link.high_water_mark == setup.mark  # the list never completed
        stored = await stamps(sink)
        assert 100 < len(stored) < 700

        # the source moves on while its provider is down: deletions and changes
        await factories.delete(db, SOURCE_SET, ids[:10] + ids[-10:])
        await factories.load_records(db, SOURCE_SET, range(50, 60), version=1)
        await factories.load_records(db, SOURCE_SET, range(650, 660), version=1)
        changed = set(ids[:10] + ids[-10:] + ids[50:60] + ids[650:660])

        await setup.start_provider()
        code, out = await harvest(setup.sink_url)
        assert code == 0, out
        [done, again] = await link_store.recent_runs(sink, "src", limit=2)
        assert (done["status"], done["mode"]) == ("ok", "incremental"), done
        assert done["from_date"] == again["from_date"]  # both from the old mark
        await setup.assert_sink_is_the_source(db)
        # what the failed run stored and the next one brought again, unchanged at the
        # source, was not written again (H12: 0 rows changed)
        after = await stamps(sink)
        assert {i: s for i, s in stored.items() if i not in changed} == {
            i: after[i] for i in stored if i not in changed
        }


async def test_d01_a_provider_restarted_before_the_retry_serves_the_rest_of_the_list(
    db: Pool, database_url: str, template_ready: str
) -> None:
    """The harvester is stopped (SIGSTOP) from before the kill until the provider is back, so
    that its retry meets the new process: the run goes on with the token it had, and ends."""
    async with harvested_once(db, database_url, template_ready) as setup:
        # a retry or two: the connection it had may be found closed once it goes on
        process = await start_harvest(setup.sink_url, retries=3)
        try:
            await until_pages(setup.sink, 3)
            process.send_signal(signal.SIGSTOP)
            await setup.kill_provider()
            await setup.start_provider()
        finally:
            process.send_signal(signal.SIGCONT)
        out, _ = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, out.decode()
        [run, _first] = await link_store.recent_runs(setup.sink, "src")  # one run, not two
        assert (run["status"], run["mode"], run["added"]) == ("ok", "incremental", 600), run
        await setup.assert_sink_is_the_source(db)
