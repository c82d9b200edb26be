"""Harvest on a hint (docs/links.md): a real provider behind a real peer server whose stream of
change hints the test drives, and a real harvester (scheduler and subscriptions) on the sink's
database. A hint starts the link's normal run at once, at most one more after a run in flight,
and moves neither the high-water mark nor the schedule."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.e2e.nodes import run_wiscat
from tests.support import factories
from tests.support.buffering_proxy import buffering_proxy
from tests.support.harvest_pair import SOURCE_SET, Pair, content, link_to
from tests.support.hint_peers import HintPeer, harvesting, hint_peer, now, open_stream
from tests.support.servers import running_provider, serving_app
from wiscat.harvester.context import HarvestContext
from wiscat.harvester.service import harvest_context, health_app
from wiscat.shared.db import hints as stream_store
from wiscat.shared.db import links as link_store
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


async def finished_runs_at_least(pool: Pool, count: int) -> bool:
    return await finished_runs(pool) >= count


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


# Streams that fail, each in its own way, and how the stored error names it.


async def refused(request: web.Request, peer: HintPeer) -> web.StreamResponse:
    return web.Response(status=503, text="too many streams")


async def reset_every_2s(request: web.Request, peer: HintPeer) -> web.StreamResponse:
    response = await open_stream(request)
    await response.write(b'id: E1\nevent: catch-up\ndata: {"reason": "test"}\n\n')
    for _ in range(4):  # heartbeats, within the read timeout
        await asyncio.sleep(0.5)
        await response.write(b": heartbeat\n\n")
    assert request.transport is not None
    request.transport.abort()
    return response


async def stalled(request: web.Request, peer: HintPeer) -> web.StreamResponse:
    response = await open_stream(request)
    await idle(request)
    return response


async def cut_mid_event(request: web.Request, peer: HintPeer) -> web.StreamResponse:
    response = await open_stream(request)
    await response.write(b'id: E2\nevent: change\ndata: {"sets": ["WIS-')
    await asyncio.sleep(0.1)
    assert request.transport is not None
    request.transport.abort()
    return response


async def idle(request: web.Request) -> None:
    """Send nothing until the harvester goes (the server's end would wait a minute for it)."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.1)


FAULTS = {
    # fault: (how the stream answers, how long one connection lasts, what the error says)
    "refused": (refused, 0.0, "answered HTTP 503"),
    "reset every 2 s": (reset_every_2s, 2.0, "the stream broke"),
    "stalled after its headers": (stalled, 2.0, "nothing received for 2 s"),
    "cut in the middle of an event": (cut_mid_event, 0.1, "in the middle of an event"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_hints_lost_every_way_records_come_by_the_schedule(
    pair: Pair, peer: HintPeer, fault: str
) -> None:
    stream, lasts, error = FAULTS[fault]
    peer.stream = stream
    await link_to(pair.ctx, peer.url, every=timedelta(seconds=4), window_slices=0)
    async with harvesting(fast(pair.ctx)):
        # a stream that opens and breaks schedules a run on each connection: at least one
        await until(lambda: finished_runs_at_least(pair.sink, 1), 10, "the first run")
        new = await factories.load_records(pair.source, SOURCE_SET, range(10, 15))
        peer.change([SOURCE_SET], now())  # lost: no good stream is open
        for identifier in new:  # the schedule brings them all the same
            await until(lambda i=identifier: held(pair.sink, i), 10, "a record by the schedule")
        await until(lambda: asked_at_least(peer, 5), 20, "five stream requests")
        stored = await stream_store.stream_of(pair.sink, peer.url)
        assert stored is not None and stored.last_error is not None
        assert error in stored.last_error, stored.last_error
        # reconnection waits 0.2 to 1 s (FAST), drawn at random, after each connection's end
        gaps = [b[0] - a[0] - lasts for a, b in zip(peer.asked, peer.asked[1:], strict=False)]
        assert all(0.15 <= gap <= 1.5 for gap in gaps), gaps
        assert max(gaps) - min(gaps) > 0.02, f"not jittered: {gaps}"
        if fault == "reset every 2 s":  # it resumes from the last hint received
            assert peer.asked[-1][2] == "E1"
        # the fault ends: the stream comes back, and a hint is served at once again
        peer.stream = None
        await until(lambda: stream_open(peer), 5, "the stream back")
        await until(lambda: given_back(pair.sink), 5, "the connection's catch-up run")
        [later] = await factories.load_records(pair.source, SOURCE_SET, [20])
        peer.change([SOURCE_SET], now())
        took = await until(lambda: held(pair.sink, later), 5, "a hinted record")
        assert took < 1.5


async def test_hints_lost_to_a_proxy_that_buffers_the_stream(pair: Pair, peer: HintPeer) -> None:
    """The peer behind a reverse proxy that buffers responses: the stream's headers come, its
    events never do, until the proxy is told not to buffer (the fault ends)."""
    async with buffering_proxy(peer.url.removesuffix("/oai")) as proxy:
        peer.changes = proxy.root + "/changes"  # the URL its operator gives: the proxy's
        await link_to(pair.ctx, proxy.root + "/oai", every=timedelta(seconds=4), window_slices=0)
        async with harvesting(fast(pair.ctx)):
            await until(lambda: finished_runs_at_least(pair.sink, 1), 10, "the first run")
            new = await factories.load_records(pair.source, SOURCE_SET, range(10, 15))
            peer.change([SOURCE_SET], now())  # held back in the proxy
            for identifier in new:  # the schedule brings them all the same
                await until(lambda i=identifier: held(pair.sink, i), 10, "a record by the schedule")
            await until(lambda: given_back(pair.sink), 5, "the scheduled run's end")
            source, sink = (
                await content(pair.source, SOURCE_SET),
                await content(pair.sink, SINK_SET),
            )
            assert sink == source, "missing, extra or outdated records after the scheduled run"
            await until(lambda: asked_at_least(peer, 2), 10, "a stream request again")
            stored = await stream_store.stream_of(pair.sink, proxy.root + "/oai")
            assert stored is not None and stored.last_error is not None
            assert "nothing received for 2 s" in stored.last_error, stored.last_error
            # the fault ends; from now on only a hint brings a record in time
            proxy.buffering = False
            await pair.sink.execute(
                "update links set every = '1 hour', next_run_at = now() + '1 hour'"
            )
            await until(lambda: stream_open(peer), 5, "the stream back")
            await until(lambda: given_back(pair.sink), 5, "the connection's catch-up run")
            numbers = itertools.count(20)
            await until(lambda: hint_served(pair, peer, next(numbers)), 30, "a hint served")


async def hint_served(pair: Pair, peer: HintPeer, number: int) -> bool:
    """Whether record ``number``, written now and hinted, is held within 5 s."""
    [record] = await factories.load_records(pair.source, SOURCE_SET, [number])
    peer.change([SOURCE_SET], now())
    try:
        await until(lambda: held(pair.sink, record), 5, "a hinted record")
    except AssertionError:
        return False
    return True


async def asked_at_least(peer: HintPeer, count: int) -> bool:
    return len(peer.asked) >= count


async def stream_open(peer: HintPeer) -> bool:
    return peer.open_streams == 1


async def test_an_event_over_the_cap_closes_the_stream_with_its_reason(
    pair: Pair, peer: HintPeer
) -> None:
    async def oversize(request: web.Request, peer: HintPeer) -> web.StreamResponse:
        response = await open_stream(request)
        await response.write(b"event: change\ndata: " + b"x" * 5000 + b"\n\n")
        await idle(request)
        return response

    peer.stream = oversize
    await link_to(pair.ctx, peer.url)
    async with harvesting(fast(pair.ctx)):
        await until(lambda: asked_at_least(peer, 2), 10, "a second stream request")
        stored = await stream_store.stream_of(pair.sink, peer.url)
        assert stored is not None and stored.last_error is not None
        assert "an event longer than 4096 bytes: the stream was closed" in stored.last_error


async def test_a_peer_without_the_description_is_polled_as_before(
    pair: Pair, peer: HintPeer
) -> None:
    peer.advertise = False
    await link_to(pair.ctx, peer.url, every=timedelta(seconds=2), window_slices=0)
    async with harvesting(fast(pair.ctx)):
        await until(lambda: finished_runs_are(pair.sink, 1), 10, "the first run")
        [new] = await factories.load_records(pair.source, SOURCE_SET, [10])
        await until(lambda: held(pair.sink, new), 10, "the record by the schedule")
        await asyncio.sleep(1.0)
    assert peer.asked == [], "a stream was asked of a peer that advertises none"
    stored = await stream_store.stream_of(pair.sink, peer.url)
    assert stored is not None and stored.url is None  # shown as "not advertised"


async def test_two_workers_hold_one_stream_and_the_other_takes_it_over(
    pair: Pair, peer: HintPeer
) -> None:
    await link_to(pair.ctx, peer.url)
    ctx = fast(pair.ctx)
    async with harvest_context(ctx.settings, ctx.database_url) as opened:
        other = fast(opened)
        async with contextlib.AsyncExitStack() as first:
            await first.enter_async_context(harvesting(ctx, worker="worker-a"))
            await until(lambda: held_by(pair.sink, peer, "worker-a"), 10, "a's stream")
            async with harvesting(other, worker="worker-b"):
                await asyncio.sleep(2.0)  # b tries, and finds the stream held
                assert peer.open_streams == 1 and len(peer.asked) == 1
                await first.aclose()  # a stops: its session, and the stream, go with it
                await until(lambda: held_by(pair.sink, peer, "worker-b"), 10, "b's stream")
                assert peer.open_streams == 1 and len(peer.asked) == 2


async def held_by(pool: Pool, peer: HintPeer, worker: str) -> bool:
    stored = await stream_store.stream_of(pool, peer.url)
    return (
        stored is not None
        and stored.holder == worker
        and stored.connected_since is not None
        and peer.open_streams == 1
    )


async def test_hints_off_for_a_link_and_for_the_node(pair: Pair, peer: HintPeer) -> None:
    await link_to(pair.ctx, peer.url, hints=False)
    async with harvesting(fast(pair.ctx)):
        await until(lambda: finished_runs_are(pair.sink, 1), 10, "the first run")
        await asyncio.sleep(1.5)
        assert peer.asked == [], "a stream for a link with --no-hints"
        # switched on at runtime: the next look at the links subscribes
        await link_store.set_hints(pair.sink, "test", True)
        await until(lambda: stream_open(peer), 15, "the stream of a link switched on")
        await link_store.set_enabled(pair.sink, "test", False)  # disabled: the stream goes
        await until(lambda: stream_closed(peer), 15, "the stream of a disabled link closed")
    await link_store.set_enabled(pair.sink, "test", True)
    asked = len(peer.asked)
    async with harvesting(fast(pair.ctx, hints=False)):  # WISCAT_HINTS=false
        await asyncio.sleep(2.0)
    assert len(peer.asked) == asked, "a stream with WISCAT_HINTS=false"


async def stream_closed(peer: HintPeer) -> bool:
    return peer.open_streams == 0


async def test_the_operator_sees_the_stream_and_its_last_error(pair: Pair, peer: HintPeer) -> None:
    await link_to(pair.ctx, peer.url)
    sink_url = pair.ctx.database_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env |= {"WISCAT_DATABASE_URL": sink_url, "WISCAT_GISC_NAME": "SINK"}
    async with (
        running_provider(sink_url, gisc_name="SINK") as sink_provider,
        serving_app(health_app(pair.ctx)) as harvester,
        aiohttp.ClientSession() as http,
    ):

        async def looked() -> tuple[str, dict[str, Any], str, str]:
            code, out, err = await run_wiscat(env, "link", "show", "test")
            assert code == 0, err
            auth = {"Authorization": "Bearer test-admin-token"}
            async with http.get(sink_provider.root + "/admin/links/test", headers=auth) as got:
                assert got.status == 200
                shown = await got.json()
            async with http.get(sink_provider.root + "/") as page:
                dashboard = await page.text()
            async with http.get(harvester + "/metrics") as scraped:
                metrics = await scraped.text()
            return out, shown["subscription"], dashboard, metrics

        async with harvesting(fast(pair.ctx)):
            await connected(pair, peer)
            peer.change([SOURCE_SET], now())
            await until(lambda: hinted(pair.sink, peer), 5, "the hint recorded")
            out, subscription, dashboard, metrics = await looked()
            assert "hints       connected since" in out and "last hint" in out, out
            assert subscription["state"] == "connected"
            assert subscription["url"] == peer.changes and subscription["last_hint_at"]
            assert "connected since" in dashboard
            assert 'wiscat_link_hint_stream_connected{link="test"} 1.0' in metrics
            assert "wiscat_hint_subscriptions_open 1.0" in metrics
            assert 'wiscat_hint_runs_total{link="test"}' in metrics
            assert 'wiscat_hint_latency_seconds_count{link="test"}' in metrics
            peer.stream = refused
            for queue in list(peer.queues):  # the open stream ends: the peer restarts, say
                queue.put_nowait(b"")
            await until(lambda: refused_seen(pair.sink, peer), 10, "the refusal stored")
            out, subscription, dashboard, metrics = await looked()
        assert "hints       down, last hint" in out and "answered HTTP 503" in out, out
        assert subscription["state"] == "down"
        assert "answered HTTP 503" in subscription["last_error"]
        assert "answered HTTP 503" in dashboard
        assert 'wiscat_link_hint_stream_connected{link="test"} 0.0' in metrics


async def hinted(pool: Pool, peer: HintPeer) -> bool:
    stream = await stream_store.stream_of(pool, peer.url)
    return stream is not None and stream.last_hint_at is not None


async def refused_seen(pool: Pool, peer: HintPeer) -> bool:
    stream = await stream_store.stream_of(pool, peer.url)
    return (
        stream is not None
        and stream.connected_since is None
        and "answered HTTP 503" in (stream.last_error or "")
    )


async def test_link_add_and_set_switch_a_links_hints(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env |= {"WISCAT_DATABASE_URL": database_url, "WISCAT_GISC_NAME": "SINK"}
    url = "http://127.0.0.1:9/oai"
    code, out, err = await run_wiscat(
        env, "link", "add", "tokyo", "--url", url, "--set", SOURCE_SET, "--no-hints"
    )
    assert code == 0, err
    code, out, err = await run_wiscat(env, "link", "show", "tokyo")
    assert "hints       off for this link" in out, out
    code, out, err = await run_wiscat(env, "link", "set", "tokyo", "--hints")
    assert code == 0 and "link tokyo takes its peer's change hints" in out, out + err
    code, out, err = await run_wiscat(env, "link", "list")
    assert "not yet looked at" in out, out  # no harvester has read the peer's Identify
    env["WISCAT_HINTS"] = "false"
    code, out, err = await run_wiscat(env, "link", "show", "tokyo", "--json")
    shown = json.loads(out)
    assert shown["hints"] is True and shown["subscription"] == {"state": "off"}
