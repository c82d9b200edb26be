"""Harvest rules beyond the happy path: a new peer resets the high-water mark, the rolling
window, registry links reach only global addresses, and a broken peer fails only its own run."""

from __future__ import annotations

import dataclasses
import gzip
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.forward_proxy import forward_proxy
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, content, run
from tests.support.registry_network import CountingResolver, canary, make_network
from tests.support.servers import identify_document, list_records_page, serving, serving_app
from wiscat.harvester.client import OAIClient
from wiscat.shared.db import links as link_store
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.dates import parse_datestamp
from wiscat.shared.oaipmh.errors import (
    BadArgument,
)
from wiscat.shared.proxy import Proxy
from wiscat.shared.registry.safe_fetch import SafeFetcher
from wiscat.shared.registry_node import NodeConfig, RegistryNode

if TYPE_CHECKING:
    from wiscat.harvester.context import RunReport
from tests.support.harvest_pair import new_link


async def test_an_identify_that_is_not_well_formed_gets_no_hint_about_records(
    pair: Pair,
) -> None:
    """A peer whose Identify is unreadable (here gzip bytes sent without Content-Encoding) fails
    the run; the hint that ListIdentifiers + GetRecord gets past one broken record is for a
    broken list page, and was given for this too."""
    from wiscat.harvester.harvest import harvest_link

    async def identify(request: web.Request) -> web.Response:
        return web.Response(body=gzip.compress(identify_document(request, datetime.now(UTC))))

    app = web.Application()
    app.router.add_get("/oai", identify)
    async with serving_app(app) as root:
        await link_store.add_link(pair.sink, new_link("peer", root + "/oai"))
        link = await link_store.get_link(pair.sink, "peer")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
    assert (report.status, report.error_kind) == ("failed", "BadResponse")
    assert (report.error or "").startswith("not well-formed XML"), report.error
    assert (report.error or "").endswith(f"(Identify of {root}/oai)"), report.error


async def test_a_window_from_a_peer_whose_earliest_datestamp_is_year_one(pair: Pair) -> None:
    """A peer may state any earliestDatestamp, 0001-01-01T00:00:00Z included: the window slice
    that starts there is asked for with from=0001-01-01T00:00:00Z (a four-digit year, §3.3.1);
    strftime wrote "1-01-01T00:00:00Z", which the peer refused, failing that slice each time."""
    from wiscat.harvester.harvest import harvest_link

    record = parse_record(generate_record(0, centre="peer"))
    now = datetime.now(UTC)
    asked: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        if request.query.get("verb") == "Identify":
            earliest = datetime(1, 1, 1, tzinfo=UTC)
            return web.Response(body=identify_document(request, earliest), content_type="text/xml")
        asked.append(request.query.get("from"))
        try:
            parse_datestamp(request.query.get("from") or "2000-01-01")
        except BadArgument as exc:
            return web.Response(body=render.render_error(now, "http://peer/oai", None, [exc]))
        piece = render.record(record.identifier, now, [], False, record.xml)
        return web.Response(body=list_records_page([piece]), content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", handler)
    async with serving_app(app) as root:
        spec = dataclasses.replace(new_link("year-one", root + "/oai"), window_slices=2)
        await link_store.add_link(pair.sink, spec)
        for _ in range(2):  # a full run, then an incremental one and the window's first slice
            link = await link_store.get_link(pair.sink, "year-one")
            assert link is not None
            report = await harvest_link(pair.ctx, link)
            assert report.status == "ok", report.summary()
    runs = await link_store.recent_runs(pair.sink, "year-one")
    assert [(r["mode"], r["status"]) for r in runs] == [
        ("window", "ok"),
        ("incremental", "ok"),
        ("full", "ok"),
    ]
    assert asked[-1] == "0001-01-01T00:00:00Z"


async def test_changing_the_peer_resets_the_high_water_mark(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(10))
    await add_link(pair)
    assert (await run(pair)).mode == "full"
    assert (await run(pair)).mode == "incremental"
    moved = await link_store.update_source(pair.sink, "test", pair.provider.oai + "?", SOURCE_SET)
    assert moved is not None and moved.high_water_mark is None
    await link_store.update_source(pair.sink, "test", pair.provider.oai, SOURCE_SET)
    again = await run(pair)
    assert again.mode == "full" and again.status == "ok"
    assert again.counts["unchanged"] == 10 and again.counts["added"] == 0


async def test_rolling_window_restores_a_lost_record(pair: Pair) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(30))
    await add_link(pair, window_slices=1)
    assert (await run(pair)).status == "ok"
    # lose a record behind the harvester's back (an update it never saw)
    await pair.sink.execute("delete from records where identifier = $1", ids[7])
    link = await link_store.get_link(pair.sink, "test")
    assert link is not None
    from wiscat.harvester.harvest import harvest_link

    report = await harvest_link(pair.ctx, link)  # incremental, then one window slice
    assert report.mode == "incremental"
    window = await pair.sink.fetchrow(
        "select * from harvest_runs where mode = 'window' order by id desc limit 1"
    )
    assert window is not None and window["status"] == "ok"
    assert window["from_date"] is not None and window["until_date"] is not None
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


