"""P17, invariant 2: a write whose transaction commits late is never passed by a list.

Each writer here waits (on a lock another session holds, or asleep, before and after its
first write) while other records are written and listed, so that an incremental harvester's
high-water mark passes the time the late transaction began. A datestamp from the
transaction's start, or a list that passed a transaction still in progress, hid the late
record from every incremental harvest, for ever. The harvester asks what a wiscat harvester
asks of a whole-seconds provider: from = the last datestamp second it saw + 1 s.

WISCAT_LATE_COMMIT_TRIALS sets the randomised trial's count (20 here; `make soak` runs 100;
at most 12 in its variant harvested by a wiscat harvester on change hints alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import aiohttp

from tests.e2e.nodes import NodeFactory
from tests.support import factories
from tests.support.harvest_pair import content, link_to, sink_settings
from tests.support.hint_peers import harvesting
from tests.support.oai_client import OAI, list_all
from tests.support.pg import clone_template, drop_database
from tests.support.servers import running_provider
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, connect, create_pool
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.settings import Settings

SETTLE = 1.0  # the provider's settle window here: whole seconds, from = HWM + 1 s is asked
TRIALS = int(os.environ.get("WISCAT_LATE_COMMIT_TRIALS", "20"))


class Follower:
    """An incremental harvester of one provider: every header it was listed, by identifier."""

    def __init__(self, oai: str, set_spec: str | None = None) -> None:
        self.oai = oai
        self.set_spec = set_spec
        self.copy: dict[str, tuple[str, bool]] = {}
        self.high_water_mark: str | None = None
        self.harvests = 0

    async def harvest(self) -> None:
        params = {"metadataPrefix": "iso19139"}
        if self.set_spec:
            params["set"] = self.set_spec
        if self.high_water_mark:
            seen = datetime.strptime(self.high_water_mark, "%Y-%m-%dT%H:%M:%SZ")
            params["from"] = (seen + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for header in await list_all(self.oai, **params):
            stamp = header.findtext(f"{OAI}datestamp")
            identifier = header.findtext(f"{OAI}identifier")
            assert stamp is not None and identifier is not None
            self.copy[identifier] = (stamp, header.get("status") == "deleted")
            self.high_water_mark = max(self.high_water_mark or stamp, stamp)
        self.harvests += 1

    async def catch_up(self) -> None:
        """Harvest once everything written has left the settle window and its second."""
        await asyncio.sleep(SETTLE + 1.1)
        await self.harvest()


@contextlib.asynccontextmanager
async def holding(database_url: str, identifier: str) -> AsyncIterator[None]:
    """A second session holds record ``identifier``'s row lock until the block ends; a
    writer of that record waits for it, with no transaction id while it waits."""
    conn = await connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute("select 1 from records where identifier = $1 for update", identifier)
            yield
    finally:
        await conn.close()


async def wait_for_a_lock_wait(pool: Pool) -> None:
    for _ in range(3000):  # a loaded machine may take a while to get the writer there
        if await pool.fetchval(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
            "and datname = current_database()"
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the writer never waited on the lock")


async def write_and_follow(
    pool: Pool, set_spec: str, follower: Follower, numbers: range, *, centre: str = "yy"
) -> None:
    """While a late writer waits: write other records (Y) and harvest them, so that the
    follower's high-water mark passes the late transaction's start."""
    for n in numbers:
        await factories.load_records(pool, set_spec, [n], centre=centre)
        await asyncio.sleep(0.5)
        await follower.harvest()


async def assert_followed(pool: Pool, follower: Follower, set_spec: str | None = None) -> None:
    """The follower holds every record as the provider's database does: none missed."""
    stored = await factories.catalogue(pool, set_spec)
    missed = {i: v for i, v in stored.items() if follower.copy.get(i) != v}
    assert not missed, f"missed by every incremental harvest: {missed}"


