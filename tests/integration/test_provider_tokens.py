"""resumptionTokens over real HTTP: they never expire unless a lifetime is set (P10), and a
rotation of WISCAT_TOKEN_SECRET keeps the lists in progress for its grace period."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from lxml import etree

from tests.support import factories
from tests.support.oai_client import OAI, Answer, oai_get
from tests.support.oai_validation import strict_checks, validate_oai
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh.tokens import ListPosition, TokenCodec

OWN = "WIS-GISC-TEST"
OLD_SECRET = "the secret before the rotation"
NEW_SECRET = "the secret after the rotation"


@pytest.fixture
async def catalogue(db: Pool) -> None:
    await factories.load_records(db, OWN, range(250))


@pytest.fixture
async def provider(catalogue: None, database_url: str) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url, token_secret=OLD_SECRET) as running:
        yield running


def check(answer: Answer) -> None:
    validate_oai(answer.body)
    strict_checks(answer.body)


def token_of(answer: Answer) -> etree._Element:
    element = answer.tree.find(f".//{OAI}resumptionToken")
    assert element is not None
    return element


def items(answer: Answer) -> list[bytes]:
    """The page's records, as they were sent (the page less its responseDate and token)."""
    return [etree.tostring(record) for record in answer.tree.iter(f"{OAI}record")]


def codec(secret: str, **options: object) -> TokenCodec:
    return TokenCodec(secret.encode(), **options)  # type: ignore[arg-type]


async def test_p10_tokens_never_expire_by_default(provider: RunningProvider) -> None:
    """P10: with WISCAT_TOKEN_LIFETIME_HOURS unset (0), no token carries an expirationDate
    and none holds an expiry: decoded a thousand years on, it still continues its list."""
    assert provider.settings.token_lifetime_hours == 0
    first = await oai_get(provider.oai, verb="ListRecords", metadataPrefix="iso19139")
    check(first)
    element = token_of(first)
    assert element.text
    assert "expirationDate" not in element.attrib
    far = datetime(3026, 1, 1, tzinfo=UTC)
    position = codec(OLD_SECRET).decode(element.text, now=far)
    assert position.expires is None
    assert position.cursor == 100
    second = await oai_get(provider.oai, verb="ListRecords", resumptionToken=element.text)
    check(second)
    assert second.errors() == []
    assert "expirationDate" not in token_of(second).attrib


async def test_p10_a_lifetime_set_expires_tokens(catalogue: None, database_url: str) -> None:
    """P10: with WISCAT_TOKEN_LIFETIME_HOURS=24 a token's expirationDate is at least the
    request's time + 24 h, its own expiry; the provider takes a token expiring in ten minutes
    (the same page as the original) and refuses one expired 1 s or two days ago (tokens signed
    with the node's key with those expiries stand for a clock moved on)."""
    async with running_provider(
        database_url, token_secret=OLD_SECRET, token_lifetime_hours=24
    ) as provider:
        asked_at = datetime.now(UTC).replace(microsecond=0)
        first = await oai_get(provider.oai, verb="ListRecords", metadataPrefix="iso19139")
        check(first)
        element = token_of(first)
        assert element.text
        expires = datetime.strptime(element.get("expirationDate") or "", "%Y-%m-%dT%H:%M:%SZ")
        assert expires.replace(tzinfo=UTC) >= asked_at + timedelta(hours=24)
        assert expires.replace(tzinfo=UTC) <= datetime.now(UTC) + timedelta(hours=24)
        node = codec(OLD_SECRET, lifetime=timedelta(hours=24))
        position = node.decode(element.text, now=datetime.now(UTC))
        assert position.expires is not None
        assert position.expires.replace(microsecond=0) == expires.replace(tzinfo=UTC)
        page_two = await oai_get(provider.oai, verb="ListRecords", resumptionToken=element.text)
        assert page_two.errors() == []
        soon = node.encode(
            dataclasses.replace(position, expires=datetime.now(UTC) + timedelta(minutes=10))
        )
        before = await oai_get(provider.oai, verb="ListRecords", resumptionToken=soon)
        check(before)
        assert items(before) == items(page_two)
        assert len(items(before)) == 100
        for past in (timedelta(seconds=1), timedelta(days=2)):
            expired = node.encode(dataclasses.replace(position, expires=datetime.now(UTC) - past))
            after = await oai_get(provider.oai, verb="ListRecords", resumptionToken=expired)
            check(after)
            assert after.errors() == ["badResumptionToken"]
            assert after.xpath("//oai:error/text()") == [
                "this resumptionToken has expired; start the list again"
            ]


