"""Invariants 4 and 5 (docs/design.md): a deletion is never lost, and it is newer than the copy it
deleted (RELIABILITY D06, D07, H13).

- A tombstone keeps the deleted copy's gmd:dateStamp: an older or equal copy, from a relay that
  missed the deletion, the other GISC serving a shared set, or a peer that restored a backup,
  is refused and counted, never revived (with a new datestamp for everyone downstream).
- Within one list the last event of an identifier wins, across pages and within a page (the
  newest header datestamp there, the last on a tie).
- A deleted header lists the sets the record was deleted from, at the origin and downstream.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web

from tests.support import factories
from tests.support.harvest_pair import Pair, sink_settings
from tests.support.oai_client import OAI, list_all, oai_get
from tests.support.pg import clone_template, drop_database
from tests.support.servers import RunningProvider, running_provider, serving
from wiscat.harvester.context import HarvestContext, RunReport
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.oaipmh import render

A_SET = "WIS-GISC-A"


@dataclass
class Node:
    name: str
    pool: Pool
    provider: RunningProvider
    ctx: HarvestContext


@contextlib.asynccontextmanager
async def node(template_ready: str, name: str) -> AsyncIterator[Node]:
    """A node of its own: a fresh database, its provider and its harvester."""
    url = await clone_template(template_ready)
    try:
        async with (
            running_provider(url, gisc_name=name) as provider,
            harvest_context(sink_settings(url, gisc_name=name, mass_delete_min=100), url) as ctx,
        ):
            yield Node(name, ctx.pool, provider, ctx)
    finally:
        await drop_database(template_ready, url)


async def link(to: Node, name: str, source: Node, set_spec: str | None = A_SET) -> None:
    new = build_link(
        name=name,
        url=source.provider.oai,
        remote_set=set_spec,
        into=None,
        own_set=f"WIS-GISC-{to.name}",
        window_slices=0,
    )
    await store.ensure_set(to.pool, new.local_set, new.local_set, "remote")
    await link_store.add_link(to.pool, new)


async def harvest(at: Node, name: str, *, full: bool = False) -> RunReport:
    stored = await link_store.get_link(at.pool, name)
    assert stored is not None
    report = await harvest_link(at.ctx, stored, full=full, window=False)
    assert report.status == "ok", report.summary()
    return report


async def states(pool: Pool, identifiers: list[str]) -> dict[str, bool]:
    """identifier -> deleted."""
    rows = await pool.fetch(
        "select identifier, deleted from records where identifier = any($1)", identifiers
    )
    return {r["identifier"]: r["deleted"] for r in rows}


@pytest.fixture
async def mesh(template_ready: str, db: Pool) -> AsyncIterator[dict[str, Node]]:
    async with (
        node(template_ready, "A") as a,
        node(template_ready, "B") as b,
        node(template_ready, "C") as c,
        node(template_ready, "D") as d,
    ):
        yield {"A": a, "B": b, "C": c, "D": d}


async def test_d07_a_relay_switch_to_a_gisc_that_missed_deletions_revives_nothing(
    mesh: dict[str, Node],
) -> None:
    """A deletes two records of its own set; B harvests A, D harvests A's set from B. C, which
    harvests A too, missed the deletions. D's link is moved to C (the relay switch) and
    harvests it in full: the two records stayed live there, with a new datestamp, and went on
    to everyone harvesting D."""
    a, b, c, d = mesh["A"], mesh["B"], mesh["C"], mesh["D"]
    ids = await factories.load_records(a.pool, A_SET, range(5), centre="aa")
    await link(b, "a", a)
    await link(c, "a", a)
    await link(d, "up", b)
    for at, name in ((b, "a"), (c, "a"), (d, "up")):
        assert (await harvest(at, name)).counts["added"] == 5
    await factories.delete(a.pool, A_SET, ids[:2])
    assert (await harvest(b, "a")).counts["deleted"] == 2
    assert (await harvest(d, "up")).counts["deleted"] == 2
    before = await factories.catalogue(d.pool)
    await link_store.update_source(d.pool, "up", c.provider.oai, A_SET)
    report = await harvest(d, "up")
    assert report.mode == "full"
    assert (report.counts["refused"], report.counts["added"]) == (2, 0)
    assert report.counts["unchanged"] == 3
    assert await states(d.pool, ids) == {i: i in ids[:2] for i in ids}
    assert await factories.catalogue(d.pool) == before  # no datestamp moved downstream
    run = await d.pool.fetchrow(
        "select refused, added from harvest_runs where link = 'up' order by id desc limit 1"
    )
    assert dict(run) == {"refused": 2, "added": 0}


async def test_d07_a_shared_set_from_two_gisc_one_of_which_missed_a_deletion(
    mesh: dict[str, Node],
) -> None:
    """Seed 000 §5: D harvests shared01 from A and from C, the two GISCs that serve it. A
    deletes a record; C has not seen the deletion yet and still lists the old copy."""
    a, c, d = mesh["A"], mesh["C"], mesh["D"]
    shared = "shared01"
    ids = await factories.load_records(a.pool, shared, range(3), centre="sh", kind="shared")
    await factories.load_records(c.pool, shared, range(3), centre="sh", kind="shared")
    await link(d, "from-a", a, shared)
    await link(d, "from-c", c, shared)
    assert (await harvest(d, "from-a")).counts["added"] == 3
    assert (await harvest(d, "from-c")).counts["unchanged"] == 3
    await factories.delete(a.pool, shared, ids[:1])
    assert (await harvest(d, "from-a")).counts["deleted"] == 1
    report = await harvest(d, "from-c", full=True)
    assert (report.counts["refused"], report.counts["added"]) == (1, 0)
    assert await states(d.pool, ids) == {ids[0]: True, ids[1]: False, ids[2]: False}


async def test_d06_a_full_reharvest_of_a_peer_that_restored_an_old_backup(pair: Pair) -> None:
    """The peer deletes a record, then restores a backup from before: the old copy is listed
    again (at a new datestamp, as a restored row re-indexed). It stays deleted here; a copy
    with a newer gmd:dateStamp revives it."""
    source = "WIS-GISC-TEST"
    ids = await factories.load_records(pair.source, source, range(3))
    new = build_link(
        name="test", url=pair.provider.oai, remote_set=source, into=None,
        own_set="WIS-GISC-SINK", window_slices=0,
    )  # fmt: skip
    await store.ensure_set(pair.sink, new.local_set, new.local_set, "remote")
    await link_store.add_link(pair.sink, new)

    async def run(full: bool = False) -> RunReport:
        stored = await link_store.get_link(pair.sink, "test")
        assert stored is not None
        report = await harvest_link(
            pair.ctx, stored, full=full, window=False, allow_mass_delete=True
        )
        assert report.status == "ok", report.summary()
        return report

    await run()
    await factories.delete(pair.source, source, ids[:1])
    assert (await run()).counts["deleted"] == 1
    await factories.load_records(pair.source, source, range(1))  # the backup's copy
    report = await run(full=True)
    assert (report.counts["refused"], report.counts["added"]) == (1, 0)
    assert (await states(pair.sink, ids))[ids[0]] is True
    # a newer revision is news: the record lives again
    await factories.load_records(pair.source, source, range(1), version=1)
    assert (await run()).counts["added"] == 1
    assert (await states(pair.sink, ids))[ids[0]] is False


async def test_a_local_ingest_revives_a_deleted_record_whatever_its_date(pair: Pair) -> None:
    """The operator's own set, an explicit act: ingest of a deleted identifier revives it, as
    docs/harvesting.md says."""
    from wiscat.shared.ingest import put_record

    own = "WIS-GISC-TEST"
    [identifier] = await factories.load_records(pair.source, own, range(1))
    await factories.delete(pair.source, own, [identifier])
    result = await put_record(pair.source, own, parse_record(generate_record(0)))
    assert result == "added"
    assert (await states(pair.source, [identifier]))[identifier] is False


# -- the last event of an identifier in list order wins (H13, D07) --------------------------

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
RECORD = parse_record(generate_record(7, centre="ev"))
NEWER = parse_record(generate_record(7, centre="ev", version=1))


def live(at: int, record: object = RECORD) -> bytes:
    xml = record.xml  # type: ignore[attr-defined]
    return render.record(RECORD.identifier, NOW + timedelta(seconds=at), [A_SET], False, xml)


def gone(at: int) -> bytes:
    return render.record(RECORD.identifier, NOW + timedelta(seconds=at), [A_SET], True, None)


def pages_of(*pages: list[bytes]) -> web.Application:
    """A peer whose ListRecords is ``pages``, one after the other by resumptionToken."""

    async def answer(request: web.Request) -> bytes:
        token = request.query.get("resumptionToken")
        number = int(token) if token else 0
        start = render.response_start(NOW, "http://peer/oai", dict(request.query), "ListRecords")
        more = number + 1 < len(pages)
        tail = render.resumption_token(
            str(number + 1) if more else None,
            cursor=number,
            complete_list_size=0,
            expiration=None,
        )
        return start + b"".join(pages[number]) + tail + render.response_end("ListRecords")

    return answer  # type: ignore[return-value]


async def events_harvest(pair: Pair, *pages: list[bytes]) -> tuple[RunReport, bool | None]:
    """A full run of a link to a peer listing ``pages``; the record's state here after it
    (None: not stored)."""
    async with serving(b"", pages=pages_of(*pages)) as url:  # type: ignore[arg-type]
        new = build_link(
            name="ev", url=url, remote_set=A_SET, into=None,
            own_set="WIS-GISC-SINK", window_slices=0,
        )  # fmt: skip
        await store.ensure_set(pair.sink, new.local_set, new.local_set, "remote")
        await link_store.add_link(pair.sink, new)
        stored = await link_store.get_link(pair.sink, "ev")
        assert stored is not None
        report = await harvest_link(
            pair.ctx, stored, full=True, window=False, allow_mass_delete=True
        )
    assert report.status == "ok", report.summary()
    state = await states(pair.sink, [RECORD.identifier])
    return report, state.get(RECORD.identifier)


@pytest.mark.parametrize(
    ("pages", "deleted", "why"),
    [
        ([[gone(1)], [live(2)]], False, "deleted on page 1, re-created on page 2"),
        ([[live(1)], [gone(2)]], True, "created on page 1, deleted on page 2"),
        ([[gone(1), live(2)]], False, "deleted, then re-created, within a page"),
        ([[live(1), gone(2)]], True, "created, then deleted, within a page"),
        ([[live(2), gone(1)]], False, "within a page, the newest datestamp, not the last item"),
        ([[gone(2), live(1)]], True, "within a page, a deletion newer than the copy after it"),
        ([[gone(1), live(1)]], False, "within a page, on a tie, the last item"),
        ([[live(1)], [gone(2)], [live(3)]], False, "created, deleted, created again"),
    ],
)
async def test_h13_the_last_event_of_an_identifier_in_a_list_wins(
    pair: Pair, pages: list[list[bytes]], deleted: bool, why: str
) -> None:
    report, state = await events_harvest(pair, *pages)
    assert state is deleted, why
    assert report.counts["deleted"] == (1 if deleted else 0), why


async def test_d07_100_shuffled_replays_of_a_deletion_and_a_copy_at_one_datestamp(
    pair: Pair,
) -> None:
    """D07: 100 identifiers, each with a deletion and a copy (two to four events in all) at one
    header datestamp, their events in a random order (a fixed seed), the whole list shuffled
    and cut into pages of random sizes: after one full run each identifier is in the state of
    its last event in list order, the Rule of docs/harvesting.md (the last event wins;
    within a page, an identifier listed twice is taken at its newest datestamp, the last item on
    a tie). A second link replaying the same events in another shuffle ends each one as its own
    order says."""
    rng = random.Random(7)
    at = NOW + timedelta(seconds=5)

    def shuffled_list(centre: str) -> tuple[list[list[bytes]], dict[str, bool]]:
        records = [parse_record(generate_record(n, centre=centre)) for n in range(100)]
        events: list[tuple[str, bool]] = []
        for record in records:
            kinds = [True, False] + [rng.random() < 0.5 for _ in range(rng.randint(0, 2))]
            rng.shuffle(kinds)
            events += [(record.identifier, deleted) for deleted in kinds]
        # shuffle across identifiers while keeping each identifier's own order
        order = sorted(range(len(events)), key=lambda _: rng.random())
        positions: dict[str, list[int]] = {}
        for slot, event in enumerate(order):
            positions.setdefault(events[event][0], []).append(slot)
        listed: list[tuple[str, bool]] = [("", False)] * len(events)
        per_identifier: dict[str, list[bool]] = {}
        for identifier, deleted in events:
            per_identifier.setdefault(identifier, []).append(deleted)
        for identifier, slots in positions.items():
            for slot, deleted in zip(sorted(slots), per_identifier[identifier], strict=True):
                listed[slot] = (identifier, deleted)
        xml = {r.identifier: r.xml for r in records}
        items = [
            render.record(identifier, at, [A_SET], deleted, None if deleted else xml[identifier])
            for identifier, deleted in listed
        ]
        pages = []
        while items:
            size = rng.randint(1, 60)
            pages.append(items[:size])
            items = items[size:]
        last = {identifier: deleted for identifier, deleted in listed}
        return pages, last

    outcomes = []
    for replay in range(2):
        pages, expected = shuffled_list(f"tie{replay}")
        async with serving(b"", pages=pages_of(*pages)) as url:  # type: ignore[arg-type]
            into = f"TIE{replay}"
            new = build_link(
                name=f"tie{replay}", url=url, remote_set=A_SET, into=into,
                own_set="WIS-GISC-SINK", window_slices=0,
            )  # fmt: skip
            await store.ensure_set(pair.sink, new.local_set, new.local_set, "remote")
            await link_store.add_link(pair.sink, new)
            link = await link_store.get_link(pair.sink, new.name)
            assert link is not None
            report = await harvest_link(
                pair.ctx, link, full=True, window=False, allow_mass_delete=True
            )
        assert report.status == "ok", report.summary()
        rows = await pair.sink.fetch(
            "select identifier, deleted from set_members where set_spec = $1", into
        )
        got = {r["identifier"]: r["deleted"] for r in rows}
        assert {i: got.get(i) for i in expected} == expected, f"replay {replay}"
        outcomes.append(list(expected.values()).count(True))
    assert all(0 < deleted < 100 for deleted in outcomes), outcomes  # both outcomes were put


async def test_h13_a_page_keeps_the_copy_with_the_newest_header_datestamp(pair: Pair) -> None:
    """Twice live in one page: the copy listed at the newer datestamp is kept, though it comes
    first (it was the last one before)."""
    await events_harvest(pair, [live(2, NEWER), live(1, RECORD)])
    stored = await pair.sink.fetchval(
        "select content_hash from records where identifier = $1", RECORD.identifier
    )
    assert stored == NEWER.content_hash


# -- a deleted header lists the sets the record was deleted from ------------------------------


async def deleted_header_sets(provider: RunningProvider, identifier: str) -> dict[str, list[str]]:
    """The setSpecs of ``identifier``'s deleted header in each answer that carries it."""
    found: dict[str, list[str]] = {}
    for verb in ("ListIdentifiers", "ListRecords"):
        for set_spec in (A_SET, None):
            params = {"metadataPrefix": "iso19139"} | ({"set": set_spec} if set_spec else {})
            for header in await list_all(provider.oai, verb, **params):
                if header.findtext(f"{OAI}identifier") == identifier:
                    assert header.get("status") == "deleted"
                    specs = [s.text or "" for s in header.findall(f"{OAI}setSpec")]
                    found[f"{verb} set={set_spec}"] = specs
    answer = await oai_get(
        provider.oai, verb="GetRecord", identifier=identifier, metadataPrefix="iso19139"
    )
    assert not answer.errors()
    [header] = answer.xpath("//oai:header")
    assert header.get("status") == "deleted"
    found["GetRecord"] = [s.text or "" for s in header.findall(f"{OAI}setSpec")]
    return found


