"""The history's retention (WISCAT_HISTORY_RETENTION_DAYS): harvest runs, quarantined records and
check reports older than it are dropped, but each link's last run and each check's latest
report, which show its state; the provider purges them on its own, as it does tombstones."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from tests.support import factories
from tests.support.oai_client import OAI, list_all, oai_get
from tests.support.servers import running_provider
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import links as link_store
from wiscat.shared.oaipmh.dates import parse_datestamp

OLD = "now() - interval '100 days'"


async def _history(db: asyncpg.Pool) -> dict[str, int]:
    """Ids of the rows made by _make_history, by what they are."""
    await db.execute("insert into sets (spec, name, kind) values ('S', 'S', 'remote')")
    for name in ("a", "b"):
        await db.execute(
            "insert into links (name, base_url, local_set) values ($1, 'http://p/oai', 'S')", name
        )

    async def run(link: str, finished: str | None) -> int:
        ended = f"{finished}, 'ok'" if finished else "null, 'running'"
        return int(
            await db.fetchval(
                "insert into harvest_runs (link, mode, started_at, finished_at, status) "
                f"values ($1, 'full', {OLD}, {ended}) returning id",
                link,
            )
        )

    ids = {
        "old run": await run("a", OLD),
        "a's last run, old": await run("a", OLD),
        "b's old run": await run("b", OLD),
        "recent run": await run("b", "now()"),
        "still running": await run("b", None),
    }
    await db.execute("update links set last_run_id = $1 where name = 'a'", ids["a's last run, old"])
    for label, received in (("old quarantined", OLD), ("recent quarantined", "now()")):
        ids[label] = await db.fetchval(
            "insert into quarantine (link, identifier, reason, raw, received_at) "
            f"values ('a', $1, 'bad', 'x', {received}) returning id",
            label,
        )
    await db.execute(
        "insert into checks (name, set_spec, source_url, peer_urls) "
        "values ('c', 'S', 'http://s/oai', '{http://p/oai}')"
    )

    async def report(check: str | None, finished: str) -> int:
        return int(
            await db.fetchval(
                "insert into check_reports (check_name, set_spec, source_url, started_at, "
                f"finished_at, outcome, report) values ($1, 'S', 'http://s/oai', {finished}, "
                f"{finished}, 'consistent', $2) returning id",
                check,
                json.dumps([]),
            )
        )

    ids["old report"] = await report("c", "now() - interval '101 days'")
    ids["c's latest report, old"] = await report("c", OLD)
    ids["old report of a removed check"] = await report(None, OLD)
    return ids


async def test_purge_drops_old_history_but_what_shows_the_state(db: asyncpg.Pool) -> None:
    ids = await _history(db)
    assert await link_store.purge_history(db, timedelta(days=90)) == (2, 1)
    assert await check_store.purge_reports(db, timedelta(days=90)) == 2
    kept = {
        "a's last run, old",
        "recent run",
        "still running",
        "recent quarantined",
        "c's latest report, old",
    }
    left = await db.fetch(
        "select 'run' as kind, id from harvest_runs union all "
        "select 'quarantine', id from quarantine union all select 'report', id from check_reports"
    )
    assert len(left) == len(kept)
    by_kind = {(r["kind"], r["id"]) for r in left}
    expected = {
        ("run" if "run" in k else "quarantine" if "quarantined" in k else "report", ids[k])
        for k in kept
    }
    assert by_kind == expected
    # nothing older than the retention period is left, so a second purge finds nothing
    assert await link_store.purge_history(db, timedelta(days=90)) == (0, 0)
    assert await check_store.purge_reports(db, timedelta(days=90)) == 0


async def test_the_provider_purges_the_history_on_its_own(database_url: str) -> None:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    counts = (
        "select (select count(*) from harvest_runs), (select count(*) from quarantine), "
        "(select count(*) from check_reports)"
    )
    try:
        await _history(pool)
        assert tuple(await pool.fetchrow(counts)) == (5, 2, 3)
        # 50 days: the rows of 100 days go, but a link's last run and a check's latest report
        async with running_provider(database_url, history_retention_days=50):
            deadline = time.monotonic() + 30
            while tuple(await pool.fetchrow(counts)) != (3, 1, 1):
                assert time.monotonic() < deadline, await pool.fetchrow(counts)
                await asyncio.sleep(0.1)
    finally:
        await pool.close()


async def test_the_purge_goes_on_after_a_database_outage(database_url: str) -> None:
    # its first failure (an outage, a restart of the server) ended it until the next restart
    from tests.integration.test_database_unavailable import relay_to

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        await _history(pool)
        await pool.execute("delete from harvest_runs where finished_at < now()")
        # purged every second: a retention of 4 s, checked every 1 s (a quarter of it)
        async with (
            relay_to(database_url) as relay,
            running_provider(relay.url, history_retention_days=4 / 86400),
        ):
            relay.cut()
            await asyncio.sleep(2.5)  # two purges fail
            relay.restore()
            await pool.execute(
                "insert into harvest_runs (link, mode, started_at, finished_at, status) "
                f"values ('b', 'full', {OLD}, {OLD}, 'ok')"
            )
            deadline = time.monotonic() + 15
            old_runs = (
                "select count(*) from harvest_runs where finished_at < now() - '1 day'::interval"
            )
            while await pool.fetchval(old_runs):
                assert time.monotonic() < deadline, "the purge stopped at the outage"
                await asyncio.sleep(0.1)
    finally:
        await pool.close()


OWN_SET = "WIS-GISC-TEST"  # the own set of a test provider (gisc_name TEST)


async def _identify_and_datestamps(
    root_oai: str,
) -> tuple[str, datetime, dict[str, tuple[datetime, bool]]]:
    """Identify's deletedRecord and earliestDatestamp, and every header the provider lists
    (without a set and in its own set): identifier -> (datestamp, deleted)."""
    answer = await oai_get(root_oai, verb="Identify")
    policy = answer.tree.findtext(f"{OAI}Identify/{OAI}deletedRecord") or ""
    earliest, _ = parse_datestamp(
        answer.tree.findtext(f"{OAI}Identify/{OAI}earliestDatestamp") or ""
    )
    listed: dict[str, tuple[datetime, bool]] = {}
    for params in ({}, {"set": OWN_SET}):
        for header in await list_all(root_oai, metadataPrefix="iso19139", **params):
            stamp, _ = parse_datestamp(header.findtext(f"{OAI}datestamp") or "")
            deleted = header.get("status") == "deleted"
            identifier = header.findtext(f"{OAI}identifier") or ""
            listed[identifier] = min(listed.get(identifier, (stamp, deleted)), (stamp, deleted))
    return policy, earliest, listed


async def _backdate(pool: asyncpg.Pool, identifier: str, days: int) -> None:
    for table in ("records", "set_members"):
        await factories.backdate(
            pool,
            f"update {table} set datestamp = now() - make_interval(days => $2) "
            "where identifier = $1",
            identifier,
            days,
        )


async def _wait_for_a_purge_round(pool: asyncpg.Pool) -> None:
    """Until the run of 100 days ago is gone: the provider's purge has made a round."""
    deadline = time.monotonic() + 30
    while await pool.fetchval("select count(*) from harvest_runs where link = 'purge-probe'"):
        assert time.monotonic() < deadline, "no purge round"
        await asyncio.sleep(0.1)