async def test_a_rotated_secret_takes_the_previous_ones_tokens_until_its_end(
    provider: RunningProvider, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After WISCAT_TOKEN_SECRET is rotated, with WISCAT_TOKEN_SECRET_PREVIOUS the old one and
    WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL in an hour, a list begun under the old secret goes on
    with the same page; the next token is signed with the new secret only (the old provider
    refuses it); once the grace period is over, the old token is refused saying so, and the
    provider warns at its start that the previous secret is left over; a token signed with any
    other key is still refused."""
    first = await oai_get(provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139")
    old_token = token_of(first).text
    assert old_token
    page_two = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=old_token)
    until = datetime.now(UTC) + timedelta(hours=1)
    async with running_provider(
        database_url,
        token_secret=NEW_SECRET,
        token_secret_previous=OLD_SECRET,
        token_secret_previous_until=until,
    ) as rotated:
        continued = await oai_get(rotated.oai, verb="ListIdentifiers", resumptionToken=old_token)
        check(continued)
        assert continued.errors() == []
        same = "//oai:header/oai:identifier/text()"
        assert continued.xpath(same) == page_two.xpath(same)
        assert len(continued.xpath(same)) == 100
        new_token = token_of(continued).text
        assert new_token
        position = codec(NEW_SECRET).decode(new_token, now=datetime.now(UTC))
        assert position.cursor == 200
        refused = await oai_get(provider.oai, verb="ListIdentifiers", resumptionToken=new_token)
        assert refused.xpath("//oai:error/text()") == [
            "this resumptionToken was not issued by this repository"
        ]
        last = await oai_get(rotated.oai, verb="ListIdentifiers", resumptionToken=new_token)
        assert last.errors() == []
        assert len(last.xpath(same)) == 50
        forged = codec("a key no one was given").encode(position)
        answer = await oai_get(rotated.oai, verb="ListIdentifiers", resumptionToken=forged)
        check(answer)
        assert answer.xpath("//oai:error/text()") == [
            "this resumptionToken was not issued by this repository"
        ]
    ended = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    caplog.clear()
    async with running_provider(
        database_url,
        token_secret=NEW_SECRET,
        token_secret_previous=OLD_SECRET,
        token_secret_previous_until=ended,
    ) as after_grace:
        late = await oai_get(after_grace.oai, verb="ListIdentifiers", resumptionToken=old_token)
        check(late)
        assert late.errors() == ["badResumptionToken"]
        assert late.xpath("//oai:error/text()") == [
            f"this resumptionToken was signed with a key retired at "
            f"{ended:%Y-%m-%dT%H:%M:%SZ}; start the list again"
        ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"the grace period of WISCAT_TOKEN_SECRET_PREVIOUS ended at {ended.isoformat()}: its "
        "tokens are refused; remove it and WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL"
    ]
    assert OLD_SECRET not in caplog.text and NEW_SECRET not in caplog.text


def test_positions_of_tokens_that_never_expire_round_trip() -> None:
    """A token without expiry decodes to the position it was made from, at any time."""
    now = datetime.now(UTC)
    position = ListPosition(
        verb="ListRecords",
        metadata_prefix="oai_dc",
        set_spec="WIS-GISC-TEST",
        from_=now - timedelta(days=3),
        until_exclusive=None,
        upper_bound=now,
        last_datestamp=now - timedelta(days=1),
        last_identifier="urn:x-wmo:md:test:1",
        cursor=500,
        complete_list_size=1200,
        expires=None,
    )
    node = codec(NEW_SECRET)
    assert node.expiry(now) is None
    for moment in (now, datetime(9000, 1, 1, tzinfo=UTC)):
        assert node.decode(node.encode(position), now=moment) == position
