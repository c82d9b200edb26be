"""WCMP 1.3 records rendered as WCMP2: every record the mapping calls valid passes WMO's schema
and pywcmp 0.13.2's test suite, 12 of 12, offline; the report says what was guessed and dropped.
Generated records, the project's ISO 19139 fixtures, and hostile ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema.protocols import Validator
from lxml import etree

from tests.support.wcmp2_documents import (
    NS,
    OAI,
    RULES,
    edited,
    remove,
    replace_text,
    report,
)
from tests.support.wcmp2_suite import SCHEMA, Suite, failures
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import GCO, GMD, GML, RecordError, record_from_element
from wiscat.shared.oaipmh.pages import PageReader, RecordItem
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.convert import Conversion, convert
from wiscat.shared.wcmp2.identifiers import from_wcmp2_id
from wiscat.shared.wcmp2.validation import schema_errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = SCHEMA.parent / "examples"


def party(body: str, role: str) -> etree._Element:
    return etree.fromstring(
        f'<gmd:pointOfContact xmlns:gmd="{GMD}" xmlns:gco="{GCO}"><gmd:CI_ResponsibleParty>'
        f"{body}<gmd:role><gmd:CI_RoleCode codeList='x' codeListValue='{role}'/></gmd:role>"
        "</gmd:CI_ResponsibleParty></gmd:pointOfContact>"
    )


def add_party(root: etree._Element, body: str, role: str) -> None:
    [abstract] = root.xpath("//gmd:abstract", namespaces=NS)
    abstract.addnext(party(body, role))


def cs(text: str) -> str:
    return f"<gco:CharacterString>{text}</gco:CharacterString>"


# --- what WMO publishes, and what wiscat makes ------------------------------------------------


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_the_official_examples_pass_the_schema_as_loaded(example: Path, schema: Validator) -> None:
    assert schema_errors(json.loads(example.read_bytes()), schema) == []


def test_the_schema_as_loaded_checks_formats(schema: Validator) -> None:
    record = json.loads(
        (EXAMPLES / "de-dwd.surface-weather-observations-realtime.json").read_text()
    )
    record["properties"]["created"] = "yesterday"
    assert schema_errors(record, schema) == [
        "schema: $.properties.created: 'yesterday' is not a 'date-time'"
    ]


def test_generated_records(announceable: Callable[[bytes], Conversion]) -> None:
    for n in range(0, 240, 7):
        for version in (0, 2):
            conversion = announceable(generate_record(n, version=version))
            assert from_wcmp2_id(conversion.record["id"]) == ("de-dwd", identifier_for(n))


def test_a_generated_record_mapped_whole(announceable: Callable[[bytes], Conversion]) -> None:
    conversion = announceable(generate_record(7))  # CLIMAT, WMOAdditional
    record = conversion.record
    assert record["id"] == "urn:wmo:md:de-dwd:int.wmo.wis::xx.climat.7"
    assert record["time"]["interval"][0].endswith("-01-01")
    assert record["geometry"]["type"] == "Polygon"
    props = record["properties"]
    assert props["title"].endswith("#7")
    assert props["description"].startswith("Monthly climate summaries")
    assert props["wmo:dataPolicy"] == "recommended"
    assert props["themes"][0]["concepts"][0]["id"] == "climate"
    assert {"id": "climatology"} in props["themes"][1]["concepts"]
    [contact] = props["contacts"]  # the metadata contact and the originator are one party
    assert contact["organization"] == "National Meteorological Service of XX"
    assert contact["roles"] == ["host", "producer"]
    assert props["created"] < props["updated"] == "2015-01-01T00:11:19Z"
    rels = [link["rel"] for link in record["links"]]
    assert rels == ["data", "license", "alternate"]
    assert record["links"][1]["href"] == "https://www.dwd.de/terms"
    assert record["links"][2]["href"] == (
        f"{OAI}?verb=GetRecord&metadataPrefix=iso19139&identifier="
        "urn%3Ax-wmo%3Amd%3Aint.wmo.wis%3A%3Axx.climat.7"
    )
    assert conversion.dropped == ("GTSPriority4 (GTS priority: WIS2 has no GTS)",)
    assert conversion.guessed == (
        "centre-id de-dwd, by the rule de-dwd=prefix:urn:x-wmo:md:int.wmo.wis::",
        "contact National Meteorological Service of XX: role host for ISO role pointOfContact, "
        "which the WCMP2 code list lacks",
        "licence link https://www.dwd.de/terms: the centre's (de-dwd=licence:...)",
    )


def test_the_bytes_are_stable() -> None:
    first = convert(generate_record(3), RULES).content()
    assert first == convert(generate_record(3).decode(), RULES).content()
    assert first.startswith(b'{"conformsTo":["http://wis.wmo.int/spec/wcmp/2/conf/core"],')
    assert b"\n" not in first and b": " not in first


def fixture_records() -> list[tuple[str, etree._Element]]:
    found = []
    whole = ROOT / "tests" / "fuzz" / "corpus" / "page" / "ListRecords-whole-records.xml"
    for path in [*sorted((ROOT / "tests" / "data" / "oai").glob("*.xml")), whole]:
        if path.name.startswith(("malformed-", "error-", "not-oai")):
            continue
        for item in PageReader(path.read_bytes()).items():
            if isinstance(item, RecordItem) and item.metadata is not None:
                try:
                    record = record_from_element(item.metadata, safe_parsed=True)
                except RecordError:
                    continue  # never stored, so never converted
                found.append((f"{path.name}:{record.identifier}", record.xml))
    return found


def test_the_project_fixtures(suite: Suite, schema: Validator) -> None:
    """The OAI-PMH fixtures' records: the whole ones are valid; the bare ones (a
    fileIdentifier alone) are not, and say why, without an exception."""
    seen = {"valid": 0, "invalid": 0}
    for name, xml in fixture_records():
        conversion = convert(xml, RULES, oai_base_url=OAI)
        if conversion.valid:
            seen["valid"] += 1
            assert schema_errors(conversion.record, schema) == [], name
            assert failures(suite.run(conversion.record)) == [], name
        else:
            seen["invalid"] += 1
            assert "no title (gmd:citation/gmd:CI_Citation/gmd:title)" in conversion.invalid
            assert "no contact with an organisation (WCMP2 needs one)" in conversion.invalid
    assert seen == {"valid": 2, "invalid": 3}


def test_every_element_can_be_missing(suite: Suite, schema: Validator) -> None:
    """Each element of a whole record taken out in turn: the result is valid (schema and
    pywcmp agree) or lists its reasons; nothing raises but a record without fileIdentifier."""
    data = generate_record(11)
    count = sum(1 for _ in etree.fromstring(data).iter(etree.Element))
    reasons: set[str] = set()
    for index in range(1, count):
        copy = etree.fromstring(data)
        element = list(copy.iter(etree.Element))[index]
        path = copy.getroottree().getpath(element)
        element.getparent().remove(element)
        try:
            conversion = convert(etree.tostring(copy), RULES)
        except RecordError:
            assert path.startswith("/gmd:MD_Metadata/gmd:fileIdentifier"), path
            continue
        if conversion.valid:
            assert schema_errors(conversion.record, schema) == []
            assert failures(suite.run(conversion.record)) == []
        else:
            reasons.update(conversion.invalid)
    assert reasons == {
        "no title (gmd:citation/gmd:CI_Citation/gmd:title)",
        "no link (WCMP2 needs one)",  # the data link gone, and no oai_base_url given
    }


def not_an_iso_record() -> None:
    with pytest.raises(RecordError, match="expected gmd:MD_Metadata"):
        convert(b"<a/>", RULES)


def test_a_document_that_is_no_record_is_refused() -> None:
    not_an_iso_record()
    with pytest.raises(RecordError, match="DOCTYPE"):
        convert(b'<!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>', RULES)


# --- hostile records ---------------------------------------------------------------------------


def props(conversion: Conversion) -> dict[str, Any]:
    result: dict[str, Any] = conversion.record["properties"]
    return result


TEMPORAL = "//gmd:temporalElement"
POLICY = "//gmd:otherConstraints[1]/gco:CharacterString"


def test_no_temporal_extent(announceable: Callable[[bytes], Conversion]) -> None:
    conversion = announceable(edited(lambda root: remove(root, TEMPORAL)))
    assert "time" in conversion.record
    assert conversion.record["time"] is None
    assert b'"time":null' in conversion.content()


ORIGINATOR_TWO = (
    f"<gmd:organisationName>{cs('Second Centre')}</gmd:organisationName>"
    "<gmd:contactInfo><gmd:CI_Contact><gmd:phone><gmd:CI_Telephone>"
    f"<gmd:voice>{cs('+49 (0)69 8062-0')}</gmd:voice>"
    f"<gmd:voice>{cs('0033 5 61 07 80 80')}</gmd:voice>"
    f"<gmd:voice>{cs('069 8062 1')}</gmd:voice>"
    f"<gmd:facsimile>{cs('+49 69 8062 4444')}</gmd:facsimile>"
    "</gmd:CI_Telephone></gmd:phone></gmd:CI_Contact></gmd:contactInfo>"
)


def test_two_contacts_with_one_role_a_fax_and_phones_with_spaces(
    announceable: Callable[[bytes], Conversion],
) -> None:
    conversion = announceable(
        edited(lambda root: add_party(root, ORIGINATOR_TWO, "originator"), n=6)
    )
    contacts = props(conversion)["contacts"]
    assert [(c["organization"], c["roles"]) for c in contacts] == [
        ("National Meteorological Service of XX", ["host", "producer"]),
        ("Second Centre", ["producer"]),
    ]
    assert contacts[1]["phones"] == [{"value": "+496980620"}, {"value": "+33561078080"}]
    assert "4444" not in conversion.content().decode()
    said = report(conversion)
    assert "contact Second Centre: fax '+49 69 8062 4444' (WCMP2 has no fax)" in said
    assert "contact Second Centre: phone '069 8062 1', not an international number" in said


def test_never_the_publisher_role(announceable: Callable[[bytes], Conversion]) -> None:
    conversion = announceable(
        edited(
            lambda root: add_party(
                root, f"<gmd:organisationName>{cs('P')}</gmd:organisationName>", "publisher"
            )
        )
    )
    assert ["host"] in [c["roles"] for c in props(conversion)["contacts"]]
    assert b"publisher" not in conversion.content()


@pytest.mark.parametrize(
    ("keyword", "policy"),
    [
        ("WMOEssential", "core"),
        ("NoLimitation", "core"),
        ("WMOAdditional", "recommended"),
        ("WMOOther", "recommended"),
        ("WMO Essential ", "core"),
    ],
)
def test_each_data_policy_keyword(
    announceable: Callable[[bytes], Conversion], keyword: str, policy: str
) -> None:
    conversion = announceable(edited(lambda root: replace_text(root, POLICY, keyword)))
    assert props(conversion)["wmo:dataPolicy"] == policy
    assert "data policy" not in " ".join(conversion.guessed)
    licensed = [link["href"] for link in conversion.record["links"] if link["rel"] == "license"]
    assert licensed == (["https://www.dwd.de/terms"] if policy == "recommended" else [])


def test_no_data_policy_keyword_is_a_guess(announceable: Callable[[bytes], Conversion]) -> None:
    conversion = announceable(edited(lambda root: replace_text(root, POLICY, "Use freely")))
    assert props(conversion)["wmo:dataPolicy"] == "recommended"
    assert "data policy recommended: the record has no WMO_DataLicenseCode" in conversion.guessed
    assert props(conversion)["rights"] == "Use freely"


def test_two_data_policies_are_a_guess(announceable: Callable[[bytes], Conversion]) -> None:
    conversion = announceable(
        edited(
            lambda root: (
                replace_text(root, "//gmd:otherConstraints/gco:CharacterString", "x")
                or replace_text(root, POLICY, "WMOEssential")
                or replace_text(root, "//gmd:otherConstraints[2]/gco:CharacterString", "WMOOther")
            )
        )
    )
    assert props(conversion)["wmo:dataPolicy"] == "recommended"
    assert (
        "data policy recommended: the record says both (WMOEssential, WMOOther)"
        in conversion.guessed
    )


def test_recommended_data_without_a_licence_is_not_valid() -> None:
    conversion = convert(generate_record(1), parse_rules("de-dwd"))  # WMOAdditional
    assert conversion.invalid == (
        "recommended data needs a licence link, and the record names none: give its centre one "
        "(de-dwd=licence:URL in WISCAT_WIS2_CENTRES)",
        "recommended data without a link of relation license",
    )


def test_an_unknown_originator_has_no_centre() -> None:
    conversion = convert(generate_record(6), parse_rules("fr-meteofrance=originator:Météo-France"))
    assert conversion.record["id"] is None
    assert conversion.invalid[0] == (
        "no centre-id: no rule of WISCAT_WIS2_CENTRES matches the fileIdentifier or an "
        "organisation (National Meteorological Service of XX)"
    )
    nothing = convert(generate_record(6), ())
    assert nothing.invalid[0] == "no centre-id: WISCAT_WIS2_CENTRES names no WIS2 centre"


def test_a_known_originator_names_the_centre(announceable: Callable[[bytes], Conversion]) -> None:
    def edit(root: etree._Element) -> None:
        replace_text(root, "//gmd:organisationName/gco:CharacterString", "MÉTÉO-France")
        replace_text(
            root, "gmd:fileIdentifier/gco:CharacterString", "urn:x-wmo:md:fr.meteofrance::x"
        )

    conversion = announceable(edited(edit, n=6))
    assert conversion.record["id"] == "urn:wmo:md:fr-meteofrance:fr.meteofrance::x"
    assert (
        "centre-id fr-meteofrance, by the rule fr-meteofrance=originator:Météo-France"
        in conversion.guessed
    )


@pytest.mark.parametrize(
    "fid",
    [
        "x-wmo::ABCD01 EDZW",
        "urn:x-wmo:md:int.wmo.test::prévision été",
        "urn:x-wmo:md:int.wmo.test::",
        "urn:x-wmo:md:int.wmo.test::気象/データ",
    ],
)
def test_hostile_identifiers(announceable: Callable[[bytes], Conversion], fid: str) -> None:
    rules = parse_rules("int-wmo-test")
    data = edited(
        lambda root: replace_text(root, "gmd:fileIdentifier/gco:CharacterString", fid), n=6
    )
    conversion = convert(data, rules)
    assert conversion.valid, conversion.invalid
    assert from_wcmp2_id(conversion.record["id"]) == ("int-wmo-test", fid)


def test_no_theme_is_a_guess(announceable: Callable[[bytes], Conversion]) -> None:
    def edit(root: etree._Element) -> None:
        remove(root, "//gmd:descriptiveKeywords[1]")
        remove(root, "//gmd:topicCategory")

    conversion = announceable(edited(edit, n=11))
    assert props(conversion)["themes"][0]["concepts"][0]["id"] == "weather"
    assert any(line.startswith("earth-system discipline weather:") for line in conversion.guessed)


def test_distribution_scope_and_gts_priority_are_dropped(
    announceable: Callable[[bytes], Conversion],
) -> None:
    def edit(root: etree._Element) -> None:
        [place] = root.xpath("//gmd:descriptiveKeywords[2]//gmd:keyword", namespaces=NS)[:1]
        place.getparent().insert(
            0,
            etree.fromstring(
                f'<gmd:keyword xmlns:gmd="{GMD}" xmlns:gco="{GCO}">'
                f"{cs('GlobalExchange')}</gmd:keyword>"
            ),
        )

    conversion = announceable(edited(edit, n=6))
    assert "GlobalExchange" not in props(conversion)["keywords"]
    said = report(conversion)
    assert "GlobalExchange (distribution scope" in said and "(GTS priority" in said


def test_time_resolution_and_instants(announceable: Callable[[bytes], Conversion]) -> None:
    def hourly(root: etree._Element) -> None:
        [period] = root.xpath("//gml:TimePeriod", namespaces=NS)
        etree.SubElement(period, f"{{{GML}}}timeInterval", unit="hour").text = "3"

    assert announceable(edited(hourly)).record["time"]["resolution"] == "PT3H"

    def instant(root: etree._Element) -> None:
        [period] = root.xpath("//gml:TimePeriod", namespaces=NS)
        period.getparent().replace(
            period,
            etree.fromstring(
                f'<gml:TimeInstant xmlns:gml="{GML}" gml:id="t"><gml:timePosition>'
                "2024-05-01T12:00:00+02:00</gml:timePosition></gml:TimeInstant>"
            ),
        )

    assert announceable(edited(instant)).record["time"] == {"timestamp": "2024-05-01T10:00:00Z"}


def test_a_service_record(announceable: Callable[[bytes], Conversion]) -> None:
    def edit(root: etree._Element) -> None:
        [scope] = root.xpath("//gmd:MD_ScopeCode", namespaces=NS)
        scope.set("codeListValue", "service")

    assert props(announceable(edited(edit)))["type"] == "service"


@pytest.mark.parametrize(
    ("begin", "end", "interval", "dropped"),
    [
        ("2020-05-01Z", "2021-02", ["2020-05-01", "2021-02"], None),
        ("2020-05-01T01:30:00+02:00", "", ["2020-04-30T23:30:00Z", ".."], None),
        ("2020", "2020-01-01T00:00:00Z", ["2020", "2020-01-01T00:00:00Z"], None),
        ("2020-05-01", "2020-04-30", None, "it ends before it begins"),
        ("yesterday", "", None, "not ISO 8601 dates"),
        ("2020-02-30", "", None, "not ISO 8601 dates"),
        ("", "", None, "open at both ends"),
    ],
)
def test_temporal_extents(
    announceable: Callable[[bytes], Conversion],
    begin: str,
    end: str,
    interval: list[str] | None,
    dropped: str | None,
) -> None:
    def edit(root: etree._Element) -> None:
        [period] = root.xpath("//gml:TimePeriod", namespaces=NS)
        for position, text in zip(period, (begin, end), strict=True):
            position.attrib.clear()
            position.text = text

    conversion = announceable(edited(edit))
    time = conversion.record["time"]
    assert (time and time["interval"]) == interval
    if dropped:
        assert dropped in report(conversion)


def test_contact_links_and_mails(announceable: Callable[[bytes], Conversion]) -> None:
    body = (
        f"<gmd:organisationName>{cs('Web Centre')}</gmd:organisationName>"
        "<gmd:contactInfo><gmd:CI_Contact><gmd:address><gmd:CI_Address>"
        f"<gmd:electronicMailAddress>{cs('not an address')}</gmd:electronicMailAddress>"
        f"<gmd:electronicMailAddress>{cs('wis@example.org')}</gmd:electronicMailAddress>"
        "</gmd:CI_Address></gmd:address><gmd:onlineResource><gmd:CI_OnlineResource>"
        f"<gmd:linkage><gmd:URL>https://example.org/a b?x=1</gmd:URL></gmd:linkage>"
        "</gmd:CI_OnlineResource></gmd:onlineResource><gmd:onlineResource><gmd:CI_OnlineResource>"
        "<gmd:linkage><gmd:URL>https://example.org/météo?q=%20</gmd:URL></gmd:linkage>"
        "</gmd:CI_OnlineResource></gmd:onlineResource><gmd:onlineResource><gmd:CI_OnlineResource>"
        "<gmd:linkage><gmd:URL>www.example.org</gmd:URL></gmd:linkage>"
        "</gmd:CI_OnlineResource></gmd:onlineResource></gmd:CI_Contact></gmd:contactInfo>"
    )
    conversion = announceable(edited(lambda root: add_party(root, body, "custodian"), n=6))
    [contact] = [c for c in props(conversion)["contacts"] if c["organization"] == "Web Centre"]
    assert contact["roles"] == ["host"]
    assert contact["emails"] == [{"value": "wis@example.org"}]
    assert [link["href"] for link in contact["links"]] == [
        "https://example.org/m%C3%A9t%C3%A9o?q=%20"
    ]
    said = report(conversion)
    assert "contact Web Centre: e-mail 'not an address', not an address" in said
    assert "contact Web Centre: link 'https://example.org/a b?x=1', not an http(s) URL" in said
    assert "contact Web Centre: link 'www.example.org', not an http(s) URL" in said
