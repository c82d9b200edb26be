"""Hierarchical sets (RELIABILITY P16; OAI-PMH 2.0 §2.6, §2.7.2, §4.6): a set ``A:B`` lies below
``A``, so ``set=A`` lists the records of ``A`` and of every set below it, each once; ListSets
names ``A``; a header names only the minimal setSpecs. Over real HTTP, against a real PostgreSQL,
with a page of three records so that every list runs over several resumptionTokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from lxml import etree

from tests.support import factories
from tests.support.harvest_pair import Pair, content, run
from tests.support.oai_client import OAI, list_all, oai_get
from tests.support.oai_validation import strict_checks, validate_oai
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.linkspec import build_link

UNION = "WIS-CATALOGUE"


@dataclass
class Tree:
    """The identifiers of each group of the fixture, by where they are filed."""

    only_b: list[str]  # A:B
    only_c: list[str]  # A:C
    b_then_c: list[str]  # A:B, then A:C too (two memberships, two datestamps)
    c_then_b: list[str]  # A:C, then A:B too
    only_a: list[str]  # A itself
    a_and_b: list[str]  # A and A:B
    grandchild: list[str]  # A:B:D
    in_ab: list[str]  # AB: not below A
    in_a_b_x: list[str]  # A_B:x: below A_B
    in_axb_x: list[str]  # AxB:x: not below A_B, though LIKE 'A_B:%' takes it

    @property
    def in_a(self) -> list[str]:
        return sorted(
            self.only_b
            + self.only_c
            + self.b_then_c
            + self.c_then_b
            + self.only_a
            + self.a_and_b
            + self.grandchild
        )


async def file_tree(db: Pool) -> Tree:
    async def load(set_spec: str, numbers: range) -> list[str]:
        return await factories.load_records(db, set_spec, numbers, kind="shared")

    tree = Tree(
        only_b=await load("A:B", range(0, 4)),
        only_c=await load("A:C", range(4, 7)),
        b_then_c=await load("A:B", range(7, 10)),
        c_then_b=await load("A:C", range(10, 12)),
        only_a=await load("A", range(12, 14)),
        a_and_b=await load("A", range(14, 15)),
        grandchild=await load("A:B:D", range(15, 16)),
        in_ab=await load("AB", range(20, 21)),
        in_a_b_x=await load("A_B:x", range(21, 22)),
        in_axb_x=await load("AxB:x", range(22, 23)),
    )
    await load("A:C", range(7, 10))
    await load("A:B", range(10, 12))
    await load("A:B", range(14, 15))
    return tree


@pytest.fixture
async def tree(db: Pool) -> Tree:
    return await file_tree(db)


@pytest.fixture
async def provider(db: Pool, database_url: str, tree: Tree) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url, page_size=3) as running:
        yield running


async def pages(url: str, verb: str, **params: str) -> list[etree._Element]:
    """Every page of a list, each checked against OAI-PMH.xsd, its cursor and its size."""
    answer = await oai_get(url, verb=verb, **params)
    answers = []
    while True:
        validate_oai(answer.body)
        strict_checks(answer.body)
        answers.append(answer.tree)
        token = answer.tree.find(f"{OAI}{verb}/{OAI}resumptionToken")
        if token is None or not token.text:
            return answers
        answer = await oai_get(url, verb=verb, resumptionToken=token.text)


def headers_of(answers: list[etree._Element]) -> list[etree._Element]:
    return [h for a in answers for h in a.iter(f"{OAI}header")]


def identifiers(headers: list[etree._Element]) -> list[str]:
    return [h.findtext(f"{OAI}identifier") or "" for h in headers]


def set_specs(header: etree._Element) -> list[str]:
    return [s.text or "" for s in header.findall(f"{OAI}setSpec")]


@pytest.mark.parametrize("verb", ["ListIdentifiers", "ListRecords"])
async def test_p16_a_superset_lists_every_record_below_it_once(
    provider: RunningProvider, db: Pool, tree: Tree, verb: str
) -> None:
    """P16: set=A holds the records of A, A:B, A:C and A:B:D, each once (§2.7.2), over pages of
    three, at the datestamp of its latest membership change there; AB, A_B:x and AxB:x are not
    below A. It answered noRecordsMatch before."""
    answers = await pages(provider.oai, verb, metadataPrefix="iso19139", set="A")
    headers = headers_of(answers)
    listed = identifiers(headers)
    assert sorted(listed) == tree.in_a  # each once: a sorted list with no repeat
    assert len(set(listed)) == len(listed) == 16
    # the keyset order: oldest datestamp first, across pages
    keys = [(h.findtext(f"{OAI}datestamp"), h.findtext(f"{OAI}identifier")) for h in headers]
    assert [k[0] for k in keys] == sorted(k[0] for k in keys)
    catalogue = await factories.catalogue(db)
    assert {i: d for d, i in keys} == {i: catalogue[i][0] for i in listed}
    tokens = [a.find(f"{OAI}{verb}/{OAI}resumptionToken") for a in answers]
    assert [int(t.get("cursor")) for t in tokens if t is not None] == [0, 3, 6, 9, 12, 15]
    assert {t.get("completeListSize") for t in tokens if t is not None} == {"16"}
    if verb == "ListRecords":
        assert len([a for a in answers for _ in a.iter(f"{OAI}metadata")]) == 16


async def test_p16_headers_name_the_minimal_set_specs(
    provider: RunningProvider, tree: Tree
) -> None:
    """P16, OAI-PMH 2.0 §2.6: a header names A:B, not A too (A:B implies it), also for a record
    filed in both; it named A and A:B before."""
    headers = {
        h.findtext(f"{OAI}identifier"): set_specs(h)
        for h in headers_of(await pages(provider.oai, "ListIdentifiers", metadataPrefix="iso19139"))
    }
    assert headers[tree.a_and_b[0]] == ["A:B", UNION]
    assert headers[tree.only_a[0]] == ["A", UNION]
    assert headers[tree.b_then_c[0]] == ["A:B", "A:C", UNION]
    assert headers[tree.grandchild[0]] == ["A:B:D", UNION]
    got = await oai_get(
        provider.oai, verb="GetRecord", identifier=tree.a_and_b[0], metadataPrefix="iso19139"
    )
    validate_oai(got.body)
    assert got.xpath("//oai:header/oai:setSpec/text()") == ["A:B", UNION]


async def test_p16_list_sets_names_every_ancestor(provider: RunningProvider) -> None:
    """P16, OAI-PMH 2.0 §4.6: ListSets names A (stored as a set too here), and A_B, which is only
    the parent of A_B:x, each with a name; A_B was not listed before."""
    answer = await oai_get(provider.oai, verb="ListSets")
    validate_oai(answer.body)
    listed = {
        s.findtext(f"{OAI}setSpec"): s.findtext(f"{OAI}setName")
        for s in answer.tree.iter(f"{OAI}set")
    }
    assert sorted(listed) == [
        "A", "A:B", "A:B:D", "A:C", "AB", "A_B", "A_B:x", "AxB", "AxB:x", UNION, "WIS-GISC-TEST",
    ]  # fmt: skip
    assert listed["A_B"] == "Every record of the sets below A_B"
    assert listed["A"] == "A"  # a stored set keeps its own name
    assert all(listed.values())


@pytest.mark.parametrize(
    ("set_spec", "groups"),
    [
        ("A:B", ["only_b", "b_then_c", "c_then_b", "a_and_b", "grandchild"]),
        ("A:C", ["only_c", "b_then_c", "c_then_b"]),
        ("A:B:D", ["grandchild"]),
        # a set's name is no pattern: '_' is a letter in it, as in SQL LIKE it is not
        ("A_B", ["in_a_b_x"]),
    ],
)
async def test_p16_a_subset_lists_only_its_own(
    provider: RunningProvider, tree: Tree, set_spec: str, groups: list[str]
) -> None:
    """P16: set=A:B lists A:B's records and A:B:D's (it lacked A:B:D's before), not A's nor
    A:C's; A_B, only the parent of A_B:x, lists A_B:x's record alone."""
    expected = [i for g in groups for i in getattr(tree, g)]
    listed = identifiers(
        headers_of(
            await pages(provider.oai, "ListIdentifiers", metadataPrefix="iso19139", set=set_spec)
        )
    )
    assert sorted(listed) == sorted(expected)


async def test_p16_a_move_is_news_in_the_superset_at_a_new_datestamp(
    provider: RunningProvider, db: Pool, tree: Tree
) -> None:
    """P16 and invariant 1: a record moved from A:B to C leaves A (a deleted header in
    set=A, at the move's datestamp); one moved from A:C to A:B, or out of A:B while it stays in
    A, is still in A, listed again at the move's datestamp with its new sets; an incremental
    list of A from the move holds these three alone."""
    before = await factories.catalogue(db)
    await asyncio.sleep(1.1)  # datestamps are whole seconds on the wire
    out, across, up = tree.only_b[0], tree.only_c[0], tree.a_and_b[0]
    await factories.load_records(db, "C", [0], kind="shared")
    await factories.delete(db, "A:B", [out])
    await factories.load_records(db, "A:B", [4], kind="shared")
    await factories.delete(db, "A:C", [across])
    await factories.delete(db, "A:B", [up])
    after = await factories.catalogue(db)
    for moved in (out, across, up):
        assert after[moved][0] > before[moved][0]
    since = min(after[m][0] for m in (out, across, up))
    headers = headers_of(
        await pages(
            provider.oai, "ListIdentifiers", metadataPrefix="iso19139", set="A", **{"from": since}
        )
    )
    assert {
        (h.findtext(f"{OAI}identifier"), h.get("status"), h.findtext(f"{OAI}datestamp"))
        for h in headers
    } == {
        (out, "deleted", after[out][0]),
        (across, None, after[across][0]),
        (up, None, after[up][0]),
    }
    specs = {h.findtext(f"{OAI}identifier"): set_specs(h) for h in headers}
    assert specs[across] == ["A:B", UNION] and specs[up] == ["A", UNION]
    in_c = headers_of(
        await pages(provider.oai, "ListIdentifiers", metadataPrefix="iso19139", set="C")
    )
    assert [(identifiers([h]), set_specs(h), h.get("status")) for h in in_c] == [
        ([out], ["C", UNION], None)
    ]
    whole = await list_all(provider.oai, metadataPrefix="iso19139", set="A")
    assert {h.findtext(f"{OAI}identifier") for h in whole if h.get("status") is None} == set(
        tree.in_a
    ) - {out}


async def test_p16_a_superset_list_stays_exact_while_records_move(
    db: Pool, database_url: str, tree: Tree
) -> None:
    """While a list of A is in progress, a record of two subsets changes and others move: no
    record is listed twice, none that stayed is missed, and the changed ones are left to the
    next list (their leads are past this one's bound). No page is read ahead here, so that each
    page is read after the changes."""
    async with running_provider(database_url, page_size=3, read_ahead_pages=0) as provider:
        first = await oai_get(
            provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139", set="A"
        )
        seen = first.xpath("//oai:header/oai:identifier/text()")
        token = first.xpath("//oai:resumptionToken/text()")[0]
        ahead = [i for i in tree.in_a if i not in seen]
        # in A:B and A:C, new content; a record of A:B joins A:C; one of A:C leaves A; and
        # one already listed joins A:C
        joins = next(n for n, i in enumerate(tree.only_b) if i in ahead)  # numbers 0 to 3
        joined = next(n for n, i in enumerate(tree.only_b) if i in seen)
        await factories.load_records(db, "A:B", range(7, 8), version=1)
        await factories.load_records(db, "A:C", [joins, joined], kind="shared")
        await factories.delete(db, "A:C", [tree.only_c[0]])
        changed = {tree.b_then_c[0], tree.only_b[joins], tree.only_c[0]}
        assert changed <= set(ahead)
        while token:
            answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token)
            validate_oai(answer.body)
            seen += answer.xpath("//oai:header/oai:identifier/text()")
            token = (answer.xpath("//oai:resumptionToken/text()") or [None])[0]
    assert len(seen) == len(set(seen)), "a record was listed twice"
    assert set(seen) == set(tree.in_a) - changed


async def test_p16_a_wiscat_harvester_harvests_a_superset(pair: Pair, tree_at_source: Tree) -> None:
    """The real harvester harvests set=A from the real provider into its own set A: every
    record below A arrives once; after a record moves from A:B to C at the source, the next
    incremental run deletes it there and takes the others again unchanged."""
    new = build_link(
        name="tree", url=pair.provider.oai, remote_set="A", into=None,
        own_set=pair.ctx.settings.own_set,
    )  # fmt: skip
    await store.ensure_set(pair.sink, new.local_set, new.local_set, "shared")
    await link_store.add_link(pair.sink, new)
    first = await run(pair, "tree")
    assert (first.mode, first.status) == ("full", "ok"), first.summary()
    assert first.counts["added"] == 16
    held = await content(pair.sink, "A")
    assert sorted(held) == tree_at_source.in_a
    out, across = tree_at_source.only_b[0], tree_at_source.only_c[0]
    await factories.load_records(pair.source, "C", [0], kind="shared")
    await factories.delete(pair.source, "A:B", [out])
    await factories.load_records(pair.source, "A:B", [4], kind="shared")
    await factories.delete(pair.source, "A:C", [across])
    second = await run(pair, "tree")
    assert (second.mode, second.status) == ("incremental", "ok"), second.summary()
    assert second.counts["deleted"] == 1 and second.counts["added"] == 0
    assert second.counts["updated"] == 0
    after = await content(pair.sink, "A")
    assert after[out] == (None, True)
    assert {i for i, (_, deleted) in after.items() if not deleted} == set(tree_at_source.in_a) - {
        out
    }


@pytest.fixture
async def tree_at_source(pair: Pair) -> Tree:
    return await file_tree(pair.source)
