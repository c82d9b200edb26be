"""The provider's lists: resumption tokens, exact pages while records change, arrival
datestamps, deletions and sets.

The provider runs over real HTTP on loopback, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.provider_oai.answers import OWN, _codec, _normalised, check
from tests.support import factories
from tests.support.oai_client import OAI, Answer, list_all, oai_get
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh.tokens import ListPosition, TokenCodec


async def test_resumption_pages_cover_the_list_exactly(provider: RunningProvider, db: Pool) -> None:
    """P06: a list's pages give every record once, with cursor and completeListSize."""
    answer = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    seen: list[str] = []
    cursors = []
    while True:
        check(answer.body)
        seen += answer.xpath("//oai:header/oai:identifier/text()")
        token = answer.tree.find(f"{OAI}ListIdentifiers/{OAI}resumptionToken")
        assert token is not None
        cursors.append(int(token.get("cursor")))
        assert token.get("completeListSize") == "250"
        assert token.get("expirationDate") is None  # tokens never expire by default (P10)
        if not token.text:
            break
        answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token.text)
    assert cursors == [0, 100, 200]
    assert len(seen) == len(set(seen)) == 250
    assert set(seen) == set(await factories.catalogue(db))


async def test_tokens_cannot_be_forged_or_reused_across_verbs(provider: RunningProvider) -> None:
    """P09: a token altered, signed elsewhere or of another verb is a badResumptionToken."""
    first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    token = first.xpath("//oai:resumptionToken/text()")[0]
    other_verb = await oai_get(provider.oai, verb="ListRecords", resumptionToken=token)
    assert other_verb.errors() == ["badResumptionToken"]
    altered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    assert (
        await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=altered)
    ).errors() == ["badResumptionToken"]
    now = datetime.now(UTC)
    foreign = TokenCodec(b"another node's secret", lifetime=timedelta(hours=1)).encode(
        ListPosition(
            verb="ListIdentifiers",
            metadata_prefix="iso19139",
            set_spec=None,
            from_=None,
            until_exclusive=None,
            upper_bound=now,
            last_datestamp=now - timedelta(days=1),
            last_identifier="a",
            cursor=100,
            complete_list_size=250,
            expires=now + timedelta(hours=1),
        )
    )
    answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=foreign)
    check(answer.body)
    assert answer.errors() == ["badResumptionToken"]


@pytest.mark.parametrize("read_ahead_pages", [0, 8])
async def test_list_stays_exact_while_records_change(
    db: Pool, database_url: str, read_ahead_pages: int
) -> None:
    """P08: changes made during a list neither repeat nor hide a record of it. Without read-ahead
    (0) the pages after the first are read after the changes; with it (the default, 8) they
    may all have been read before."""
    await factories.load_records(db, OWN, range(250))
    before = await factories.catalogue(db)
    async with running_provider(database_url, read_ahead_pages=read_ahead_pages) as provider:
        first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
        seen = first.xpath("//oai:header/oai:identifier/text()")
        token = first.xpath("//oai:resumptionToken/text()")[0]
        untouched = sorted(before)[:50]
        # change, delete and add records while the list is in progress
        await factories.load_records(db, OWN, range(200, 220), version=1)
        victims = sorted(set(before) - set(seen))[:10]
        await factories.delete(db, OWN, victims)
        await factories.load_records(db, OWN, range(1000, 1020))
        while token:
            answer = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token)
            check(answer.body)
            seen += answer.xpath("//oai:header/oai:identifier/text()")
            token = (answer.xpath("//oai:resumptionToken/text()") or [None])[0]
    assert len(seen) == len(set(seen)), "a record was listed twice"
    changed = set(await factories.catalogue(db)) - set(before)
    assert not (changed & set(seen)), (
        "records added after the list began must wait for the next list"
    )
    assert set(untouched) <= set(seen)


async def test_datestamps_are_arrival_times(provider: RunningProvider, db: Pool) -> None:
    """P04, D10: datestamps are arrival times; from and until include their bounds."""
    before = await factories.catalogue(db)
    await asyncio.sleep(1.1)
    await factories.load_records(db, OWN, range(0, 5))  # same content again
    await factories.load_records(db, OWN, range(5, 10), version=1)  # new content
    after = await factories.catalogue(db)
    same = [i for i in before if after[i] == before[i]]
    moved = [i for i in before if after[i] != before[i]]
    assert len(moved) == 5 and len(same) == 245
    newest = max(after[i][0] for i in moved)
    answer = await oai_get(
        provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139", **{"from": newest}
    )
    check(answer.body)
    assert sorted(answer.xpath("//oai:identifier/text()")) == sorted(moved)
    # until is inclusive too
    oldest = min(after[i][0] for i in same)
    upto = await list_all(provider.oai, metadataPrefix="iso19139", until=oldest)
    assert {h.findtext(f"{OAI}identifier") for h in upto} >= {
        i for i in same if after[i][0] == oldest
    }
    for header in upto:
        assert header.findtext(f"{OAI}datestamp") <= oldest


