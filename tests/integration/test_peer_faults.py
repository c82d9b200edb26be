"""RELIABILITY's harvester scenarios (H) through the real harvester and real peers.

H01 and H02: one link's peer is down, or accepts and never answers, while three other links
harvest at the same time. The faulty peer is the real provider behind the tests' fault proxy
(tests/support/faultproxy.py); the other links reach the same provider directly. The faulty link's
run
fails cleanly after its bounded attempts, its high-water mark unmoved; the other links' runs
complete; once the fault is gone, the faulty link's next run completes too.

The others put a relay (a small aiohttp server that passes requests on to the real provider)
between the harvester and the provider, which answers some requests itself: a 503, an expired
token, a connection cut mid-body; or harvest a small peer whose clock and datestamps the test
sets."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.faultproxy import Down, FaultProxy, Timeout, Toxic
from tests.support.faulty_peers import Relay, add_link, high_water_mark, relaying, run
from tests.support.harvest_pair import SOURCE_SET, Pair, content, sink_settings
from tests.support.pg import clone_template, drop_database
from tests.support.servers import RunningProvider, running_provider
from wiscat.harvester.client import OAIClient
from wiscat.harvester.context import HarvestContext
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.dates import format_datestamp
from wiscat.shared.oaipmh.errors import BadResumptionToken

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
        healthy = ["healthy-1", "healthy-2", "healthy-3"]
        for name in healthy:
            await add_link(sink, name, provider.oai)
        proxy.set(toxic)
        before = asyncio.all_tasks()
        async with asyncio.timeout(30):  # 2 attempts of at most 1 s each, and a backoff
            failed, *done = await asyncio.gather(
                run(sink, "faulty"), *(run(sink, name) for name in healthy)
            )
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

        source = await content(db, SOURCE_SET)
        assert len(source) == 150
        for name, report in zip(healthy, done, strict=True):
            assert report.status == "ok", report.error
            assert await content(sink.pool, f"WIS-GISC-{name.upper()}") == source

        proxy.clear()
        again = await run(sink, "faulty")
        assert again.status == "ok", again.error
        assert again.high_water_mark is not None
        assert await content(sink.pool, "WIS-GISC-FAULTY") == source


def patient(ctx: HarvestContext, max_retries: int) -> HarvestContext:
    """``ctx`` with a client that retries ``max_retries`` times, after short backoffs."""
    settings = dataclasses.replace(
        ctx.client.settings, max_retries=max_retries, backoff_base=0.05, backoff_cap=0.1
    )
    return dataclasses.replace(ctx, client=OAIClient(ctx.client.http, settings))


async def rows(pool: Pool) -> dict[str, tuple[object, ...]]:
    """Every stored record's row as written: its datestamp, content and row version (xmin),
    which any write changes, even one of the same values."""
    found = await pool.fetch(
        "select identifier, datestamp, content_hash, deleted, xmin::text as version from records"
    )
    return {r["identifier"]: tuple(r.values())[1:] for r in found}


async def test_h03_two_503s_in_a_harvest_are_waited_out(pair: Pair) -> None:
    """H03: the first ListRecords request and the first request for page 2 are answered 503
    with Retry-After: 1. Each is waited out and asked again (page 2 with the same token); the
    run completes with requests = pages + 2 (and its Identify), every record written once."""
    await factories.load_records(pair.source, SOURCE_SET, range(250))
    ctx = patient(pair.ctx, max_retries=2)
    async with relaying(pair.provider.oai) as relay:

        async def busy(request: web.Request) -> web.Response | None:
            if len(relay.asked) in (2, 4):
                return web.Response(status=503, text="busy", headers={"Retry-After": "1"})
            return None

        relay.answer = busy
        await add_link(ctx, "busy", relay.url)
        report = await run(ctx, "busy")
    assert report.status == "ok", report.error
    assert report.pages == 3
    assert len(relay.asked) == 1 + report.pages + 2
    tokens = relay.tokens()
    assert tokens[:2] == [None, None] and tokens[2] == tokens[3] != tokens[4]
    assert relay.times[2] - relay.times[1] >= 0.9 and relay.times[4] - relay.times[3] >= 0.9
    assert (report.counts["added"], report.counts["updated"]) == (250, 0)
    source = await content(pair.source, SOURCE_SET)
    assert len(source) == 250
    assert await content(ctx.pool, "WIS-GISC-BUSY") == source
    assert await ctx.pool.fetchval("select count(*) from records") == 250


async def test_h06_a_page_cut_mid_body_is_asked_again_with_its_token(pair: Pair) -> None:
    """H06: the answer to page 2 is cut halfway through its body, twice (the connection closed
    short of its Content-Length). Page 2 is asked again with the same token each time, and the
    run completes: every page written once, the catalogue equal to the provider's."""
    await factories.load_records(pair.source, SOURCE_SET, range(250))
    ctx = patient(pair.ctx, max_retries=2)
    cut: list[str] = []
    async with relaying(pair.provider.oai) as relay:

        async def cut_short(request: web.Request) -> web.StreamResponse | None:
            token = request.query.get("resumptionToken")
            if token is None or len(cut) == 2 or (cut and token != cut[0]):
                return None
            cut.append(token)
            body = await relay.forward(request)
            response = web.StreamResponse(
                headers={"Content-Type": "text/xml", "Content-Length": str(len(body))}
            )
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            assert request.transport is not None
            request.transport.close()
            return response

        relay.answer = cut_short
        await add_link(ctx, "cut", relay.url)
        report = await run(ctx, "cut")
    assert report.status == "ok", report.error
    tokens = relay.tokens()
    assert len(cut) == 2 and tokens[1:4] == [cut[0]] * 3
    assert len(tokens) == 5 and report.pages == 3
    assert (report.counts["added"], report.counts["updated"], report.counts["unchanged"]) == (
        250,
        0,
        0,
    )
    pages = await ctx.pool.fetchval("select pages from harvest_runs where id = $1", report.run_id)
    assert pages == 3
    assert await content(ctx.pool, "WIS-GISC-CUT") == await content(pair.source, SOURCE_SET)


