"""Harvest rules beyond the happy path: the GetRecord strategy, a new peer resets the high-water
mark, the rolling window, quarantine, and a broken peer that fails only its own run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from aiohttp import web

from shared.db import links as link_store
from shared.generator import generate_record
from shared.iso19139 import parse_record
from shared.oaipmh import render
from tests import factories
from tests.harvest_pair import SOURCE_SET, Pair, add_link, content, run


async def test_list_identifiers_and_get_record_strategy(pair: Pair) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(120))
    await factories.delete(pair.source, SOURCE_SET, ids[:3])
    await add_link(pair, strategy="ListIdentifiers")
    report = await run(pair)
    assert report.status == "ok", report.summary()
    assert report.counts["added"] == 117 and report.counts["deleted"] == 3
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


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
    from services.harvester.harvest import harvest_link

    report = await harvest_link(pair.ctx, link)  # incremental, then one window slice
    assert report.mode == "incremental"
    window = await pair.sink.fetchrow(
        "select * from harvest_runs where mode = 'window' order by id desc limit 1"
    )
    assert window is not None and window["status"] == "ok"
    assert window["from_date"] is not None and window["until_date"] is not None
    assert await content(pair.sink, SOURCE_SET) == await content(pair.source, SOURCE_SET)


@contextlib.asynccontextmanager
async def serving(body: bytes, content_type: str = "text/xml") -> AsyncIterator[str]:
    """A peer that answers Identify properly and every list request with ``body``."""
    now = datetime.now(UTC)

    async def handler(request: web.Request) -> web.Response:
        if request.query.get("verb") == "Identify":
            url = str(request.url.with_query(None))
            document = (
                render.response_start(now, url, {"verb": "Identify"}, "Identify")
                + render.identify(
                    repository_name="peer",
                    base_url=url,
                    admin_emails=["a@b.c"],
                    earliest_datestamp=now,
                    deleted_record="transient",
                )
                + render.response_end("Identify")
            )
            return web.Response(body=document, content_type="text/xml")
        return web.Response(body=body, content_type=content_type)

    app = web.Application()
    app.router.add_get("/oai", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/oai"
    finally:
        await runner.cleanup()


def list_records_page(pieces: list[bytes]) -> bytes:
    now = datetime.now(UTC)
    return (
        render.response_start(now, "http://peer/oai", {"verb": "ListRecords"}, "ListRecords")
        + b"".join(pieces)
        + render.response_end("ListRecords")
    )


async def test_unusable_records_are_quarantined_and_the_rest_stored(pair: Pair) -> None:
    now = datetime.now(UTC)
    good = [parse_record(generate_record(n, centre="qq")) for n in range(3)]
    pieces = [render.record(r.identifier, now, [SOURCE_SET], False, r.xml) for r in good]
    pieces.append(
        render.record(
            "no-file-id",
            now,
            [],
            False,
            "<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'/>",
        )
    )
    pieces.append(
        render.record("wrong-root", now, [], False, "<x:thing xmlns:x='urn:x'>hello</x:thing>")
    )
    pieces.append(render.record("mismatch", now, [], False, good[0].xml))
    async with serving(list_records_page(pieces)) as url:
        await link_store.add_link(pair.sink, _link("bad-records", url))
        link = await link_store.get_link(pair.sink, "bad-records")
        from services.harvester.harvest import harvest_link

        report = await harvest_link(pair.ctx, link, window=False)  # type: ignore[arg-type]
    assert report.status == "ok", report.summary()
    assert report.counts["added"] == 3 and report.counts["quarantined"] == 3
    rows = await pair.sink.fetch(
        "select identifier, reason, raw, link, page from quarantine order by identifier"
    )
    reasons = {r["identifier"]: r["reason"] for r in rows}
    assert "fileIdentifier" in reasons["no-file-id"]
    assert "MD_Metadata" in reasons["wrong-root"]
    assert "differs from the OAI identifier" in reasons["mismatch"]
    assert all(r["link"] == "bad-records" and r["page"] == 1 for r in rows)
    assert b"hello" in next(r["raw"] for r in rows if r["identifier"] == "wrong-root")


def _link(name: str, url: str) -> link_store.NewLink:
    from shared.linkspec import build_link

    return build_link(
        name=name,
        url=url,
        remote_set=SOURCE_SET,
        into=None,
        own_set="WIS-GISC-SINK",
        window_slices=0,
    )


async def test_a_broken_peer_fails_its_own_run_with_a_stored_reason(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, name="healthy")
    html = b"<!DOCTYPE html><html><body><h1>Service temporarily down</h1></body></html>"
    async with serving(html, content_type="text/html") as url:
        await link_store.add_link(pair.sink, _link("broken", url))
        broken = await link_store.get_link(pair.sink, "broken")
        from services.harvester.harvest import harvest_link

        failed = await harvest_link(pair.ctx, broken, window=False)  # type: ignore[arg-type]
    assert failed.status == "failed" and failed.error_kind == "BadResponse"
    assert "HTML" in (failed.error or "")
    stored = await link_store.get_link(pair.sink, "broken")
    assert stored is not None and "HTML" in (stored.last_error or "")
    assert stored.high_water_mark is None
    healthy = await run(pair, "healthy")
    assert healthy.status == "ok" and healthy.counts["added"] == 5


async def test_credentials_in_a_peer_url_are_never_stored(pair: Pair) -> None:
    from services.harvester.harvest import harvest_link
    from shared.linkspec import build_link

    await link_store.add_link(pair.sink, build_link(
        name="secret", url="http://user:s3cret@127.0.0.1:9/oai", remote_set=SOURCE_SET,
        into=None, own_set="WIS-GISC-SINK", window_slices=0,
    ))
    link = await link_store.get_link(pair.sink, "secret")
    assert link is not None
    report = await harvest_link(pair.ctx, link, window=False)
    assert report.status == "failed"
    stored = await link_store.get_link(pair.sink, "secret")
    runs = await link_store.recent_runs(pair.sink, "secret")
    assert stored is not None and "127.0.0.1:9" in (stored.last_error or "")
    assert "s3cret" not in (stored.last_error or "") and "s3cret" not in str(runs)
