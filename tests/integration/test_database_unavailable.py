"""Provider and harvester while their database is unreachable or hangs, and once it is back.

The outage is real as they see it: their database URL leads through a small TCP relay on
loopback, which the test cuts (every connection closed, nothing listening) and then restores,
or freezes (connections open, nothing passed on: a wedged server, a silent network) and thaws.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from services.harvester.scheduled_checks import run_due_checks
from services.harvester.scheduler import Scheduler
from services.harvester.service import harvest_context, health_app
from shared.db.pool import Pool
from shared.settings import Settings
from tests import factories
from tests.oai_client import oai_raw
from tests.servers import running_provider, serving_app

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Relay:
    """A TCP relay on 127.0.0.1 to the PostgreSQL server of ``url``, which can be cut."""

    def __init__(self, url: str) -> None:
        self.target = urlsplit(url)
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.flowing = asyncio.Event()
        self.flowing.set()

    @property
    def url(self) -> str:
        t = self.target
        user = f"{t.username or 'postgres'}:{t.password or ''}"
        return f"postgresql://{user}@127.0.0.1:{self.port}{t.path}?sslmode=disable"

    async def _upstream(self) -> Streams:
        socket_dir = parse_qs(self.target.query).get("host", [""])[0]
        if socket_dir.startswith("/"):  # the embedded server: a Unix socket
            path = f"{socket_dir}/.s.PGSQL.{self.target.port or 5432}"
            return await asyncio.open_unix_connection(path)
        return await asyncio.open_connection(self.target.hostname, self.target.port or 5432)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._upstream()
        self.writers += [writer, up_writer]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    await self.flowing.wait()
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def freeze(self) -> None:
        """Connections stay open (and new ones are taken), but nothing is passed on."""
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()

    async def cut(self) -> None:
        """Nothing listens any more, and every open connection is closed."""
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        self.writers.clear()


@contextlib.asynccontextmanager
async def relay_to(url: str) -> AsyncIterator[Relay]:
    relay = Relay(url)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.cut()


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
            await relay.cut()
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

        if outage == "cut":
            await relay.start()  # the database is back, on the same address
        else:
            relay.thaw()
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
                await relay.cut()
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
                await relay.start()
            else:
                assert b"the database did not answer within 1 s" in ready.body
                relay.thaw()
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
            await relay.cut()
            await asyncio.sleep(2.5)  # 50 polls of links, 2 of checks, all failing
            await relay.start()
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
