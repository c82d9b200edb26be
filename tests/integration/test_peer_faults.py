"""RELIABILITY H01 and H02 through the real harvester: one link's peer is down, or accepts and
never answers, while another link harvests at the same time.

The faulty peer is the real provider behind the tests' fault proxy (tests/faultproxy.py); the
other link reaches the same provider directly. The faulty link's run fails cleanly after its
bounded attempts, its high-water mark unmoved; the other link's run completes; once the fault
is gone, the faulty link's next run completes too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from services.harvester.harvest import HarvestContext, RunReport, harvest_link
from services.harvester.service import harvest_context
from shared.db import links as link_store
from shared.db import records as store
from shared.db.pool import Pool
from shared.linkspec import build_link
from tests import factories
from tests.faultproxy import Down, FaultProxy, Timeout, Toxic
from tests.harvest_pair import SOURCE_SET, content, sink_settings
from tests.pg import clone_template, drop_database
from tests.servers import RunningProvider, running_provider

FAULTS: dict[str, tuple[Toxic, str]] = {
    "H01 peer down (connection refused)": (Down(), "PeerUnreachable"),
    "H02 peer accepts and never answers": (Timeout("downstream"), "PeerTimeout"),
}


@pytest.fixture
async def sink(template_ready: str) -> AsyncIterator[HarvestContext]:
    """A harvester whose peers have 1 s to answer, and one retry."""
    url = await clone_template(template_ready)
    try:
        settings = sink_settings(url, harvest_timeout_seconds=1, harvest_max_retries=1)
        async with harvest_context(settings, url) as ctx:
            yield ctx
    finally:
        await drop_database(template_ready, url)


async def add_link(ctx: HarvestContext, name: str, url: str) -> None:
    new = build_link(
        name=name,
        url=url,
        remote_set=SOURCE_SET,
        into=f"WIS-GISC-{name.upper()}",
        own_set=ctx.settings.own_set,
    )
    await store.ensure_set(ctx.pool, new.local_set, new.local_set, "remote")
    await link_store.add_link(ctx.pool, new)


async def run(ctx: HarvestContext, name: str) -> RunReport:
    link = await link_store.get_link(ctx.pool, name)
    assert link is not None
    return await harvest_link(ctx, link, window=False)


async def no_task_left(before: set[asyncio.Task[object]]) -> None:
    """H02: no task the runs started is left; the proxy's and the provider's own end as the
    harvester's connections close, maybe a moment after the runs."""
    for _ in range(500):
        left = asyncio.all_tasks() - before
        if not left:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"tasks left 5 s after the runs: {left}")


def provider_port(provider: RunningProvider) -> int:
    port = urlsplit(provider.root).port
    assert port is not None
    return port


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_faulty_peer_fails_its_run_cleanly_and_leaves_other_links_alone(
    db: Pool,
    database_url: str,
    sink: HarvestContext,
    fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wiscat")
    toxic, kind = FAULTS[fault]
    await factories.load_records(db, SOURCE_SET, range(150))
    async with (
        running_provider(database_url) as provider,
        FaultProxy("127.0.0.1", provider_port(provider)) as proxy,
    ):
        await add_link(sink, "faulty", proxy.url + "/oai")
        await add_link(sink, "healthy", provider.oai)
        proxy.set(toxic)
        before = asyncio.all_tasks()
        async with asyncio.timeout(30):  # 2 attempts of at most 1 s each, and a backoff
            failed, done = await asyncio.gather(run(sink, "faulty"), run(sink, "healthy"))
        await no_task_left(before)

        assert (failed.status, failed.error_kind) == ("failed", kind), failed.error
        target = f"{proxy.url}/oai"
        if kind == "PeerTimeout":
            assert failed.error == f"no answer from {target} in time (after 2 attempts)"
            assert proxy.connections == 2  # the first attempt and one retry, no more
        else:  # refused: the proxy sees no connection, the log counts the attempts
            port = proxy.port
            assert failed.error == (
                f"cannot reach {target}: Cannot connect to host 127.0.0.1:{port} ssl:default "
                f"[Connect call failed ('127.0.0.1', {port})]"
            )
            assert proxy.connections == 0
        retries = [
            r.getMessage() for r in caplog.records if f"from {target} (attempt" in r.getMessage()
        ]
        assert len(retries) == 1 and "(attempt 1 of 2): retrying in" in retries[0], retries
        faulty = await link_store.get_link(sink.pool, "faulty")
        assert faulty is not None
        assert (faulty.high_water_mark, faulty.last_error) == (None, failed.error)
        assert await content(sink.pool, "WIS-GISC-FAULTY") == {}

        assert done.status == "ok", done.error
        source = await content(db, SOURCE_SET)
        assert len(source) == 150
        assert await content(sink.pool, "WIS-GISC-HEALTHY") == source

        proxy.clear()
        again = await run(sink, "faulty")
        assert again.status == "ok", again.error
        assert again.high_water_mark is not None
        assert await content(sink.pool, "WIS-GISC-FAULTY") == source
