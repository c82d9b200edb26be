"""Whatever a WCMP 1.3 record holds, a record the WCMP2 mapping calls valid passes WMO's schema
and pywcmp 0.13.2's test suite: Hypothesis writes any text into the values a record carries
(names, titles, phones, e-mails, URLs, boxes, dates, policies) and checks that the mapping never
raises and never calls valid what WMO's checks refuse."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema.protocols import Validator
from lxml import etree

from tests.support.wcmp2_suite import SCHEMA, Suite, failures, session_suite
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import GCO, GMD, GML
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.convert import convert
from wiscat.shared.wcmp2.validation import load_schema, schema_errors

RULES = parse_rules("int-wmo-test;int-wmo-test=licence:https://example.org/terms")
NS = {"gmd": GMD, "gco": GCO, "gml": GML}

# text an XML document can hold (no control characters, surrogates or non-characters)
xml_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Cn")), max_size=30
) | st.sampled_from(["", " ", "  x  "])
# a scheme, an authority (a good one, or one RFC 3986 refuses), and any text
urls = st.tuples(
    st.sampled_from(["https://", "http://", "ftp://", "mqtt://", "www.", ""]),
    st.sampled_from(
        ["example.org", "example.org:8080", "[::1]", "::", "a:b", "%zz", "é.example", ""]
    ),
    xml_text,
).map("".join)
numbers = (
    st.floats(allow_nan=True, allow_infinity=True).map(str)
    | st.integers(-400, 400).map(str)
    | xml_text
)
moments = (
    st.dates().map(str)
    | st.datetimes().map(lambda d: d.isoformat(timespec="seconds") + "Z")
    | st.sampled_from(["2020", "2020-05", "2020-05-01Z", "2020-02-30", "9999-12-31T23:59:59Z"])
    | xml_text
)
policies = st.sampled_from(["WMOEssential", "WMOAdditional", "WMOOther", "NoLimitation"]) | xml_text

# where each value goes in a generated record (record 6: NWP, one box, one period)
PLACES = {
    "organisation": "//gmd:organisationName/gco:CharacterString",
    "title": "//gmd:citation//gmd:title/gco:CharacterString",
    "abstract": "//gmd:abstract/gco:CharacterString",
    "email": "//gmd:electronicMailAddress/gco:CharacterString",
    "url": "//gmd:linkage/gmd:URL",
    "west": "//gmd:westBoundLongitude/gco:Decimal",
    "east": "//gmd:eastBoundLongitude/gco:Decimal",
    "south": "//gmd:southBoundLatitude/gco:Decimal",
    "north": "//gmd:northBoundLatitude/gco:Decimal",
    "begin": "//gml:beginPosition",
    "policy": "//gmd:otherConstraints[1]/gco:CharacterString",
    "keyword": "//gmd:keyword[1]/gco:CharacterString",
    "published": "//gmd:citation//gmd:date/gco:Date",
}
VALUES = {
    "organisation": xml_text,
    "title": xml_text,
    "abstract": xml_text,
    "email": xml_text,
    "url": urls,
    "west": numbers,
    "east": numbers,
    "south": numbers,
    "north": numbers,
    "begin": moments,
    "policy": policies,
    "keyword": xml_text | st.sampled_from(["GlobalExchange", "GTSPriority2", "spaceWeather"]),
    "published": moments,
}
# phone numbers and a contact link, added to the originator
contact_extras = st.tuples(xml_text | st.sampled_from(["+49 69 8062 0", "0033 1 23"]), urls)


class Checks:
    """WMO's schema and test suite, with a short repr (Hypothesis prints its arguments)."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.schema: Validator = load_schema(SCHEMA)

    def __repr__(self) -> str:
        return "Checks()"


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> Checks:
    return Checks(session_suite(tmp_path_factory))


def build(values: dict[str, str], phone: str, link: str) -> bytes:
    root = etree.fromstring(generate_record(6))
    for name, text in values.items():
        for element in root.xpath(PLACES[name], namespaces=NS):
            element.text = text
    [info] = root.xpath("//gmd:pointOfContact//gmd:CI_Contact", namespaces=NS)
    extra = etree.fromstring(
        f'<gmd:CI_Contact xmlns:gmd="{GMD}" xmlns:gco="{GCO}"><gmd:phone><gmd:CI_Telephone>'
        "<gmd:voice><gco:CharacterString/></gmd:voice></gmd:CI_Telephone></gmd:phone>"
        "<gmd:onlineResource><gmd:CI_OnlineResource><gmd:linkage><gmd:URL/></gmd:linkage>"
        "</gmd:CI_OnlineResource></gmd:onlineResource></gmd:CI_Contact>"
    )
    extra[0][0][0][0].text = phone
    extra[1][0][0][0].text = link
    info.insert(0, extra[0])
    info.append(extra[-1])
    return etree.tostring(root)


@settings(suppress_health_check=[HealthCheck.too_slow])  # pywcmp takes 30 ms an example
@given(values=st.fixed_dictionaries({}, optional=VALUES), extras=contact_extras)
def test_a_record_called_valid_passes_wmo_s_checks(
    checks: Checks, values: dict[str, str], extras: tuple[str, str]
) -> None:
    conversion = convert(build(values, *extras), RULES, oai_base_url="http://127.0.0.1:9/oai")
    if conversion.valid:
        assert schema_errors(conversion.record, checks.schema) == []
        assert failures(checks.suite.run(conversion.record)) == []
    else:
        assert conversion.record["id"] is None or conversion.invalid
