"""The deterministic WMO Core record generator used by tests and benchmarks."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pytest
from lxml import etree

from wiscat.shared.generator import (
    METADATA_STANDARD_NAME,
    default_md_datestamp,
    generate_record,
    generate_records,
    identifier_for,
)
from wiscat.shared.iso19139 import NAMESPACES, Record, parse_record, parse_xml

RANGE = range(1000)


@pytest.fixture(scope="module")
def records() -> list[bytes]:
    return [generate_record(n) for n in RANGE]


@pytest.fixture(scope="module")
def parsed(records: list[bytes]) -> list[Record]:
    # Parsing hashes each record; once for the module keeps the unit tests fast.
    return [parse_record(data) for data in records]


def texts(document: bytes, path: str) -> list[str]:
    root = parse_xml(document)
    return [(element.text or "").strip() for element in root.iterfind(path, NAMESPACES)]


IDENT = "gmd:identificationInfo/gmd:MD_DataIdentification/"
ABSTRACT = IDENT + "gmd:abstract/gco:CharacterString"
OTHER_CONSTRAINTS = (
    IDENT + "gmd:resourceConstraints/gmd:MD_LegalConstraints/gmd:otherConstraints/"
    "gco:CharacterString"
)


def test_same_arguments_give_the_same_bytes(records: list[bytes]) -> None:
    for n in (0, 1, 17, 999):
        assert generate_record(n) == records[n]
    assert generate_record(5, centre="de", version=2) == generate_record(5, centre="de", version=2)


def test_output_does_not_depend_on_call_order() -> None:
    later = generate_record(400)
    for n in range(10):
        generate_record(n)
    assert generate_record(400) == later


def test_identifiers_are_distinct_and_predictable(parsed: list[Record]) -> None:
    identifiers = [record.identifier for record in parsed]
    assert identifiers == [identifier_for(n) for n in RANGE]
    assert len(set(identifiers)) == len(identifiers)
    assert identifiers[7].startswith("urn:x-wmo:md:int.wmo.wis::xx.")
    assert identifiers[7].endswith(".7")


def test_centre_goes_into_the_identifier() -> None:
    record = parse_record(generate_record(3, centre="de"))
    assert record.identifier == identifier_for(3, centre="de")
    assert record.identifier.startswith("urn:x-wmo:md:int.wmo.wis::de.")
    assert identifier_for(3, "de") != identifier_for(3, "fr")


def test_sizes_are_those_of_real_records(records: list[bytes]) -> None:
    sizes = [len(data) for data in records]
    sizes += [len(generate_record(n, version=7, centre="offenbach")) for n in range(0, 1000, 7)]
    assert min(sizes) >= 5_000
    assert max(sizes) <= 10_000


def test_every_record_parses_safely(records: list[bytes], parsed: list[Record]) -> None:
    for n, (data, record) in enumerate(zip(records, parsed, strict=True)):
        assert data.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')
        assert record.md_datestamp == default_md_datestamp(n)


def test_records_differ_in_content(records: list[bytes], parsed: list[Record]) -> None:
    abstracts = [texts(data, ABSTRACT)[0] for data in records]
    assert len(set(abstracts)) == len(abstracts)
    assert len({len(a) for a in abstracts}) > 50
    hashes = {record.content_hash for record in parsed}
    assert len(hashes) == len(records)


def test_data_policies_cover_all_three(records: list[bytes]) -> None:
    policies: Counter[str] = Counter()
    for data in records:
        constraints = texts(data, OTHER_CONSTRAINTS)
        assert len(constraints) == 2
        policy, priority = constraints
        assert policy in {"WMOEssential", "WMOAdditional", "WMOOther"}
        assert priority in {"GTSPriority1", "GTSPriority2", "GTSPriority3", "GTSPriority4"}
        policies[policy] += 1
    assert min(policies.values()) > 200


def test_wmo_core_content() -> None:
    data = generate_record(12)
    root = parse_xml(data)

    def one(path: str) -> str:
        found = texts(data, path)
        assert len(found) == 1, path
        return found[0]

    assert one("gmd:metadataStandardName/gco:CharacterString") == METADATA_STANDARD_NAME
    assert one("gmd:metadataStandardVersion/gco:CharacterString") == "1.3"
    assert one("gmd:language/gmd:LanguageCode") == "eng"
    assert one("gmd:contact/gmd:CI_ResponsibleParty/gmd:organisationName/gco:CharacterString")
    email = one(
        "gmd:contact/gmd:CI_ResponsibleParty/gmd:contactInfo/gmd:CI_Contact/gmd:address/"
        "gmd:CI_Address/gmd:electronicMailAddress/gco:CharacterString"
    )
    assert "@" in email
    role = root.find("gmd:contact/gmd:CI_ResponsibleParty/gmd:role/gmd:CI_RoleCode", NAMESPACES)
    assert role is not None and role.get("codeListValue") == "pointOfContact"
    assert one(IDENT + "gmd:citation/gmd:CI_Citation/gmd:title/gco:CharacterString")
    assert one(IDENT + "gmd:citation/gmd:CI_Citation/gmd:date/gmd:CI_Date/gmd:date/gco:Date")
    assert one(IDENT + "gmd:topicCategory/gmd:MD_TopicCategoryCode")
    assert one(IDENT + "gmd:language/gmd:LanguageCode") == "eng"

    keywords = root.findall(IDENT + "gmd:descriptiveKeywords/gmd:MD_Keywords", NAMESPACES)
    kinds = {}
    for block in keywords:
        kind = block.find("gmd:type/gmd:MD_KeywordTypeCode", NAMESPACES)
        thesaurus = block.find(
            "gmd:thesaurusName/gmd:CI_Citation/gmd:title/gco:CharacterString", NAMESPACES
        )
        assert kind is not None and thesaurus is not None
        words = block.findall("gmd:keyword/gco:CharacterString", NAMESPACES)
        assert words
        kinds[kind.get("codeListValue")] = thesaurus.text
    assert kinds["theme"] == "WMO_CategoryCode"
    assert "place" in kinds

    box = IDENT + "gmd:extent/gmd:EX_Extent/gmd:geographicElement/gmd:EX_GeographicBoundingBox/"
    west = float(one(box + "gmd:westBoundLongitude/gco:Decimal"))
    east = float(one(box + "gmd:eastBoundLongitude/gco:Decimal"))
    south = float(one(box + "gmd:southBoundLatitude/gco:Decimal"))
    north = float(one(box + "gmd:northBoundLatitude/gco:Decimal"))
    assert -180 <= west < east <= 180
    assert -90 <= south < north <= 90
    period = root.find(
        IDENT + "gmd:extent/gmd:EX_Extent/gmd:temporalElement/gmd:EX_TemporalExtent/"
        "gmd:extent/gml:TimePeriod",
        NAMESPACES,
    )
    assert period is not None
    begin = period.find("gml:beginPosition", NAMESPACES)
    assert begin is not None and begin.text is not None and len(begin.text) == 10

    url = one(
        "gmd:distributionInfo/gmd:MD_Distribution/gmd:transferOptions/"
        "gmd:MD_DigitalTransferOptions/gmd:onLine/gmd:CI_OnlineResource/gmd:linkage/gmd:URL"
    )
    assert url.startswith("https://")


def test_gml_ids_are_unique_per_record() -> None:
    ids = set()
    for n in range(50):
        root = parse_xml(generate_record(n))
        ids.update(root.xpath("//@gml:id", namespaces=NAMESPACES))
    assert len(ids) == 50


def test_version_bump_is_an_update() -> None:
    first = parse_record(generate_record(9))
    second = parse_record(generate_record(9, version=1))
    third = parse_record(generate_record(9, version=2))

    assert first.identifier == second.identifier == third.identifier
    assert len({first.content_hash, second.content_hash, third.content_hash}) == 3
    assert first.md_datestamp is not None and second.md_datestamp is not None
    assert third.md_datestamp is not None
    assert first.md_datestamp < second.md_datestamp < third.md_datestamp
    assert "Revision 2:" in texts(generate_record(9, version=2), ABSTRACT)[0]
    assert "Revision" not in texts(generate_record(9), ABSTRACT)[0]


def test_later_versions_stay_newer_than_later_records() -> None:
    # The step per version is far larger than the step per record of nearby numbers.
    assert default_md_datestamp(0, version=1) > default_md_datestamp(1000)


def test_explicit_md_datestamp() -> None:
    aware = datetime(2024, 3, 4, 12, 30, 15, 999, tzinfo=timezone(timedelta(hours=2)))
    assert parse_record(generate_record(1, md_datestamp=aware)).md_datestamp == datetime(
        2024, 3, 4, 10, 30, 15, tzinfo=UTC
    )
    naive = datetime(2024, 3, 4, 12, 30, 15)
    assert parse_record(generate_record(1, md_datestamp=naive)).md_datestamp == datetime(
        2024, 3, 4, 12, 30, 15, tzinfo=UTC
    )


def test_same_datestamp_different_version_still_differs() -> None:
    stamp = datetime(2024, 1, 1, tzinfo=UTC)
    a = parse_record(generate_record(4, md_datestamp=stamp))
    b = parse_record(generate_record(4, version=1, md_datestamp=stamp))
    assert a.md_datestamp == b.md_datestamp
    assert a.content_hash != b.content_hash


def test_centre_is_escaped() -> None:
    record = parse_record(generate_record(2, centre='a&b<"c>'))
    assert record.identifier == identifier_for(2, centre='a&b<"c>')
    assert 'a&b<"c>' in record.identifier


def test_generate_records_range() -> None:
    batch = list(generate_records(5, start=10, centre="fr", version=1))
    assert batch == [generate_record(n, centre="fr", version=1) for n in range(10, 15)]
    assert list(generate_records(0)) == []


def test_negative_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        generate_record(-1)
    with pytest.raises(ValueError):
        generate_record(1, version=-1)


def test_output_is_indented_and_plain_xml() -> None:
    data = generate_record(0)
    assert b"\n  <gmd:fileIdentifier>" in data
    # Still well-formed for an ordinary (non-safe) parser too.
    assert etree.fromstring(data).tag.endswith("MD_Metadata")