async def test_a_registry_link_reaches_only_global_addresses(pair: Pair) -> None:
    # its URL was chosen by whoever registered it: it must not reach into the node's network
    """S10: a harvest never connects to a registry link's non-global address."""
    from wiscat.harvester.harvest import harvest_link

    good = parse_record(generate_record(1, centre="reg"))
    page = list_records_page(
        [render.record(good.identifier, datetime.now(UTC), [], False, good.xml)]
    )
    asked: list[str] = []

    async def pages(request: web.Request) -> bytes:
        asked.append(request.query.get("verb", ""))
        return page

    async with serving(page, pages=pages) as url:  # on 127.0.0.1
        await link_store.add_link(pair.sink, new_link("registry-0123abcd", url))
        link = await link_store.get_link(pair.sink, "registry-0123abcd")
        assert link is not None
        refused = await harvest_link(pair.ctx, link, window=False)
        assert (refused.status, refused.error_kind) == ("failed", "PeerUnreachable")
        assert "127.0.0.1 is not a global address" in (refused.error or "")
        assert asked == []  # not even connected to, and not retried
        # nor through the node's proxy, which would connect past the address check
        async with forward_proxy() as proxy:
            client = pair.ctx.client
            proxied = OAIClient(
                client.http, dataclasses.replace(client.settings, proxy=Proxy(proxy.url))
            )
            refused = await harvest_link(dataclasses.replace(pair.ctx, client=proxied), link)
        assert "127.0.0.1 is not a global address" in (refused.error or "")
        assert (asked, proxy.asked) == ([], [])
        # a closed network allows it
        settings = pair.ctx.settings.model_copy(update={"allow_private_fetch": True})
        allowed = await harvest_link(dataclasses.replace(pair.ctx, settings=settings), link)
        assert allowed.status == "ok" and allowed.counts["added"] == 1


