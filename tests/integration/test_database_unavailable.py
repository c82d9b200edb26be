"""Provider and harvester while their database is unreachable or hangs, and once it is back.

The outage is real as they see it: their database URL leads through the tests' fault proxy
(tests/support/faultproxy.py) on loopback, which the test cuts (every connection closed, nothing
listening) and then restores, or freezes (connections open, nothing passed on: a wedged
server, a silent network) and thaws.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.support import factories
from tests.support.faultproxy import Down, FaultProxy, Freeze, postgres_url, proxy_to_postgres
from tests.support.oai_client import oai_raw
from tests.support.servers import running_provider, serving_app
from wiscat.harvester.scheduled_checks import run_due_checks
from wiscat.harvester.scheduler import Scheduler
from wiscat.harvester.service import harvest_context, health_app
from wiscat.shared.db.pool import Pool
from wiscat.shared.settings import Settings


class Relay:
    """The fault proxy to the PostgreSQL server of ``url``, with this file's two outages."""

    def __init__(self, proxy: FaultProxy, url: str) -> None:
        self.proxy = proxy
        self.url = postgres_url(proxy, url)

    def cut(self) -> None:
        """Nothing listens any more, and every open connection is closed."""
        self.proxy.set(Down())

    def freeze(self) -> None:
        """Connections stay open (and new ones are taken), but nothing is passed on."""
        self.proxy.set(Freeze("upstream"))
        self.proxy.set(Freeze("downstream"))

    def restore(self) -> None:
        """The database is back, on the same address."""
        self.proxy.clear()


@contextlib.asynccontextmanager
async def relay_to(url: str) -> AsyncIterator[Relay]:
    async with proxy_to_postgres(url) as proxy:
        yield Relay(proxy, url)


@pytest.mark.parametrize("outage", ["cut", "frozen"])
async def test_a_database_unreachable_or_hanging_gets_503_with_retry_after(
    db: Pool, database_url: str, outage: str
) -> None:
    identifiers = await factories.load_records(db, "WIS-GISC-TEST", range(3))
    async with (
        relay_to(database_url) as relay,
        running_provider(relay.url, database_timeout_seconds=1) as provider,
    ):
        get = f"verb=GetRecord&metadataPrefix=iso19139&identifier={identifiers[0]}"
        assert (await oai_raw(provider.oai, get)).status == 200

        if outage == "cut":
            relay.cut()
        else:
            relay.freeze()
        # frozen, without a deadline each would wait for asyncpg's command timeout (5 minutes)
        async with asyncio.timeout(30):
            for query in ("verb=Identify", "verb=ListRecords&metadataPrefix=iso19139", get):
                answer = await oai_raw(provider.oai, query)
                assert answer.status == 503, answer.body
                assert answer.headers["Retry-After"] == "30"
                assert b"database is unavailable" in answer.body
            ready = await oai_raw(provider.root + "/readyz", "")
            assert ready.status == 503
            if outage == "frozen":
                assert b"the database did not answer within 1 s" in ready.body
            else:  # not the system's bare "[Errno 111] Connect call failed"
                assert b'"reason":"the database cannot be reached (' in ready.body, ready.body
            page = await oai_raw(provider.root + "/", "")  # the dashboard
            assert page.status == 503, page.body
            assert page.headers["Retry-After"] == "30"
            if outage == "cut":  # the dashboard's strip says so (frozen: the deadline may win)
                assert b'<b>database</b> down<span class="sub">the database cannot be' in page.body
            token = {"Authorization": "Bearer test-admin-token"}
            async with (
                aiohttp.ClientSession(headers=token) as session,
                session.get(provider.root + "/admin/links") as links,
            ):
                assert links.status == 503, await links.read()
                assert links.headers["Retry-After"] == "30"
            # the process's own metrics are still served, and say the database is down
            metrics = await oai_raw(provider.root + "/metrics", "")
            assert metrics.status == 200
            assert b"\nwiscat_database_up 0.0\n" in metrics.body
            assert b'wiscat_oai_requests_total{outcome="unavailable",verb="Identify"} 1.0' in (
                metrics.body
            )

        relay.restore()  # the database is back, on the same address
        assert (await oai_raw(provider.oai, get)).status == 200
        listed = await oai_raw(provider.oai, "verb=ListIdentifiers&metadataPrefix=iso19139")
        assert listed.status == 200
        assert all(i.encode() in listed.body for i in identifiers)
        assert (await oai_raw(provider.root + "/", "")).status == 200
        metrics = await oai_raw(provider.root + "/metrics", "")
        assert b"\nwiscat_database_up 1.0\n" in metrics.body


@pytest.mark.parametrize("outage", ["cut", "frozen"])
async def test_the_harvester_serves_its_metrics_without_its_database(
    database_url: str, outage: str
) -> None:
    async with relay_to(database_url) as relay:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, gisc_name="RELAYED", database_url=relay.url, database_timeout_seconds=1
        )
        async with (
            harvest_context(settings, relay.url) as ctx,
            serving_app(health_app(ctx)) as root,
        ):
            assert b"\nwiscat_database_up 1.0\n" in (await oai_raw(root + "/metrics", "")).body
            if outage == "cut":
                relay.cut()
            else:
                relay.freeze()
            async with asyncio.timeout(30):  # without a deadline: five minutes, frozen
                metrics = await oai_raw(root + "/metrics", "")
                assert metrics.status == 200
                assert b"\nwiscat_database_up 0.0\n" in metrics.body
                ready = await oai_raw(root + "/readyz", "")
                assert ready.status == 503
            if outage == "cut":
                assert b'"reason": "the database cannot be reached (' in ready.body, ready.body
            else:
                assert b"the database did not answer within 1 s" in ready.body
            relay.restore()
            assert b"\nwiscat_database_up 1.0\n" in (await oai_raw(root + "/metrics", "")).body
            assert (await oai_raw(root + "/readyz", "")).status == 200


async def test_the_scheduler_tells_an_outage_when_it_begins_and_ends_not_each_poll(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wiscat")
    async with relay_to(database_url) as relay:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, gisc_name="RELAYED", database_url=relay.url, harvest_poll_seconds=0.05
        )
        async with harvest_context(settings, relay.url) as ctx:
            stop = asyncio.Event()
            scheduling = asyncio.create_task(Scheduler(ctx).run(stop))
            checking = asyncio.create_task(run_due_checks(ctx, stop))
            await asyncio.sleep(0.3)
            relay.cut()
            await asyncio.sleep(2.5)  # 50 polls of links, 2 of checks, all failing
            relay.restore()
            for _ in range(200):
                if caplog.text.count("works again") == 2:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(scheduling, checking)
    told = [r.getMessage() for r in caplog.records if "leasing due" in r.getMessage()]
    # one line as each outage began and one as it ended, whatever the number of polls between
    assert sorted(line.split(":")[0].split(",")[0] for line in told) == [
        "leasing due checks failed",
        "leasing due checks works again",
        "leasing due links failed",
        "leasing due links works again",
    ], told
