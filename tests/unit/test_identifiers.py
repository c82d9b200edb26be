"""Which identifiers an OAI-PMH answer can carry: the xs:anyURI rule, checked against the
validators themselves (libxml2 over the official OAI-PMH.xsd, and the anyURI datatype of the
``xmlschema`` package)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
import xmlschema
from lxml import etree

from tests.support.oai_validation import SCHEMAS, validate_oai
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.identifiers import any_uri_error

NOW = datetime(2025, 1, 1, tzinfo=UTC)

SCHEME = "a letter, then letters, digits, '+', '-' or '.'"
BRACKETS = "'[' or ']' outside the fragment and a host in brackets"

# value -> None (an anyURI), or the whole reason it is not one
CASES: dict[str, str | None] = {
    "urn:x-wmo:md:int.wmo.wis::FR-meteofrance-toulouse,GRIB,ARPEGE": None,
    "urn:x-wmo:md:de.dwd::ICON_EU": None,
    "http://gisc.example.org/records/1?format=iso#top": None,
    "local-id-1": None,
    "a%20b%C3%A9": None,
    # XML Schema 1.0 §3.2.17: what XLink escapes counts as escaped
    "a b": None,
    "a\tb": None,
    "é": None,
    "a<b>\"{|}\\^`'": None,
    "#": None,
    "?": None,
    "a:": None,
    "//host": None,
    "a#frag[1]": None,  # libxml2 takes brackets in a fragment (XPointer)
    "http://[::1]:8080/x": None,
    "http://[::ffff:192.0.2.1]/": None,
    "http://[::1%25eth0]/": None,
    "http://[v1.fe]/": None,
    "http://user:pw@host:65535/": None,
    "x://:80": None,
    # RFC 3986 (and libxml2) allow a ":" where the path begins; xmlschema's datatype refuses a
    # path that starts with one (below), which its validation of documents never asks
    "urn::x": None,
    "a[b]": BRACKETS,
    "[": BRACKETS,
    "urn:a:b/c[1]": BRACKETS,
    "http://h/?q=[1]": BRACKETS,
    "http://a]b/": BRACKETS,
    "a#b#c": "more than one '#'",
    "##": "more than one '#'",
    "a%zz": "a '%' not followed by two hexadecimal digits",
    "a%2": "a '%' not followed by two hexadecimal digits",
    "%": "a '%' not followed by two hexadecimal digits",
    "1a:b": f"'1a' before the first ':' is no URI scheme ({SCHEME})",
    "a_b:c": f"'a_b' before the first ':' is no URI scheme ({SCHEME})",
    "urn x:y": f"'urn x' before the first ':' is no URI scheme ({SCHEME})",
    ":x": f"nothing before the first ':', where a URI scheme must be ({SCHEME})",
    "::": f"nothing before the first ':', where a URI scheme must be ({SCHEME})",
    "http://h:xx/": "the authority 'h:xx' has a port that is not a number from 0 to 65535",
    "http://h:/": "the authority 'h:' has a port that is not a number from 0 to 65535",
    "http://h:65536/": "the authority 'h:65536' has a port that is not a number from 0 to 65535",
    "http://u@h@i/": "the authority 'u@h@i' is not [user@]host[:port]",
    "http://[::1]x/": "the authority '[::1]x' is not [user@]host[:port]",
    "http://[::1": "the authority '[::1' opens a '[' it does not close",
    "http://[zz]/": (
        "the authority '[zz]' has a host in brackets that is neither an IPv6 address nor an "
        "IPvFuture (RFC 3986 §3.2.2)"
    ),
}


@pytest.mark.parametrize(("value", "reason"), CASES.items())
def test_the_rule_and_its_reasons(value: str, reason: str | None) -> None:
    assert any_uri_error(value) == reason


@pytest.mark.parametrize("value", ["a\x01b", "a\ufffeb", "\x00"])
def test_text_no_xml_document_can_hold(value: str) -> None:
    code = f"U+{ord(value.strip('ab')):04X}"
    assert any_uri_error(value) == f"it holds {code}, which no XML document can carry"


def _libxml2_accepts(identifier: str) -> bool:
    """Whether libxml2 finds valid, against OAI-PMH.xsd, the answer that lists ``identifier``."""
    answer = (
        render.response_start(
            NOW,
            "http://node.example/oai",
            {"verb": "ListIdentifiers", "metadataPrefix": "iso19139"},
            "ListIdentifiers",
        )
        + render.header(identifier, NOW, [], False)
        + render.response_end("ListIdentifiers")
    )
    try:
        validate_oai(answer)
    except AssertionError:
        return False
    return True


@pytest.fixture(scope="module")
def xmlschema_any_uri() -> type:
    schema = xmlschema.XMLSchema(str(SCHEMAS / "OAI-PMH.xsd"))
    any_uri: type = schema.maps.types["{http://www.w3.org/2001/XMLSchema}anyURI"].datatype
    return any_uri


def _xmlschema_accepts(any_uri: type, identifier: str) -> bool:
    # The datatype xmlschema gives xs:anyURI (from elementpath): it collapses whitespace, then
    # parses with urllib. xmlschema's validation of a document does not call it (it takes any
    # string as an anyURI), so this is the strictest xmlschema gets.
    try:
        any_uri(identifier)
    except ValueError:
        return False
    return True


# Where the rule parts from "both validators accept": each refused by xmlschema's datatype
# alone, for a reason RFC 3986 does not have.
ONLY_XMLSCHEMA_REFUSES = {"urn::x"}


@pytest.mark.parametrize("value", list(CASES))
def test_the_rule_accepts_what_both_validators_accept(value: str, xmlschema_any_uri: type) -> None:
    both = _libxml2_accepts(value) and _xmlschema_accepts(xmlschema_any_uri, value)
    if value in ONLY_XMLSCHEMA_REFUSES:
        assert _libxml2_accepts(value) and not both
        both = True
    assert (any_uri_error(value) is None) == both


def test_the_rule_against_libxml2_over_random_text() -> None:
    """Seeded random text from the pieces URIs go wrong with: nothing the rule accepts is
    refused by libxml2, and what only the rule refuses has a host in brackets or a port (where
    it follows RFC 3986 and Python's URL parsing, which libxml2 does not)."""
    schema = etree.XMLSchema(
        etree.fromstring(
            b'<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
            b'<xs:element name="e" type="xs:anyURI"/></xs:schema>'
        )
    )
    pieces = [
        *("http:", "x:", "//", "/", "[", "]", "::1", "v1.x", "%41", "%", "%z", ":", "@"),
        *("#", "?", "a", "1", "_", " ", "é", "<", ":80", ":99999", "1.2.3.4", "-", "+"),
        *(".", "!", "'", "\t", "~", "[::1]", "A", "::", "\\", "0"),
    ]
    chosen = random.Random(20250101)
    accepted = refused_by_the_rule_alone = 0
    for _ in range(20_000):
        value = "".join(chosen.choice(pieces) for _ in range(chosen.randint(0, 8)))
        element = etree.Element("e")
        element.text = value
        by_libxml2 = schema.validate(etree.ElementTree(element))
        reason = any_uri_error(value)
        if reason is None:
            accepted += 1
            assert by_libxml2, value
        elif by_libxml2:
            refused_by_the_rule_alone += 1
            assert "[" in value.partition("#")[0] or ":99999" in value, (value, reason)
    assert accepted > 5_000 and refused_by_the_rule_alone > 0
