"""The harvester's /metrics on a real port: per-link gauges come from the database at each
scrape, so they follow the links as they are now."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, run
from tests.support.metrics import assert_process_metrics
from tests.support.metrics import scrape as scrape_all
from tests.support.servers import serving_app
from wiscat.harvester.service import health_app, health_runner
from wiscat.shared.db import links as link_store


async def scrape(root: str) -> dict[tuple[str, str], float]:
    """(sample name, link) -> value of every per-link sample."""
    async with aiohttp.ClientSession() as http, http.get(root + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {
        (sample.name, sample.labels["link"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "link" in sample.labels
    }


async def test_lag_follows_the_links_in_the_database(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(3))
    await add_link(pair, name="kept")
    await add_link(pair, name="removed")
    assert (await run(pair, "kept")).status == "ok"
    assert (await run(pair, "removed")).status == "ok"
    async with serving_app(health_app(pair.ctx)) as root:
        first = await scrape(root)
        for link in ("kept", "removed"):
            assert 0 <= first["wiscat_harvest_lag_seconds", link] < 60
            stamp = first["wiscat_harvest_last_success_timestamp_seconds", link]
            assert abs(stamp - time.time()) < 60
        assert await link_store.remove_link(pair.sink, "removed")
        second = await scrape(root)
    assert ("wiscat_harvest_lag_seconds", "kept") in second
    assert ("wiscat_harvest_lag_seconds", "removed") not in second
    assert ("wiscat_harvest_last_success_timestamp_seconds", "removed") not in second
    # the counters of the work this process did stay: they are history, not state
    assert second["wiscat_harvest_runs_total", "removed"] == 1


async def test_the_health_port_closes_connections_that_send_nothing(pair: Pair) -> None:
    settings = pair.ctx.settings.model_copy(update={"header_timeout_seconds": 0.5})
    runner = health_runner(dataclasses.replace(pair.ctx, settings=settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        silent, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(silent.read(1), 10) == b""
        writer.close()
        # a scrape in time is answered
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as r,
        ):
            assert r.status == 200
    finally:
        await runner.cleanup()


async def test_harvester_exports_process_and_platform_metrics(pair: Pair) -> None:
    async with serving_app(health_app(pair.ctx)) as root:
        assert_process_metrics(await scrape_all(root))


async def test_every_link_exports_its_interval_before_its_first_success(pair: Pair) -> None:
    """One lag rule covers every link: `time() - last success > 3 * interval`, the interval
    being the link's own `--every`; a link that never succeeded still has its interval, its
    enabled flag and the time it was added, so "never harvested" is alertable too."""
    hourly = await add_link(pair, name="hourly")
    await add_link(pair, name="quarterly", every=timedelta(minutes=15))
    await add_link(pair, name="idle", every=timedelta(days=1), enabled=False)
    async with serving_app(health_app(pair.ctx)) as root:
        first = await scrape(root)
        assert {
            link: first["wiscat_link_interval_seconds", link]
            for link in ("hourly", "quarterly", "idle")
        } == {"hourly": 3600, "quarterly": 900, "idle": 86400}
        assert {
            link: first["wiscat_link_enabled", link] for link in ("hourly", "quarterly", "idle")
        } == {"hourly": 1, "quarterly": 1, "idle": 0}
        created = first["wiscat_link_created_timestamp_seconds", "hourly"]
        assert created == hourly.created_at.timestamp()
        assert ("wiscat_harvest_last_success_timestamp_seconds", "hourly") not in first
        # a changed interval and a removed link show at the next scrape
        await link_store.set_enabled(pair.sink, "idle", True)
        assert await link_store.remove_link(pair.sink, "quarterly")
        second = await scrape(root)
    assert second["wiscat_link_enabled", "idle"] == 1
    assert ("wiscat_link_interval_seconds", "quarterly") not in second
    assert ("wiscat_link_enabled", "quarterly") not in second
    assert ("wiscat_link_created_timestamp_seconds", "quarterly") not in second