@pytest.mark.parametrize(
    "bounds",
    [
        {"until": "9999-12-31"},  # a day has no next day to end at
        {"until": "9999-12-31T23:59:59Z"},
        {"from": "0001-01-01", "until": "9999-12-31"},
        {"from": "0001-01-01T00:00:00Z", "until": "9999-12-31T23:59:59Z"},
    ],
)
async def test_the_widest_dates_list_everything(
    provider: RunningProvider, db: Pool, bounds: dict[str, str]
) -> None:
    """The first and last days a datestamp can name are legal from/until values (§3.3.1): the
    list is the whole catalogue, through its resumptionTokens (a 500 before: the day after
    9999-12-31 cannot be computed)."""
    headers = await list_all(provider.oai, metadataPrefix="iso19139", **bounds)
    assert sorted(h.findtext(f"{OAI}identifier") for h in headers) == sorted(
        await factories.catalogue(db)
    )


async def test_deleted_records_and_set_departures(provider: RunningProvider, db: Pool) -> None:
    """P11, H21: a deleted record, or one that left a set, is a deleted header there."""
    ids = sorted(await factories.catalogue(db))
    await factories.load_records(db, "shared01", [0], kind="shared")  # record 0 also in shared01
    zero = next(i for i in ids if i.endswith(".0"))
    await factories.delete(db, OWN, ids[1:3])
    got = await oai_get(
        provider.oai, verb="GetRecord", identifier=ids[1], metadataPrefix="iso19139"
    )
    check(got.body)
    assert got.xpath("//oai:header/@status") == ["deleted"]
    assert got.xpath("//oai:metadata") == []
    await factories.delete(db, "shared01", [zero])
    in_shared = await list_all(provider.oai, metadataPrefix="iso19139", set="shared01")
    assert [(h.findtext(f"{OAI}identifier"), h.get("status")) for h in in_shared] == [
        (zero, "deleted")
    ]
    whole = {
        h.findtext(f"{OAI}identifier"): h.get("status")
        for h in await list_all(provider.oai, metadataPrefix="iso19139")
    }
    assert whole[zero] is None and whole[ids[1]] == "deleted" and whole[ids[2]] == "deleted"


async def test_sets_select_their_records(provider: RunningProvider, db: Pool) -> None:
    await factories.load_records(
        db, "WIS-GISC-OTHER", range(5000, 5007), centre="yy", kind="remote"
    )
    remote = await list_all(provider.oai, metadataPrefix="iso19139", set="WIS-GISC-OTHER")
    assert len(remote) == 7
    own = await list_all(provider.oai, metadataPrefix="iso19139", set=OWN)
    assert len(own) == 250
    union = await list_all(provider.oai, metadataPrefix="iso19139", set="WIS-CATALOGUE")
    assert len(union) == 257


async def _pages(url: str, verb: str, **params: str) -> list[tuple[str | None, Answer]]:
    """Every page of a list, each with the token that asked for it (None: the first)."""
    pages: list[tuple[str | None, Answer]] = []
    asked: str | None = None
    answer = await oai_get(url, verb=verb, **params)
    while True:
        assert answer.status == 200 and not answer.errors(), answer.body[:300]
        pages.append((asked, answer))
        asked = answer.tree.findtext(f".//{OAI}resumptionToken")
        if not asked:
            return pages
        answer = await oai_get(url, verb=verb, resumptionToken=asked)


async def test_p07_a_token_issued_again_gives_its_page_again(provider: RunningProvider) -> None:
    """P07: once a list is done, its last token and then the one before it are issued again:
    each gives the page it gave (the same records, in the same order, the same body less
    responseDate and token times), no badResumptionToken."""
    codec = _codec(provider)
    for verb in ("ListRecords", "ListIdentifiers"):
        pages = await _pages(provider.oai, verb, metadataPrefix="iso19139")
        assert len(pages) == 3
        for token, first in (pages[2], pages[1], pages[2]):
            assert token is not None
            again = await oai_get(provider.oai, verb=verb, resumptionToken=token)
            check(again.body)
            assert again.errors() == []
            ids = "//oai:header/oai:identifier/text()"
            assert again.xpath(ids) == first.xpath(ids) and len(again.xpath(ids)) >= 50
            assert _normalised(again.body, codec) == _normalised(first.body, codec)


def _raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


