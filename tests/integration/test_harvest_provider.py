"""The real harvester harvests the real provider over loopback: full, then incremental runs with
additions, changes and deletions in between; the catalogues end identical."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from shared.db import links as link_store
from shared.db import records as store
from shared.db.pool import Pool, create_pool
from shared.linkspec import build_link
from shared.settings import Settings
from services.harvester.harvest import HarvestContext, harvest_link
from services.harvester.service import harvest_context
from tests import factories
from tests.pg import clone_template, drop_database
from tests.servers import RunningProvider, running_provider

SOURCE_SET = "WIS-GISC-TEST"


@dataclass
class Pair:
    source: Pool
    provider: RunningProvider
    sink: Pool
    ctx: HarvestContext


def sink_settings(url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "gisc_name": "SINK", "database_url": url, "settle_seconds": 0, "harvest_max_retries": 1,
        "mass_delete_min": 0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


@pytest.fixture
async def pair(db: Pool, database_url: str, template_ready: str) -> AsyncIterator[Pair]:
    sink_url = await clone_template(template_ready)
    try:
        async with running_provider(database_url) as provider, harvest_context(
            sink_settings(sink_url), sink_url
        ) as ctx:
            yield Pair(db, provider, ctx.pool, ctx)
    finally:
        await drop_database(template_ready, sink_url)


async def add_link(pair: Pair, name: str = "test", **kwargs: object) -> link_store.Link:
    new = build_link(
        name=name, url=pair.provider.oai, remote_set=SOURCE_SET, into=None,
        own_set=pair.ctx.settings.own_set, **kwargs,  # type: ignore[arg-type]
    )
    await store.ensure_set(pair.sink, new.local_set, new.local_set, "remote")
    return await link_store.add_link(pair.sink, new)


async def content(pool: Pool, set_spec: str) -> dict[str, tuple[bytes | None, bool]]:
    rows = await pool.fetch(
        "select r.identifier, r.content_hash, m.deleted from set_members m "
        "join records r using (identifier) where m.set_spec = $1",
        set_spec,
    )
    return {r["identifier"]: (None if r["deleted"] else r["content_hash"], r["deleted"]) for r in rows}


async def run(pair: Pair, name: str = "test", **kwargs: object):  # type: ignore[no-untyped-def]
    link = await link_store.get_link(pair.sink, name)
    assert link is not None
    return await harvest_link(pair.ctx, link, window=False, **kwargs)  # type: ignore[arg-type]


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
    kept = await pair.sink.fetchval(
        "select set_specs from records where identifier like '%.3'"
    )
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
