"""Hostile XML from peers, end to end (RELIABILITY X01 to X04): a bomb page fails its own run
and nothing else, and its record is quarantined alone once the link lists by identifier; the
registry refuses an Identify that carries an external entity, and nothing of its target
reaches a response, the log or the database. Real peers and providers on loopback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.integration.peak_memory import peak_growth
from tests.support import factories
from tests.support.canary import canary
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, run
from tests.support.registry_network import make_network, node_overrides, post_url, urls_of
from tests.support.servers import identify_document, running_provider, serving_app
from wiscat.harvester.harvest import harvest_link
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.oaipmh import render
from wiscat.shared.registry_node import NOT_IDENTIFY

LAUGHS = b'<!ENTITY lol "lol">' + b"".join(
    b'<!ENTITY lol%d "%s">' % (n, (b"&lol%s;" % (b"" if n == 1 else b"%d" % (n - 1))) * 10)
    for n in range(1, 10)
)
BOMBS: dict[str, tuple[bytes, bytes]] = {
    # (the DOCTYPE's declarations, the reference the bomb record's title holds)
    "billion-laughs": (LAUGHS, b"&lol9;"),
    "quadratic-blowup": (b'<!ENTITY a "' + b"a" * 100_000 + b'">', b"&a;" * 10_000),
    # X06: harmless, and refused all the same (README "Harvest peers": no lenient mode)
    "harmless-internal-entity": (b'<!ENTITY x "X">', b"&x;"),
}


def _bomb_peer(
    declarations: bytes, reference: bytes
) -> tuple[web.Application, list[str], Callable[[], list[str]]]:
    """A peer of three records, the middle one a bomb: its ListRecords page and its GetRecord
    answer declare the entities (a DOCTYPE); its Identify and ListIdentifiers are clean."""
    now = datetime.now(UTC) - timedelta(minutes=5)
    records = [parse_record(generate_record(n, centre="bomb")) for n in range(3)]
    ids = [r.identifier for r in records]
    asked: list[str] = []

    def document(verb: str, query: dict[str, str], inner: bytes, hostile: bool) -> bytes:
        body = render.response_start(now, "http://peer/oai", query, verb) + inner
        body += render.response_end(verb)
        if not hostile:
            return body
        head, rest = body.split(b"?>", 1)
        return head + b"?>\n<!DOCTYPE OAI-PMH [" + declarations + b"]>\n" + rest.lstrip()

    def xml_of(record_index: int) -> bytes:
        xml = records[record_index].xml.encode()
        if record_index == 1:
            xml = xml.replace(b"</gco:CharacterString>", reference + b"</gco:CharacterString>", 1)
        return xml

    async def handler(request: web.Request) -> web.Response:
        verb = request.query.get("verb", "")
        asked.append(verb)
        query = dict(request.query)
        if verb == "Identify":
            body = identify_document(request, now - timedelta(days=1))
        elif verb == "ListRecords":
            inner = b"".join(render.record(i, now, [], False, xml_of(n)) for n, i in enumerate(ids))
            body = document(verb, query, inner, hostile=True)
        elif verb == "ListIdentifiers":
            inner = b"".join(render.header(i, now, [], False) for i in ids)
            body = document(verb, query, inner, hostile=False)
        else:
            n = ids.index(request.query["identifier"])
            inner = render.get_record(ids[n], now, [], False, xml_of(n))
            body = document(verb, query, inner, hostile=n == 1)
        return web.Response(body=body, content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", handler)
    return app, ids, lambda: asked


@pytest.mark.parametrize("bomb", sorted(BOMBS))
async def test_x01_x02_x06_a_bomb_page_fails_its_run_alone_and_its_record_is_quarantined_alone(
    pair: Pair, bomb: str, caplog: pytest.LogCaptureFixture
) -> None:
    """X01, X02, X06: a peer's ListRecords page is a billion-laughs or quadratic-blowup bomb
    (or declares a harmless internal entity, X06, which wiscat refuses alike). Its run fails
    once (a peer's answer, not retried), saying DOCTYPE and echoing nothing of the bomb, in one
    warning line naming the link, the peer and the reason; its high-water mark stays where it
    was, nothing of it is stored, and a link to a healthy peer harvested at the same time
    stores all its records; the harvester's peak memory (this process and its page workers,
    each peak reset first) grows < 50 MiB. With the bomb still there, the link listing by
    identifier (H20's fallback) stores the two other records and quarantines the bomb's alone,
    and the list completes."""
    caplog.set_level(logging.INFO)
    await factories.load_records(pair.source, SOURCE_SET, range(5))
    await add_link(pair, name="healthy")
    app, ids, asked = _bomb_peer(*BOMBS[bomb])
    async with serving_app(app) as root:
        new = build_link(
            name="bomb",
            url=root + "/oai",
            remote_set=None,
            into="WIS-GISC-BOMB",
            own_set=pair.ctx.settings.own_set,
            window_slices=0,
        )
        await link_store.add_link(pair.sink, new)
        mark = datetime(2024, 1, 1, tzinfo=UTC)
        await pair.sink.execute("update links set high_water_mark = $1 where name = 'bomb'", mark)
        link = await link_store.get_link(pair.sink, "bomb")
        assert link is not None
        # this process and its page workers, their peaks reset: what ran before cannot hide it
        await pair.ctx.pages.warm()
        with peak_growth(pair.ctx.pages.worker_pids()) as grown:
            failed, healthy = await asyncio.gather(
                harvest_link(pair.ctx, link, window=False), run(pair, "healthy")
            )
        assert grown.kib < 50 * 1024, f"peak memory grew by {grown.kib} KiB"
        assert (failed.status, failed.error_kind) == ("failed", "BadResponse")
        assert "DOCTYPE" in (failed.error or "")
        assert "lollol" not in (failed.error or "") and "aaaa" not in (failed.error or "")
        assert asked().count("ListRecords") == 1
        stored = await link_store.get_link(pair.sink, "bomb")
        assert stored is not None and stored.high_water_mark == mark
        assert (
            await pair.sink.fetchval(
                "select count(*) from set_members where set_spec = 'WIS-GISC-BOMB'"
            )
            == 0
        )
        assert (healthy.status, healthy.counts["added"]) == ("ok", 5)
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.WARNING and "bomb" in r.getMessage()
        ]
        assert len(warnings) == 1, warnings
        # one line: the link, the run, the peer and the reason (the run's id is the database's)
        assert warnings[0].startswith("harvest bomb full run ")
        assert warnings[0].endswith(
            ": failed; pages 0; BadResponse: the response carries a DOCTYPE, which is refused "
            f"(from {root}/oai)"
        )

        link = await link_store.set_strategy(pair.sink, "bomb", "ListIdentifiers")
        assert link is not None
        report = await harvest_link(pair.ctx, link, window=False)
        assert report.status == "ok", report.summary()
        assert (report.counts["added"], report.counts["quarantined"]) == (2, 1)
    rows = await pair.sink.fetch("select identifier, reason from quarantine")
    assert [r["identifier"] for r in rows] == [ids[1]]
    assert "DOCTYPE" in rows[0]["reason"]
    members = await pair.sink.fetch(
        "select identifier from set_members where set_spec = 'WIS-GISC-BOMB'"
    )
    assert sorted(r["identifier"] for r in members) == sorted([ids[0], ids[2]])
    stored = await link_store.get_link(pair.sink, "bomb")
    assert stored is not None and stored.high_water_mark is not None
    assert stored.high_water_mark > mark


async def test_x03_x04_the_registry_refuses_an_identify_carrying_an_external_entity(
    tmp_path: Path, database_url: str, db: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """X03, X04: a URL submitted to the registry whose Identify declares an external entity
    naming a canary file, or an external DTD or parameter entity naming an HTTP canary (also
    behind 70 KB of prolog, past the bytes looked at before parsing): each is refused (400)
    for its DOCTYPE (said in the answer, or, behind the prolog, in the log); the canary's
    text is in no answer, no log line and no table; the HTTP canary counts 0 connections;
    nothing enters the registry."""
    caplog.set_level(logging.DEBUG)
    secret = tmp_path / "canary.txt"
    secret.write_text("CANARY-7f3a9e")
    net = make_network(tmp_path, 1)
    with canary() as listening:
        doctypes = [
            f'<!DOCTYPE OAI-PMH [<!ENTITY x SYSTEM "{secret.as_uri()}">]>'.encode(),
            f'<!DOCTYPE OAI-PMH SYSTEM "{listening.url}x.dtd">'.encode(),
            f'<!DOCTYPE OAI-PMH [<!ENTITY % p SYSTEM "{listening.url}p"> %p;]>'.encode(),
        ]
        variants = [(d, pad) for d in doctypes for pad in (0, 70_000)]

        async def identify(request: web.Request) -> web.Response:
            doctype, pad = variants[int(request.match_info["n"])]
            body = identify_document(request, datetime(2020, 1, 1, tzinfo=UTC))
            head, rest = body.split(b"?>", 1)
            prolog = (b"<!--" + b" " * pad + b"-->" if pad else b"") + doctype
            rest = rest.replace(b"<repositoryName>peer", b"<repositoryName>&x;peer", 1)
            return web.Response(body=head + b"?>" + prolog + rest, content_type="text/xml")

        app = web.Application()
        app.router.add_get("/{n}/oai", identify)
        async with (
            serving_app(app) as peer,
            running_provider(database_url, **node_overrides(net, 0)) as node,
            aiohttp.ClientSession() as session,
        ):
            answers = [
                await post_url(session, node, f"{peer}/{n}/oai") for n in range(len(variants))
            ]
            assert await urls_of(session, node) == []
        assert listening.connections == 0
    # behind the prolog, the page reader's own check refuses it, and the answer is the fixed
    # text that repeats nothing of a server's answer (S08), the reason going to the log
    assert answers == [
        (
            400,
            "the Identify response declares a DOCTYPE (refused)\n"
            if not pad
            else NOT_IDENTIFY + "\n",
        )
        for _, pad in variants
    ]
    reasons = [
        r.getMessage() for r in caplog.records if "does not answer Identify" in r.getMessage()
    ]
    assert len(reasons) == 3
    assert all(
        reason.endswith(
            "does not answer Identify: the response carries a DOCTYPE, which is refused"
        )
        for reason in reasons
    ), reasons
    assert "CANARY-7f3a9e" not in caplog.text
    tables = await db.fetch(
        "select table_name from information_schema.tables where table_schema = 'public'"
    )
    for table in (r["table_name"] for r in tables):
        dump = await db.fetchval(f"select coalesce(string_agg(t::text, ''), '') from \"{table}\" t")
        assert "CANARY" not in dump, table