async def test_p09_tampered_tokens_are_bad_resumption_tokens_and_nothing_worse(
    provider: RunningProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """P09: a token truncated, base64 of garbage, SQL, 10 KB long, one byte flipped, signed
    elsewhere or of the other list verb: badResumptionToken, HTTP 200, XSD-valid, for both list
    verbs; not one 5xx, and nothing in the log (no database error, no warning)."""
    caplog.set_level(logging.DEBUG)
    first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    token = first.tree.findtext(f".//{OAI}resumptionToken") or ""
    assert len(token) > 40
    flipped = bytearray(_raw(token))
    flipped[len(flipped) // 2] ^= 0x01
    # Well-formed tokens whose payload was changed and whose MAC was kept: only the MAC tells
    # them from a genuine token.
    codec = _codec(provider)
    position = codec.decode(token, now=datetime.now(UTC))
    genuine_mac = _raw(token)[-16:]
    changed = [
        base64.urlsafe_b64encode(
            _raw(codec.encode(replace(position, **change)))[:-16] + genuine_mac
        )
        .decode()
        .rstrip("=")
        for change in (
            {"cursor": 0, "last_datestamp": None, "last_identifier": ""},  # back to the start
            {"last_identifier": position.last_identifier + "~"},  # a position moved
            {"verb": "ListRecords"},
            {"metadata_prefix": "oai_dc"},
            {"set_spec": OWN},
        )
    ]
    tampered = [
        token[: len(token) // 2],  # truncated
        token[:-1],  # one character short
        base64.urlsafe_b64encode(b"\x01" + os.urandom(80)).decode().rstrip("="),  # garbage
        base64.b64encode(b"' OR 1=1 --; drop table records").decode(),
        "' OR 1=1 --",
        "1' UNION SELECT xml FROM records --",
        "A" * 10_240,  # 10 KB, of the token alphabet
        base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("="),
        "%00",
        "\u00e9\u20ac",
        *changed,
    ]
    for verb in ("ListIdentifiers", "ListRecords"):
        for bad in [*tampered, token if verb == "ListRecords" else ""]:
            if not bad:
                continue
            answer = await oai_get(provider.oai, verb=verb, resumptionToken=bad)
            assert answer.status == 200, (verb, bad)
            check(answer.body)
            assert answer.errors() == ["badResumptionToken"], (verb, bad)
    # the untampered token still continues its own list
    assert (
        await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=token)
    ).errors() == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    text = caplog.text.lower()
    for trace in ("asyncpg", "postgres", "sql", "syntax error", "traceback"):
        assert trace not in text


async def test_p11_a_tombstone_is_stamped_when_deleted_and_a_record_made_again_is_live(
    provider: RunningProvider, db: Pool
) -> None:
    """P11: delete X, then re-create it. A list from before the deletion gives X's deleted
    header, stamped at the deletion, with no metadata; GetRecord X gives that header; once X is
    made again, ListIdentifiers and GetRecord give it live, once, at a newer datestamp."""
    (x,) = await factories.load_records(db, OWN, [7])
    await asyncio.sleep(1.1)  # the deletion a second after anything else
    since = datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    await asyncio.sleep(0.1)
    deleting = datetime.now(UTC)
    await factories.delete(db, OWN, [x])
    deleted = datetime.now(UTC)
    stamp = await db.fetchval("select datestamp from records where identifier = $1", x)
    assert deleting <= stamp <= deleted
    stamped = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    for verb in ("ListRecords", "ListIdentifiers"):
        for in_set in ({}, {"set": OWN}):
            answer = await oai_get(
                provider.oai, verb=verb, metadataPrefix="iso19139", **{"from": since}, **in_set
            )
            check(answer.body)
            assert answer.xpath("//oai:header/oai:identifier/text()") == [x]
            assert answer.xpath("//oai:header/@status") == ["deleted"]
            assert answer.xpath("//oai:header/oai:datestamp/text()") == [stamped]
            assert answer.xpath("//oai:metadata | //oai:about") == []
    got = await oai_get(provider.oai, verb="GetRecord", identifier=x, metadataPrefix="iso19139")
    check(got.body)
    assert got.errors() == []
    assert got.xpath("//oai:header/@status") == ["deleted"]
    assert got.xpath("//oai:header/oai:datestamp/text()") == [stamped]
    assert got.xpath("//oai:metadata") == []
    await factories.load_records(db, OWN, [7])  # made again
    for in_set in ({}, {"set": OWN}):
        headers = [
            h
            for h in await list_all(provider.oai, metadataPrefix="iso19139", **in_set)
            if h.findtext(f"{OAI}identifier") == x
        ]
        assert len(headers) == 1 and headers[0].get("status") is None
        assert (headers[0].findtext(f"{OAI}datestamp") or "") >= stamped
    got = await oai_get(provider.oai, verb="GetRecord", identifier=x, metadataPrefix="iso19139")
    check(got.body)
    assert got.xpath("//oai:header/@status") == []
    assert len(got.xpath("//oai:metadata")) == 1
