"""The validator the provider's tests use checks the records it serves strictly against the
official ISO 19139 gmd schema (RELIABILITY P01), offline: a generated record passes, one with a
misspelt or misplaced gmd element does not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support.oai_validation import validate_oai
from wiscat.shared.generator import generate_record
from wiscat.shared.oaipmh import render

ASKED = {
    "verb": "GetRecord",
    "identifier": "urn:x-wmo:md:int.wmo.test:0",
    "metadataPrefix": "iso19139",
}


def answer(record: bytes) -> bytes:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return (
        render.response_start(now, "http://127.0.0.1:8080/oai", ASKED, "GetRecord")
        + render.record(ASKED["identifier"], now, ("WIS-CATALOGUE",), False, record)
        + render.response_end("GetRecord")
    )


def test_p01_a_generated_record_is_valid_iso_19139() -> None:
    for n in range(20):
        validate_oai(answer(generate_record(n)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ((b"gmd:language>", b"gmd:langage>"), "langage': This element is not expected"),
        ((b"<gmd:fileIdentifier>", b"<gmd:fileIdentifier><gmd:title/>"), "title"),
    ],
)
def test_p01_a_record_that_breaks_the_gmd_schema_is_refused(
    change: tuple[bytes, bytes], message: str
) -> None:
    record = generate_record(0).replace(*change)
    with pytest.raises(AssertionError, match="does not validate") as refused:
        validate_oai(answer(record))
    assert message in str(refused.value)
