"""The WIS monitoring document (catalogue counts since 00 UTC and the OAI-PMH status), and the
provider's /metrics as Prometheus reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp

from tests.support import factories
from tests.support.metrics import assert_process_metrics, scrape
from tests.support.servers import running_provider
from wiscat.shared.db.pool import Pool

OWN = "WIS-GISC-TEST"


async def test_monitor_json_counts_todays_changes(db: Pool, database_url: str) -> None:
    identifiers = await factories.load_records(db, OWN, range(10))
    # four records arrived yesterday and have not changed since: not today's changes
    yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0) - timedelta(hours=6)
    for table in ("records", "set_members"):
        await factories.backdate(
            db,
            f"update {table} set datestamp = $2 where identifier = any($1)",
            identifiers[:4],
            yesterday,
        )
    await factories.delete(db, OWN, identifiers[8:10])  # two deleted today
    async with (
        running_provider(database_url) as provider,
        aiohttp.ClientSession() as http,
        http.get(provider.root + "/wis/monitor.json") as response,
    ):
        assert response.status == 200
        document = await response.json()
    assert document["wmo_wis_monitoring"] == "1.1"
    assert document["centre"] == "TEST"
    assert document["gisc_properties"]["oaipmh_url"] == provider.oai
    assert document["gisc_properties"]["monitor_url"] == provider.root + "/wis/monitor.json"
    assert document["metrics"]["metadata_catalogue"] == {
        "number_of_metadata": 8,
        "number_of_changes_insert_modify": 4,  # records 4..7
        "number_of_changes_delete": 2,
    }
    assert document["metrics"]["services"]["oaipmh"] == {"status": True}
    stamp = datetime.strptime(document["timestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - stamp).total_seconds()) < 60


async def test_monitor_json_reports_the_service_down(db: Pool, database_url: str) -> None:
    async with running_provider(database_url) as provider, aiohttp.ClientSession() as http:
        # the schema no longer matches the code (an upgrade half done): OAI-PMH is not served
        await db.execute(
            "delete from schema_migrations "
            "where version = (select max(version) from schema_migrations)"
        )
        async with http.get(provider.root + "/wis/monitor.json") as response:
            assert response.status == 200
            document = await response.json()
    assert document["metrics"]["services"]["oaipmh"] == {"status": False}
    assert set(document["metrics"]["metadata_catalogue"].values()) == {None}
    assert document["remarks"] == "the catalogue database cannot be read"


async def test_provider_exports_process_and_platform_metrics(database_url: str) -> None:
    async with running_provider(database_url) as provider:
        assert_process_metrics(await scrape(provider.root))


async def test_catalogue_total_is_a_metric_of_its_own(db: Pool, database_url: str) -> None:
    """`sum(wiscat_records)` adds the sets: the whole catalogue is not one of them (it was
    `set="*"`, so the sum counted every record twice)."""
    await factories.load_records(db, OWN, range(3))
    other = await factories.load_records(db, "WIS-GISC-OTHER", range(10, 12), kind="remote")
    await factories.delete(db, "WIS-GISC-OTHER", other[1:])
    async with running_provider(database_url) as provider:
        samples = await scrape(provider.root)
    per_set = {
        (s.labels["set"], s.labels["status"]): s.value
        for s in samples
        if s.name == "wiscat_records"
    }
    assert per_set == {
        (OWN, "live"): 3,
        (OWN, "deleted"): 0,
        ("WIS-GISC-OTHER", "live"): 1,
        ("WIS-GISC-OTHER", "deleted"): 1,
    }
    whole = {s.labels["status"]: s.value for s in samples if s.name == "wiscat_catalogue_records"}
    assert whole == {"live": 4, "deleted": 1}
    # each record here is in one set, so the sum over sets is the catalogue, once
    assert sum(v for (_, status), v in per_set.items() if status == "live") == whole["live"]
