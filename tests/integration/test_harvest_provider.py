"""The real harvester harvests the real provider over loopback: full, then incremental runs with
additions, changes and deletions in between; the catalogues end identical."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, content, run, sink_settings
from tests.support.pg import clone_template, drop_database
from tests.support.servers import running_provider
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import Pool


async def test_full_then_incremental_harvests_end_identical(pair: Pair) -> None:
    """H17, H18, D05: incremental runs bring changes and deletions; a run again changes nothing."""
    ids = await factories.load_records(pair.source, SOURCE_SET, range(300))
    await add_link(pair)
    first = await run(pair)
    assert (first.mode, first.status) == ("full", "ok"), first.summary()
    assert first.counts["added"] == 300 and first.pages == 3
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)
    link = await link_store.get_link(pair.sink, "test")
    assert link and link.high_water_mark is not None and link.last_error is None

    await factories.load_records(pair.source, SOURCE_SET, range(300, 320))
    await factories.load_records(pair.source, SOURCE_SET, range(0, 10), version=1)
    await factories.delete(pair.source, SOURCE_SET, ids[50:55])
    second = await run(pair)
    assert (second.mode, second.status) == ("incremental", "ok"), second.summary()
    assert second.counts["added"] == 20
    assert second.counts["updated"] == 10
    assert second.counts["deleted"] == 5
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)

    # every row's datestamp to the microsecond: a restamp in the same second as the last write
    # would look like none in the seconds OAI-PMH shows (the runs take less than a second)
    stamps = (
        "select identifier, datestamp, deleted from records union all "
        "select set_spec || ' ' || identifier, datestamp, deleted from set_members"
    )
    before = sorted(await pair.sink.fetch(stamps))
    # a full run, so that every record is sent again (an incremental one from a whole-seconds
    # provider transfers none)
    third = await run(pair, full=True)
    assert third.status == "ok" and third.counts["added"] == third.counts["updated"] == 0
    assert third.counts["unchanged"] == 315
    # re-harvesting unchanged records changes nothing: no churn downstream (invariant 1)
    assert sorted(await pair.sink.fetch(stamps)) == before

    runs = await link_store.recent_runs(pair.sink, "test")
    assert [r["status"] for r in runs] == ["ok", "ok", "ok"]
    assert runs[-1]["added"] == 300 and runs[-1]["pages"] == 3


async def test_a_gisc_link_never_changes_the_own_set(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(10))
    # the sink holds record 3 in its own set already
    await factories.load_records(pair.sink, "WIS-GISC-SINK", [3], version=2)
    await add_link(pair)
    report = await run(pair)
    assert report.status == "ok"
    assert report.counts["added"] == 9 and report.counts["refused"] == 1
    kept = await pair.sink.fetchval("select set_specs from records where identifier like '%.3'")
    assert kept == ["WIS-GISC-SINK"]


async def test_mass_deletion_stops_the_run_until_allowed(pair: Pair) -> None:
    """H19: a run that would delete too much stops before deleting anything."""
    ids = await factories.load_records(pair.source, SOURCE_SET, range(100))
    await add_link(pair)
    assert (await run(pair)).status == "ok"
    pair.ctx.settings = sink_settings(str(pair.ctx.settings.database_url), mass_delete_min=0)
    await factories.delete(pair.source, SOURCE_SET, ids[:40])
    hwm = (await link_store.get_link(pair.sink, "test")).high_water_mark  # type: ignore[union-attr]
    stopped = await run(pair)
    assert stopped.status == "stopped" and stopped.error_kind == "mass_delete"
    assert "40 of the 100" in (stopped.error or "")
    assert await pair.sink.fetchval("select count(*) from records where deleted") == 0
    link = await link_store.get_link(pair.sink, "test")
    assert link and link.high_water_mark == hwm and link.last_error
    allowed = await run(pair, allow_mass_delete=True)
    assert allowed.status == "ok" and allowed.counts["deleted"] == 40
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


async def identify_requests(root: str) -> float:
    """How many Identify requests the provider has answered, from its /metrics."""
    async with aiohttp.ClientSession() as session, session.get(root + "/metrics") as response:
        text = await response.text()
    for family in text_string_to_metric_families(text):
        if family.name == "wiscat_oai_requests":
            return sum(s.value for s in family.samples if s.labels.get("verb") == "Identify")
    return 0.0


async def test_a_quiet_incremental_run_transfers_nothing_from_a_whole_seconds_provider(
    db: Pool, database_url: str, template_ready: str
) -> None:
    """With a settle window, the provider states in Identify that a list shows a second only
    once all of it is visible; the harvester then asks from = HWM + 1 s, and a run with nothing
    new transfers no record (without the guarantee the records of the HWM's second come again)."""
    await factories.load_records(db, SOURCE_SET, range(30))
    sink_url = await clone_template(template_ready)
    try:
        async with (
            running_provider(database_url, settle_seconds=1) as provider,
            harvest_context(sink_settings(sink_url), sink_url) as ctx,
        ):
            identify = await ctx.client.identify(provider.oai)
            assert identify.whole_seconds
            pair = Pair(db, provider, ctx.pool, ctx)
            link = await add_link(pair)
            await asyncio.sleep(2.1)  # past the settle window and its second
            full = await run(pair)
            assert (full.mode, full.counts["added"]) == ("full", 30)
            stored = await link_store.get_link(ctx.pool, link.name)
            assert stored is not None and stored.high_water_mark is not None

            identify_asked = await identify_requests(provider.root)
            quiet = await run(pair)
            assert quiet.mode == "incremental"
            assert quiet.from_ == stored.high_water_mark + timedelta(seconds=1)
            assert sum(quiet.counts.values()) == 0  # not even the records of the HWM's second
            [recorded] = await link_store.recent_runs(ctx.pool, link.name, 1)
            assert recorded["from_date"] == quiet.from_

            await factories.load_records(db, SOURCE_SET, [30])
            await asyncio.sleep(2.1)
            fresh = await run(pair)
            assert (fresh.counts["added"], fresh.counts["unchanged"]) == (1, 0)
            assert await content(ctx.pool, SOURCE_SET) == await content(db, SOURCE_SET)
            # the incremental runs used the Identify the full run read: one request each
            assert await identify_requests(provider.root) == identify_asked
    finally:
        await drop_database(template_ready, sink_url)