async def first_page_again(request: web.Request, relay: Relay) -> web.Response | None:
    """H08: every page asked with a token answered with the list's first page as it was sent,
    whose token is the one just asked with: a paging loop."""
    if request.query.get("verb") == "Identify":
        return None
    if "resumptionToken" not in request.query:
        relay.kept = await relay.forward(request)
    return web.Response(body=relay.kept, content_type="text/xml")


async def control_character(request: web.Request, relay: Relay) -> web.Response | None:
    """H09: page 2 with a vertical tab in a record, a character XML 1.0 does not allow."""
    if "resumptionToken" not in request.query:
        return None
    body = await relay.forward(request)
    broken = body.replace(b"</gco:CharacterString>", b"\x0b</gco:CharacterString>", 1)
    return web.Response(body=broken, content_type="text/xml")


def refusing(status: int) -> Callable[[web.Request, Relay], Awaitable[web.Response | None]]:
    """H05: every list request refused with ``status``."""

    async def answer(request: web.Request, relay: Relay) -> web.Response | None:
        if request.query.get("verb") == "Identify":
            return None
        return web.Response(status=status, text="not for you")

    return answer


TURNS_BAD = {
    "H05 401": (refusing(401), "PeerHTTPError", "HTTP 401 from {url}, answering ListRecords"),
    "H05 403": (refusing(403), "PeerHTTPError", "HTTP 403 from {url}, answering ListRecords"),
    "H08 token loop": (
        first_page_again,
        "RepeatedResumptionToken",
        "{url} sent the resumptionToken {token!r} twice in one list",
    ),
    "H09 control character": (
        control_character,
        "BadResponse",
        "not well-formed XML: PCDATA invalid Char value 11, line {line}, column {column} "
        "(from {url}, resumptionToken {token!r})",
    ),
}


