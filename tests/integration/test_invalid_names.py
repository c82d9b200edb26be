"""P14: identifiers and setSpecs that XML or OAI-PMH cannot carry, written by direct SQL.

No write path takes one; a row written by SQL may hold one all the same. A record whose
identifier holds a character XML 1.0 does not allow is neither listed nor served (its listed
form could not be asked for again); a set whose spec breaks OAI-PMH's setSpec pattern is left out
of ListSets and of every header. Both are counted and logged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import factories
from tests.support.oai_client import Answer, oai_get
from tests.support.oai_validation import strict_checks, validate_oai
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db.pool import Pool

OWN = "WIS-GISC-TEST"
BAD_SET = "BAD\x0bSET"


def check(answer: Answer) -> None:
    assert answer.status == 200, answer.body[-500:]
    validate_oai(answer.body)
    strict_checks(answer.body)


async def rename(db: Pool, identifier: str, new: str) -> None:
    """Give record ``identifier`` the identifier ``new``, with its set memberships, by SQL."""
    async with db.acquire() as conn, conn.transaction():
        for table in ("records", "set_members"):
            await conn.execute(
                f"insert into {table} select (jsonb_populate_record(null::{table}, "
                "to_jsonb(t) || jsonb_build_object('identifier', $2::text))).* "
                f"from {table} t where identifier = $1",
                identifier,
                new,
            )
        await conn.execute("delete from records where identifier = $1", identifier)


async def counts(provider: RunningProvider, name: str, label: str) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(provider.root + "/metrics") as response,
    ):
        text = await response.text()
    return {
        sample.labels[label]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
    }


@pytest.fixture
async def provider(db: Pool, database_url: str) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url) as running:
        yield running


async def test_p14_a_record_whose_identifier_xml_cannot_carry_is_not_listed_but_counted(
    db: Pool, provider: RunningProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    identifiers = await factories.load_records(db, OWN, range(6))
    broken = {identifiers[1]: identifiers[1] + "\x0b", identifiers[3]: identifiers[3] + "\ufffe"}
    for old, new in broken.items():
        await rename(db, old, new)
    await factories.delete(db, OWN, [identifiers[4]])
    await rename(db, identifiers[4], identifiers[4] + "\uffff")  # a tombstone
    clean = sorted(set(identifiers) - set(broken) - {identifiers[4]})
    for verb, prefix, scope in [
        ("ListIdentifiers", "iso19139", {}),
        ("ListRecords", "iso19139", {}),
        ("ListRecords", "oai_dc", {"set": OWN}),
    ]:
        answer = await oai_get(provider.oai, verb=verb, metadataPrefix=prefix, **scope)
        check(answer)
        assert sorted(answer.xpath("//oai:header/oai:identifier/text()")) == clean, verb
    for old in broken:
        # the identifier as a list would have shown it is no record's
        mended = await oai_get(
            provider.oai, verb="GetRecord", metadataPrefix="iso19139", identifier=old + "\ufffd"
        )
        check(mended)
        assert mended.errors() == ["idDoesNotExist"]
    assert (await counts(provider, "wiscat_oai_records_with_invalid_characters", "outcome"))[
        "unlisted"
    ] == 3 * 3
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(repr(identifiers[1] + "\x0b") in line for line in errors), errors


async def test_p14_a_set_whose_spec_breaks_the_pattern_is_named_nowhere(
    db: Pool, provider: RunningProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    identifiers = await factories.load_records(db, OWN, range(4))
    await db.execute("insert into sets (spec, name, kind) values ($1, 'Bad', 'other')", BAD_SET)
    await db.execute(
        "insert into set_members (set_spec, identifier, datestamp) "
        "select $1, identifier, datestamp from records where identifier = any($2::text[])",
        BAD_SET,
        identifiers[:2],
    )
    await db.execute(
        "update records set set_specs = set_specs || $1::text where identifier = any($2::text[])",
        BAD_SET,
        identifiers[:2],
    )
    sets = await oai_get(provider.oai, verb="ListSets")
    check(sets)
    assert BAD_SET not in sets.xpath("//oai:setSpec/text()")
    assert OWN in sets.xpath("//oai:setSpec/text()")
    for verb, prefix in [
        ("ListIdentifiers", "iso19139"),
        ("ListRecords", "oai_dc"),
        ("ListRecords", "iso19139"),
    ]:
        answer = await oai_get(provider.oai, verb=verb, metadataPrefix=prefix)
        check(answer)
        assert sorted(answer.xpath("//oai:header/oai:identifier/text()")) == sorted(identifiers)
        assert not any("BAD" in spec for spec in answer.xpath("//oai:setSpec/text()"))
    got = await oai_get(
        provider.oai, verb="GetRecord", metadataPrefix="oai_dc", identifier=identifiers[0]
    )
    check(got)
    assert OWN in got.xpath("//oai:setSpec/text()")
    unlisted = await counts(provider, "wiscat_oai_set_specs_unlisted", "where")
    assert unlisted["ListSets"] == 1 and unlisted["header"] >= 1 + 3
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(repr(BAD_SET) in line for line in errors), errors