async def test_d08_a_persistent_node_keeps_every_tombstone(database_url: str) -> None:
    """D08, persistent: with WISCAT_DELETED_RETENTION_DAYS=0, Identify says `persistent`, and
    after a purge round (the history's) tombstones of 400 days are still served as deleted
    headers; earliestDatestamp is no later than the oldest datestamp listed."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        ids = await factories.load_records(pool, OWN_SET, range(3), centre="pers")
        await factories.delete(pool, OWN_SET, ids[:2])
        await _backdate(pool, ids[0], 400)
        await _backdate(pool, ids[1], 100)
        await pool.execute("insert into sets (spec, name, kind) values ('S', 'S', 'remote')")
        await pool.execute(
            "insert into links (name, base_url, local_set) "
            "values ('purge-probe', 'http://p/oai', 'S')"
        )
        await pool.execute(
            "insert into harvest_runs (link, mode, started_at, finished_at, status) "
            f"values ('purge-probe', 'full', {OLD}, {OLD}, 'ok')"
        )
        async with running_provider(
            database_url, deleted_retention_days=0, history_retention_days=50
        ) as provider:
            await _wait_for_a_purge_round(pool)
            policy, earliest, listed = await _identify_and_datestamps(provider.oai)
        assert await pool.fetchval("select count(*) from records where deleted") == 2
    finally:
        await pool.close()
    assert policy == "persistent"
    assert {i: deleted for i, (_, deleted) in listed.items()} == {
        ids[0]: True,
        ids[1]: True,
        ids[2]: False,
    }
    assert earliest <= min(stamp for stamp, _ in listed.values())
    assert earliest.date() == (datetime.now(UTC) - timedelta(days=400)).date()


async def test_d08_a_transient_node_purges_old_tombstones_and_its_earliest_follows(
    database_url: str,
) -> None:
    """D08, transient with the default 90 days: the tombstone of 100 days is purged, that of
    80 days and a live record of 95 days stay; Identify says `transient` and its
    earliestDatestamp, once the oldest row is gone, is still no later than the oldest datestamp
    listed (the live record's)."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        ids = await factories.load_records(pool, OWN_SET, range(4), centre="tran")
        await factories.delete(pool, OWN_SET, [ids[0], ids[2]])
        for identifier, days in zip(ids, (100, 95, 80, 0), strict=True):
            if days:
                await _backdate(pool, identifier, days)
        async with running_provider(database_url) as provider:
            assert provider.settings.deleted_retention_days == 90
            deadline = time.monotonic() + 30
            while await pool.fetchval("select count(*) from records where identifier = $1", ids[0]):
                assert time.monotonic() < deadline, "the old tombstone was not purged"
                await asyncio.sleep(0.1)
            policy, earliest, listed = await _identify_and_datestamps(provider.oai)
    finally:
        await pool.close()
    assert policy == "transient"
    assert {i: deleted for i, (_, deleted) in listed.items()} == {
        ids[1]: False,
        ids[2]: True,
        ids[3]: False,
    }
    oldest = min(stamp for stamp, _ in listed.values())
    assert earliest <= oldest
    assert oldest.date() == (datetime.now(UTC) - timedelta(days=95)).date()