async def test_s10_a_registered_name_re_pointed_to_loopback_is_never_connected(
    pair: Pair, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """S10: a URL the registry accepted while its name pointed at an allowed address (here
    127.0.0.2 stands in for a public one) is re-pointed to 127.0.0.1 by its name server; the
    harvest of its registry link refuses the connection at its socket (the canary listening
    there sees none), fails as PeerUnreachable saying why, and raises what the suggested
    alerts read: a warning, a failed run and a PeerUnreachable error in the metrics."""
    from wiscat.harvester.harvest import harvest_link

    async def identify(request: web.Request) -> web.Response:
        body = identify_document(request, datetime(2020, 1, 1, tzinfo=UTC))
        return web.Response(body=body, content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", identify)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.2", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://repo.test:{port}/oai"
    resolver = CountingResolver({"repo.test": "127.0.0.2"})
    net = make_network(tmp_path, 1)
    config = NodeConfig("http://127.0.0.1:9", "http://127.0.0.1:9/oai", "WIS-GISC-TEST")
    try:
        async with SafeFetcher(
            address_policy=lambda address: address == "127.0.0.2",
            ports=(port,),
            resolver=resolver,
        ) as fetcher:
            await RegistryNode(pair.source, net.network, net.keys[0], fetcher, config).validate(url)
    finally:
        await runner.cleanup()

    resolver.names["repo.test"] = "127.0.0.1"  # the name is re-pointed after registration
    caplog.set_level(logging.INFO)
    name = "registry-5e1ec7ed"
    async with canary(port) as listening:
        await link_store.add_link(pair.sink, new_link(name, url))
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        settings = pair.ctx.client.settings
        async with OAIClient.session(settings, resolver) as http:
            ctx = dataclasses.replace(pair.ctx, client=OAIClient(http, settings))
            report = await harvest_link(ctx, link, window=False)
        assert listening.connections == 0
    assert resolver.queries.count("repo.test") >= 2
    assert (report.status, report.error_kind) == ("failed", "PeerUnreachable")
    assert (
        "127.0.0.1 is not a global address, and this link came from the registry "
        "(WISCAT_ALLOW_PRIVATE_FETCH allows it)"
    ) in (report.error or "")
    sample = pair.ctx.metrics.registry.get_sample_value
    runs = {"link": name, "mode": report.mode, "status": "failed"}
    assert sample("wiscat_harvest_runs_total", runs) == 1
    assert sample("wiscat_harvest_errors_total", {"link": name, "kind": "PeerUnreachable"}) == 1
    assert any(
        r.levelno == logging.WARNING and name in r.getMessage() and "127.0.0.1" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


async def test_a_broken_peer_fails_its_own_run_with_a_stored_reason(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, name="healthy")
    html = b"<!DOCTYPE html><html><body><h1>Service temporarily down</h1></body></html>"
    async with serving(html, content_type="text/html") as url:
        await link_store.add_link(pair.sink, new_link("broken", url))
        broken = await link_store.get_link(pair.sink, "broken")
        from wiscat.harvester.harvest import harvest_link

        failed = await harvest_link(pair.ctx, broken, window=False)  # type: ignore[arg-type]
    assert failed.status == "failed" and failed.error_kind == "BadResponse"
    assert "HTML" in (failed.error or "")
    stored = await link_store.get_link(pair.sink, "broken")
    assert stored is not None and "HTML" in (stored.last_error or "")
    assert stored.high_water_mark is None
    healthy = await run(pair, "healthy")
    assert healthy.status == "ok" and healthy.counts["added"] == 5


async def test_credentials_in_a_peer_url_are_never_stored(pair: Pair) -> None:
    from wiscat.harvester.harvest import harvest_link
    from wiscat.shared.linkspec import build_link

    await link_store.add_link(
        pair.sink,
        build_link(
            name="secret",
            url="http://user:s3cret@127.0.0.1:9/oai",
            remote_set=SOURCE_SET,
            into=None,
            own_set="WIS-GISC-SINK",
            window_slices=0,
        ),
    )
    link = await link_store.get_link(pair.sink, "secret")
    assert link is not None
    report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "failed"
    stored = await link_store.get_link(pair.sink, "secret")
    runs = await link_store.recent_runs(pair.sink, "secret")
    assert stored is not None and "127.0.0.1:9" in (stored.last_error or "")
    assert "s3cret" not in (stored.last_error or "") and "s3cret" not in str(runs)


async def test_incremental_asks_from_the_high_water_mark_minus_overlap(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, overlap=timedelta(hours=1))
    await run(pair)
    link = await link_store.get_link(pair.sink, "test")
    assert link is not None and link.high_water_mark is not None
    second = await run(pair)
    assert second.mode == "incremental"
    assert second.from_ == link.high_water_mark - timedelta(hours=1)
    stored = await pair.sink.fetchval(
        "select from_date from harvest_runs where id = $1", second.run_id
    )
    assert stored == second.from_


async def test_full_reharvest_when_its_interval_has_passed(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, full_every=timedelta(days=7))
    assert (await run(pair)).mode == "full"
    assert (await run(pair)).mode == "incremental"
    await pair.sink.execute("update links set last_full_at = now() - interval '8 days'")
    full = await run(pair)
    assert full.mode == "full" and full.from_ is None and full.counts["unchanged"] == 5


async def test_an_area_link_changes_the_own_set(pair: Pair) -> None:
    own = pair.ctx.settings.own_set
    await factories.load_records(pair.sink, own, [3], centre="xx")  # the sink's own copy
    await factories.load_records(pair.source, SOURCE_SET, range(5), version=1)
    await add_link(pair, into=own)  # a DCPC of the sink's area, into the own set
    report = await run(pair)
    assert report.status == "ok" and report.counts["updated"] == 1 and report.counts["added"] == 4
    assert report.counts["refused"] == 0
    assert (
        await pair.sink.fetchval(
            "select count(*) from set_members where set_spec = $1 and not deleted", own
        )
        == 5
    )


async def test_a_peer_s_long_error_message_is_stored_cut(pair: Pair) -> None:
    # the reason is the peer's text: stored with the run and the link, shown on the dashboard
    now = datetime.now(UTC)
    answer = render.render_error(now, "http://peer/oai", None, [BadArgument("x" * 100_000)])
    async with serving(answer) as url:
        await link_store.add_link(pair.sink, new_link("verbose", url))
        link = await link_store.get_link(pair.sink, "verbose")
        assert link is not None
        from wiscat.harvester.harvest import harvest_link

        report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "failed" and report.error_kind == "badArgument"
    stored = await link_store.get_link(pair.sink, "verbose")
    assert stored is not None and stored.last_error is not None
    run_error = await pair.sink.fetchval("select error from harvest_runs")
    assert stored.last_error == run_error == "peer answered badArgument: " + "x" * 970 + "..."


@pytest.mark.parametrize("into", [None, "shared01"])
async def test_two_peers_that_disagree_on_a_record_do_not_churn_it(
    pair: Pair, caplog: pytest.LogCaptureFixture, into: str | None
) -> None:
    """Two GISCs list one identifier in their own sets with the same gmd:dateStamp and other
    content (one edited it without a new dateStamp). Each full or window run of either link
    replaced the other's copy with a new datestamp, which every harvester downstream then took
    again. Now the first copy stays, the other link's run refuses it and says why; also where
    both links file it under one set (two GISCs serving a shared set)."""
    from wiscat.harvester.harvest import harvest_link
    from wiscat.shared.linkspec import build_link

    record = generate_record(5, centre="dup")
    edited = record.replace(b"</gmd:MD_Metadata>", b"<gmd:series/></gmd:MD_Metadata>")
    identifier = parse_record(record).identifier

    def page(xml: bytes) -> bytes:
        return list_records_page([render.record(identifier, datetime.now(UTC), [], False, xml)])

    async def runs(name: str, url: str, remote_set: str) -> RunReport:
        await link_store.add_link(
            pair.sink,
            build_link(
                name=name, url=url, remote_set=remote_set, into=into,
                own_set="WIS-GISC-SINK", window_slices=0,
            ),
        )  # fmt: skip
        link = await link_store.get_link(pair.sink, name)
        assert link is not None
        return await harvest_link(pair.ctx, link, full=True, window=False)

    async with serving(page(record)) as a_url, serving(page(edited)) as b_url:
        a = await runs("a", a_url, "WIS-GISC-A")
        first = await pair.sink.fetchrow("select datestamp, xml from records")
        with caplog.at_level(logging.WARNING, logger="wiscat.harvester"):
            b = await runs("b", b_url, "WIS-GISC-B")
        link_a = await link_store.get_link(pair.sink, "a")
        assert link_a is not None
        again = await harvest_link(pair.ctx, link_a, full=True, window=False)
    assert (a.counts["added"], b.counts["refused"], again.counts["unchanged"]) == (1, 1, 1)
    assert b.counts["updated"] == 0 and again.counts["updated"] == 0
    assert await pair.sink.fetchrow("select datestamp, xml from records") == first
    assert "<gmd:series/>" not in first["xml"]
    assert f"harvest b: refused {identifier}: the copy stored from another link" in caplog.text
    run_b = await pair.sink.fetchrow("select refused, updated from harvest_runs where link = 'b'")
    assert dict(run_b) == {"refused": 1, "updated": 0}