@pytest.mark.parametrize("fault", list(TURNS_BAD))
async def test_h05_h08_h09_a_peer_that_turns_bad_fails_the_run_and_keeps_the_mark(
    pair: Pair, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A link harvested once; then its peer refuses us (H05: 401, 403), loops on a token (H08)
    or sends a page with a control character (H09). The incremental run fails with the
    reason, at once (one request of each, no retry), logged as a warning that names the link,
    the peer and the token; the error counter counts it; the high-water mark stays where the
    first run left it, and nothing of the bad page is stored."""
    caplog.set_level(logging.INFO, logger="wiscat")
    answer, kind, reason = TURNS_BAD[fault]
    await factories.load_records(pair.source, SOURCE_SET, range(150))
    async with relaying(pair.provider.oai) as relay:
        await add_link(pair.ctx, "turns", relay.url)
        first = await run(pair.ctx, "turns")
        assert first.status == "ok", first.error
        before = await rows(pair.sink)
        await factories.load_records(pair.source, SOURCE_SET, range(150, 300))
        asked_before = len(relay.asked)

        async def bad(request: web.Request) -> web.Response | None:
            return await answer(request, relay)

        relay.answer = bad
        report = await run(pair.ctx, "turns")
    assert (report.status, report.error_kind, report.mode) == ("failed", kind, "incremental")
    asked = [q.get("resumptionToken") for q in relay.asked[asked_before:]]
    token = asked[1] if len(asked) > 1 else None
    expected = reason.format(url=relay.url, token=token, line="{line}", column="{column}")
    assert report.error is not None
    if "{line}" in expected:  # where in the page the parser stopped is the parser's business
        head, tail = expected.split("{line}, column {column}")
        assert report.error.startswith(head) and tail in report.error, report.error
    else:
        assert report.error == expected
    if fault.startswith("H05"):
        assert asked == [None]  # no retry
    elif fault.startswith("H08"):
        assert asked == [None, token] and token is not None
    else:  # page 3 may have been asked for ahead, with the token page 2's intact tail names
        assert asked[:2] == [None, token] and token is not None and len(asked) <= 3
    assert await high_water_mark(pair.ctx, "turns") == first.high_water_mark
    errors = pair.ctx.metrics.registry.get_sample_value(
        "wiscat_harvest_errors_total", {"link": "turns", "kind": kind}
    )
    assert errors == 1
    told = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and f"run {report.run_id}: failed" in r.getMessage()
    ]
    assert told == [f"harvest {report.summary()}"]
    assert relay.url in told[0] and "harvest turns incremental" in told[0]
    if fault.startswith("H09"):
        assert f"resumptionToken {token!r}" in told[0]
    # what was stored stays as it was; of the second run, only page 1 is written
    after = await rows(pair.sink)
    assert {i: after[i] for i in before} == before
    assert len(after) - len(before) == report.counts["added"]
    # H08: page 1 and page 1 again (the repeat is found once that page is read: it changes
    # nothing, its rows unchanged)
    assert report.pages == {"H05": 0, "H08": 2, "H09": 1}[fault[:3]]


async def test_h12_the_run_after_an_expired_token_converges_and_rewrites_nothing(
    pair: Pair,
) -> None:
    """H12: an incremental run gets badResumptionToken for page 2 (of 3): it fails, page 1
    kept, the high-water mark where the run before left it. The next run starts from that
    mark (not from the earliest datestamp, not mid-list), ends with the provider's catalogue,
    and leaves the rows of page 1, sent again, as they were: not one written again."""
    await factories.load_records(pair.source, SOURCE_SET, range(150))
    async with relaying(pair.provider.oai) as relay:
        await add_link(pair.ctx, "expiring", relay.url)
        first = await run(pair.ctx, "expiring")
        assert first.status == "ok", first.error
        await factories.load_records(pair.source, SOURCE_SET, range(150, 400))
        expired = render.render_error(
            datetime.now(UTC), relay.url, None, [BadResumptionToken("expired")]
        )

        async def expire(request: web.Request) -> web.Response | None:
            if "resumptionToken" in request.query:
                return web.Response(body=expired, content_type="text/xml")
            return None

        relay.answer = expire
        failed = await run(pair.ctx, "expiring")
        assert (failed.status, failed.error_kind) == ("failed", "badResumptionToken")
        assert failed.pages == 1
        assert await high_water_mark(pair.ctx, "expiring") == first.high_water_mark
        kept = await rows(pair.sink)
        assert len(kept) == 150 + failed.counts["added"]
        relay.answer = None
        asked_before = len(relay.asked)
        again = await run(pair.ctx, "expiring")
    assert again.status == "ok", again.error
    assert again.mode == "incremental" and again.from_ == failed.from_
    # after an Identify (asked again after a failed run), the list from the same mark
    [asked] = [q for q in relay.asked[asked_before:] if "metadataPrefix" in q]
    assert asked["from"] == format_datestamp(failed.from_)  # type: ignore[arg-type]
    # page 1 sent again (and the records at the mark's second, whatever the run before
    # stored): unchanged, none updated; the rest added
    assert again.counts["added"] == 400 - len(kept)
    assert again.counts["unchanged"] >= 100 and again.counts["updated"] == 0
    after = await rows(pair.sink)
    assert {i: after[i] for i in kept} == kept
    assert await content(pair.sink, "WIS-GISC-EXPIRING") == await content(pair.source, SOURCE_SET)
