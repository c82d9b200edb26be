"""The real harvester harvests the real provider over loopback: full, then incremental runs with
additions, changes and deletions in between; the catalogues end identical."""

from __future__ import annotations

from shared.db import links as link_store
from tests import factories
from tests.harvest_pair import SOURCE_SET, Pair, add_link, content, run, sink_settings


async def test_full_then_incremental_harvests_end_identical(pair: Pair) -> None:
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

    before = await factories.catalogue(pair.sink)
    third = await run(pair)
    assert third.status == "ok" and third.counts["added"] == third.counts["updated"] == 0
    # re-harvesting unchanged records changes nothing: no churn downstream (invariant 1)
    assert await factories.catalogue(pair.sink) == before

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