async def test_a_deleted_header_lists_its_sets_at_the_origin_a_relay_and_behind(
    mesh: dict[str, Node],
) -> None:
    a, b, d = mesh["A"], mesh["B"], mesh["D"]
    ids = await factories.load_records(a.pool, A_SET, range(3), centre="aa")
    await link(b, "a", a)
    await link(d, "up", b)
    await harvest(b, "a")
    await harvest(d, "up")
    await factories.delete(a.pool, A_SET, ids[:1])
    await harvest(b, "a")
    await harvest(d, "up")
    every = {
        f"{verb} set={s}": ["WIS-CATALOGUE", A_SET]
        for verb in ("ListIdentifiers", "ListRecords")
        for s in (A_SET, None)
    } | {"GetRecord": ["WIS-CATALOGUE", A_SET]}
    for at in (a, b, d):
        assert await deleted_header_sets(at.provider, ids[0]) == every, at.name


async def test_a_record_that_left_one_set_is_deleted_there_under_that_set(pair: Pair) -> None:
    own, other = "WIS-GISC-TEST", "WIS-GISC-OTHER"
    [identifier] = await factories.load_records(pair.source, own, range(1))
    await factories.load_records(pair.source, other, range(1), kind="remote")
    await factories.delete(pair.source, other, [identifier])
    [header] = [
        h
        for h in await list_all(pair.provider.oai, metadataPrefix="iso19139", set=other)
        if h.findtext(f"{OAI}identifier") == identifier
    ]
    assert header.get("status") == "deleted"
    assert [s.text for s in header.findall(f"{OAI}setSpec")] == [other]
    # still live in the own set and the whole catalogue, listing the sets it is in
    [header] = await list_all(pair.provider.oai, metadataPrefix="iso19139", set=own)
    assert header.get("status") is None
    assert [s.text for s in header.findall(f"{OAI}setSpec")] == ["WIS-CATALOGUE", own]
