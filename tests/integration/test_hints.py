"""Harvest on a hint (docs/links.md): a real provider behind a real peer server whose stream of
change hints the test drives, and a real harvester (scheduler and subscriptions) on the sink's
database. A hint starts the link's normal run at once, at most one more after a run in flight,
and moves neither the high-water mark nor the schedule."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, link_to
from tests.support.hint_peers import HintPeer, harvesting, hint_peer, now
from wiscat.harvester.context import HarvestContext
from wiscat.shared.db import hints as stream_store
from wiscat.shared.db.pool import Pool

SINK_SET = SOURCE_SET  # a GISC link keeps the set's name


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Wait for ``check``; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if await check():
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout} s")


async def runs(pool: Pool) -> int:
    return int(await pool.fetchval("select count(*) from harvest_runs where mode <> 'window'"))


async def finished_runs(pool: Pool) -> int:
    return int(
        await pool.fetchval(
            "select count(*) from harvest_runs where mode <> 'window' and finished_at is not null"
        )
    )


async def held(pool: Pool, identifier: str) -> bool:
    return bool(
        await pool.fetchval(
            "select count(*) from records where identifier = $1 and not deleted", identifier
        )
    )


def fast(ctx: HarvestContext, **overrides: object) -> HarvestContext:
    settings = ctx.settings.model_copy(update={"harvest_poll_seconds": 0.5, **overrides})
    return dataclasses.replace(ctx, settings=settings)


@pytest.fixture
async def peer(pair: Pair) -> AsyncIterator[HintPeer]:
    await factories.load_records(pair.source, SOURCE_SET, range(3))
    async with hint_peer(pair.provider.oai) as running:
        yield running


async def connected(pair: Pair, peer: HintPeer) -> None:
    """Wait for the link's first run and its stream (and the run that connection started)."""

    async def ready() -> bool:
        stream = await stream_store.stream_of(pair.sink, peer.url)
        if stream is None or stream.connected_since is None or peer.open_streams != 1:
            return False
        pending = await pair.sink.fetchval(
            "select hint_pending or lease_owner is not null from links"
        )
        return not pending and await finished_runs(pair.sink) == await runs(pair.sink) > 0

    await until(ready, 15, "the link's stream connected and its runs done")


async def test_a_hint_starts_the_links_run_within_a_second(pair: Pair, peer: HintPeer) -> None:
    link = await link_to(pair.ctx, peer.url)
    # the scheduler looks for due links every 5 s: only its wake by the hint is fast enough
    async with harvesting(fast(pair.ctx, harvest_poll_seconds=5.0)):
        await connected(pair, peer)
        before = await pair.sink.fetchrow("select next_run_at, high_water_mark from links")
        assert before["next_run_at"] - now() > timedelta(minutes=50)  # hourly: not due
        assert peer.asked[0][1] == [SOURCE_SET]  # the stream asks for the linked set
        [new] = await factories.load_records(pair.source, SOURCE_SET, [10])
        peer.change([SOURCE_SET], now())
        took = await until(lambda: held(pair.sink, new), 5, "the hinted record")
        assert took < 1.5, f"the hint's run stored the record {took:.2f} s after it"
        await until(lambda: given_back(pair.sink), 5, "the hinted run's end")
        after = await pair.sink.fetchval("select next_run_at from links")
        assert after == before["next_run_at"], "a hint moved the link's regular time"
    assert link.name == "test"


async def test_a_hint_for_another_set_runs_nothing(pair: Pair, peer: HintPeer) -> None:
    await link_to(pair.ctx, peer.url)
    async with harvesting(fast(pair.ctx)):
        await connected(pair, peer)
        ran = await runs(pair.sink)
        peer.change(["WIS-GISC-OTHER"], now())
        await asyncio.sleep(1.5)
        assert await runs(pair.sink) == ran
        peer.change(None, now())  # null sets: any set
        await until(lambda: runs_above(pair.sink, ran), 3, "a run for a hint of any set")


async def given_back(pool: Pool) -> bool:
    """Whether every run has ended and given its link back."""
    leased = await pool.fetchval("select count(*) from links where lease_owner is not null")
    return leased == 0 and await finished_runs(pool) == await runs(pool)


async def runs_above(pool: Pool, count: int) -> bool:
    return await runs(pool) > count


async def test_hints_during_a_run_make_exactly_one_more_run(pair: Pair, peer: HintPeer) -> None:
    await link_to(pair.ctx, peer.url)
    async with harvesting(fast(pair.ctx)):
        await connected(pair, peer)
        ran = await runs(pair.sink)
        slow = asyncio.Event()

        async def slow_lists(request: web.Request) -> web.StreamResponse | None:
            if not slow.is_set():
                slow.set()
                await asyncio.sleep(2.0)  # the run is in flight meanwhile
            return None

        peer.lists = slow_lists
        peer.change([SOURCE_SET], now())
        await until(slow.wait, 3, "the hinted run's list request")  # type: ignore[arg-type]
        for _ in range(20):
            peer.change([SOURCE_SET], now())
            await asyncio.sleep(0.05)
        await until(
            lambda: finished_runs_are(pair.sink, ran + 2), 10, "the run and one more after it"
        )
        await asyncio.sleep(2.0)  # nothing more comes
        assert await runs(pair.sink) == ran + 2, "20 hints during a run: exactly one more run"
        pending = await pair.sink.fetchval("select hint_pending from links")
        assert pending is False


async def finished_runs_are(pool: Pool, count: int) -> bool:
    return await finished_runs(pool) == count == await runs(pool)


async def test_a_hint_never_moves_the_high_water_mark(pair: Pair, peer: HintPeer) -> None:
    await link_to(pair.ctx, peer.url)
    async with harvesting(fast(pair.ctx)):
        await connected(pair, peer)
        before = await pair.sink.fetchrow("select high_water_mark, next_run_at from links")
        ran = await runs(pair.sink)
        # a hint of a change far ahead (a peer's clock, a lie): the run finds nothing new
        peer.change([SOURCE_SET], now() + timedelta(days=30))
        await until(lambda: finished_runs_are(pair.sink, ran + 1), 5, "the hinted run")
        await until(lambda: given_back(pair.sink), 5, "the hinted run's end")
        after = await pair.sink.fetchrow("select high_water_mark, next_run_at from links")
        assert after["high_water_mark"] <= now()
        assert after["high_water_mark"] <= before["high_water_mark"] + timedelta(seconds=5)
        assert after["next_run_at"] == before["next_run_at"]