async def test_p17_an_admin_put_that_waits_on_a_lock_is_listed(make_node: NodeFactory) -> None:
    node = await make_node("LATE")
    pool = await create_pool(node.database_url, max_size=4)
    try:
        late = (await factories.load_records(pool, node.own_set, range(3)))[0]
        async with running_provider(
            node.database_url, gisc_name=node.name, settle_seconds=SETTLE
        ) as provider:
            follower = Follower(provider.oai)
            await follower.catch_up()
            before = follower.copy[late]
            async with aiohttp.ClientSession() as session:
                async with holding(node.database_url, late):
                    put = asyncio.create_task(
                        session.put(
                            f"{provider.root}/admin/records/{late}",
                            data=generate_record(0, version=1),
                            headers={"Authorization": "Bearer test-admin-token"},
                        )
                    )
                    await wait_for_a_lock_wait(pool)
                    await write_and_follow(pool, node.own_set, follower, range(100, 106))
                response = await put
                assert response.status == 200, await response.text()
            await follower.catch_up()
        assert (await factories.catalogue(pool))[late] != before  # the late write was made
        await assert_followed(pool, follower)
    finally:
        await pool.close()


async def test_p17_an_ingest_that_waits_on_a_lock_is_listed(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node("LATE")
    await node.wiscat("migrate")
    pool = await create_pool(node.database_url, max_size=4)
    try:
        late = (await factories.load_records(pool, node.own_set, range(3)))[0]
        (tmp_path / "late.xml").write_bytes(generate_record(0, version=1))
        async with running_provider(
            node.database_url, gisc_name=node.name, settle_seconds=SETTLE
        ) as provider:
            follower = Follower(provider.oai)
            await follower.catch_up()
            before = follower.copy[late]
            async with holding(node.database_url, late):
                ingest = asyncio.create_task(node.wiscat("ingest", str(tmp_path)))
                await wait_for_a_lock_wait(pool)
                await write_and_follow(pool, node.own_set, follower, range(100, 106))
            await ingest
            await follower.catch_up()
        assert (await factories.catalogue(pool))[late] != before  # the late write was made
        await assert_followed(pool, follower)
    finally:
        await pool.close()


async def test_p17_a_harvest_page_that_waits_on_a_lock_is_listed(
    make_node: NodeFactory, db: Pool, database_url: str
) -> None:
    """A relay: node B harvests A while a session holds a row of B; C follows B."""
    source_set = "WIS-GISC-A"
    await factories.load_records(db, source_set, range(3), centre="aa")
    relay = await make_node("B")
    sink = sink_settings(
        relay.database_url,
        gisc_name="B",
        # the page write may wait on the lock for the whole test (its statement timeout
        # is half the harvester's settle window)
        settle_seconds=20,
    )
    async with (
        running_provider(database_url, gisc_name="A") as source,
        harvest_context(sink, relay.database_url) as ctx,
        running_provider(
            relay.database_url, gisc_name="B", settle_seconds=SETTLE
        ) as relay_provider,
    ):
        link = build_link(
            name="a", url=source.oai, remote_set=source_set, into=None, own_set="WIS-GISC-B"
        )
        await store.ensure_set(ctx.pool, link.local_set, link.local_set, "remote")
        await link_store.add_link(ctx.pool, link)

        async def harvest() -> None:
            stored = await link_store.get_link(ctx.pool, "a")
            assert stored is not None
            report = await harvest_link(ctx, stored, window=False)
            assert report.status == "ok", report.error

        await harvest()
        follower = Follower(relay_provider.oai)
        await follower.catch_up()
        late = identifier_for(0, centre="aa")
        before = follower.copy[late]
        await factories.load_records(db, source_set, [0], centre="aa", version=1)
        async with holding(relay.database_url, late):
            run = asyncio.create_task(harvest())
            await wait_for_a_lock_wait(ctx.pool)
            await write_and_follow(ctx.pool, "WIS-GISC-B", follower, range(100, 106))
        await run
        await follower.catch_up()
        assert (await factories.catalogue(ctx.pool))[late] != before  # the late write was made
        await assert_followed(ctx.pool, follower)


async def test_p17_a_transaction_that_waited_before_its_first_write_is_listed(
    db: Pool, database_url: str
) -> None:
    """Begun, then held up (a slow client, a paused process) before its first write: it had
    no transaction id while a list passed its start."""
    own = "WIS-GISC-TEST"
    late = (await factories.load_records(db, own, range(3)))[0]
    async with running_provider(database_url, settle_seconds=SETTLE) as provider:
        follower = Follower(provider.oai)
        await follower.catch_up()
        before = follower.copy[late]
        async with db.acquire() as conn, conn.transaction():
            await conn.fetchval("select count(*) from records")  # begun, nothing written
            await write_and_follow(db, own, follower, range(100, 106))
            record = incoming(parse_record(generate_record(0, version=1)))
            result = await store.upsert_records(conn, own, [record])
            assert result.outcomes == {late: "updated"}
        await follower.catch_up()
    assert (await factories.catalogue(db))[late] != before
    await assert_followed(db, follower)


def late_writers(db: Pool, own: str, trials: int) -> list[asyncio.Task[None]]:
    """Writers that sleep a random 0 to 3 settle windows before their first write and again
    before their commit, and one that writes every 0.1 s until they are done."""
    rng = random.Random(os.environ.get("WISCAT_LATE_COMMIT_SEED", "17"))

    async def late_writer(trial: int) -> None:
        await asyncio.sleep(trial * 0.3)
        before, after = rng.uniform(0, 3 * SETTLE), rng.uniform(0, 3 * SETTLE)
        # a new record, or a newer version of an old one
        number = 1000 + trial if rng.random() < 0.5 else trial
        record = incoming(parse_record(generate_record(number, version=trial + 1)))
        async with db.acquire() as conn, conn.transaction():
            await conn.fetchval("select count(*) from records")  # begun, nothing written
            await asyncio.sleep(before)
            result = await store.upsert_records(conn, own, [record])
            assert set(result.outcomes.values()) <= {"added", "updated"}, result.outcomes
            await asyncio.sleep(after)

    async def busy_writer(late: list[asyncio.Task[None]]) -> None:
        n = 2000
        while not all(w.done() for w in late):
            await factories.load_records(db, own, [n])
            await asyncio.sleep(0.1)
            n += 1

    writers = [asyncio.create_task(late_writer(t)) for t in range(trials)]
    writers.append(asyncio.create_task(busy_writer(list(writers))))
    return writers


async def test_p17_randomised_late_commits_are_never_missed(db: Pool, database_url: str) -> None:
    """Late writers while others write and a harvester harvests every second."""
    own = "WIS-GISC-TEST"
    await factories.load_records(db, own, range(TRIALS))
    async with running_provider(database_url, settle_seconds=SETTLE) as provider:
        follower = Follower(provider.oai)
        writers = late_writers(db, own, TRIALS)
        while not all(w.done() for w in writers):
            await follower.harvest()
            await asyncio.sleep(1.0)
        for w in writers:
            w.result()
        await follower.catch_up()
    assert follower.harvests >= 3  # harvests ran while the late writers waited
    await assert_followed(db, follower)


async def test_p17_randomised_late_commits_are_never_missed_by_hinted_runs(
    db: Pool, database_url: str, template_ready: str
) -> None:
    """The same writers, and a wiscat harvester whose hourly link runs on the provider's change
    hints alone: its runs start while late transactions are open, and the last hint, sent once
    lists show the last change, brings everything."""
    own = "WIS-GISC-TEST"
    trials = min(TRIALS, 12)
    await factories.load_records(db, own, range(trials))
    sink_url = await clone_template(template_ready)
    try:
        async with (
            running_provider(
                database_url, settle_seconds=SETTLE, hints_heartbeat_seconds=0.5
            ) as provider,
            harvest_context(sink_settings(sink_url), sink_url) as ctx,
        ):
            await link_to(ctx, provider.oai, every=timedelta(hours=1), window_slices=0)
            async with harvesting(dataclasses.replace(ctx, settings=fast(ctx.settings))):
                first = "select count(*) from harvest_runs where finished_at is not null"
                while not await ctx.pool.fetchval(first):
                    await asyncio.sleep(0.05)
                writers = late_writers(db, own, trials)
                await asyncio.gather(*writers)
                runs = await ctx.pool.fetchval("select count(*) from harvest_runs")
                # no schedule: only a hint can bring the last writes
                for _ in range(int((SETTLE + 6) / 0.1)):
                    if await content(ctx.pool, own) == await content(db, own):
                        break
                    await asyncio.sleep(0.1)
                assert await ctx.pool.fetchval("select next_run_at > now() + '50 min' from links")
            print(f"{runs} runs while the writers wrote")
            assert runs >= 5, f"{runs} runs: too few hinted runs while the writers wrote"
            source, sink = await content(db, own), await content(ctx.pool, own)
            missed = {i: v for i, v in source.items() if sink.get(i) != v}
            assert not missed, f"missed by every hinted run: {missed}"
            assert sink.keys() == source.keys()
    finally:
        await drop_database(template_ready, sink_url)


def fast(settings: Settings) -> Settings:
    return settings.model_copy(update={"harvest_poll_seconds": 0.5})
