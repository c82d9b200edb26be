"""ISO 19139 records against hostile XML: entity expansion, external entities and DTDs, deep
nesting and huge text nodes are refused, and nothing is loaded."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from lxml import etree

from tests.support.canary import canary, knock
from tests.unit.iso_documents import NS_DECL, file_id, iso, reason
from wiscat.shared.iso19139 import (
    RecordError,
    parse_xml,
    record_from_element,
    safe_parser,
)

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE gmd:MD_Metadata [
  <!ENTITY lol "lol">
  <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
  <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
  <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
  <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
  <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
  <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
  <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
  <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
  <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd"
    xmlns:gco="http://www.isotc211.org/2005/gco">
  <gmd:fileIdentifier><gco:CharacterString>&lol9;</gco:CharacterString></gmd:fileIdentifier>
</gmd:MD_Metadata>
"""


def xxe_document(secret: Path) -> bytes:
    return f"""<?xml version="1.0"?>
<!DOCTYPE gmd:MD_Metadata [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>
<gmd:MD_Metadata {NS_DECL}>
  <gmd:fileIdentifier><gco:CharacterString>&xxe;</gco:CharacterString></gmd:fileIdentifier>
</gmd:MD_Metadata>
""".encode()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("TOP-SECRET-CONTENT")
    return path


class RecordingResolver(etree.Resolver):
    """Sees every external resource the parser tries to load, and serves a harmless stand-in."""

    def __init__(self) -> None:
        super().__init__()
        self.requested: list[str] = []

    def resolve(self, system_url: str, public_id: str, context: object) -> object:
        self.requested.append(system_url)
        return self.resolve_string("INTERCEPTED", context)


def test_billion_laughs_is_refused_quickly() -> None:
    started = time.perf_counter()
    message = reason(BILLION_LAUGHS)
    assert "DOCTYPE" in message
    assert time.perf_counter() - started < 1.0


def test_external_entity_is_refused(secret: Path) -> None:
    message = reason(xxe_document(secret))
    assert "DOCTYPE" in message
    assert "TOP-SECRET" not in message


def test_safe_parser_never_loads_the_external_entity(secret: Path) -> None:
    parser = safe_parser()
    resolver = RecordingResolver()
    parser.resolvers.add(resolver)

    root = etree.fromstring(xxe_document(secret), parser)

    assert resolver.requested == []
    assert b"TOP-SECRET" not in etree.tostring(root)
    assert b"INTERCEPTED" not in etree.tostring(root)


def test_recording_resolver_sees_loads_of_a_permissive_parser(secret: Path) -> None:
    # Control for the test above: the resolver does notice when a parser loads the entity.
    parser = etree.XMLParser(resolve_entities=True, load_dtd=True, no_network=True)
    resolver = RecordingResolver()
    parser.resolvers.add(resolver)

    root = etree.fromstring(xxe_document(secret), parser)

    assert resolver.requested == [secret.as_uri()]
    assert b"INTERCEPTED" in etree.tostring(root)


def test_parameter_entity_is_refused_without_loading(secret: Path) -> None:
    """X04: a parameter entity is refused and never loaded."""
    data = f"""<?xml version="1.0"?>
<!DOCTYPE gmd:MD_Metadata [<!ENTITY % remote SYSTEM "{secret.as_uri()}"> %remote;]>
<gmd:MD_Metadata {NS_DECL}>{file_id("a")}</gmd:MD_Metadata>""".encode()
    parser = safe_parser()
    resolver = RecordingResolver()
    parser.resolvers.add(resolver)
    etree.fromstring(data, parser)

    assert resolver.requested == []
    assert "DOCTYPE" in reason(data)


def test_external_dtd_is_refused(secret: Path) -> None:
    """X05: a document with an external DTD is refused."""
    data = f'<!DOCTYPE gmd:MD_Metadata SYSTEM "{secret.as_uri()}">'.encode() + iso(file_id("a"))
    assert "DOCTYPE" in reason(data)


def test_bare_doctype_is_refused() -> None:
    assert "DOCTYPE" in reason(b"<!DOCTYPE gmd:MD_Metadata>" + iso(file_id("a")))


def test_element_from_a_document_with_doctype_is_refused() -> None:
    """X06: a record declaring even a harmless internal entity is refused."""
    root = etree.fromstring(b'<!DOCTYPE x [<!ENTITY e "v">]>' + iso(file_id("&e;")))
    with pytest.raises(RecordError, match="DOCTYPE"):
        record_from_element(root)


def test_parse_xml_refuses_doctype_for_any_root() -> None:
    with pytest.raises(RecordError, match="DOCTYPE"):
        parse_xml(b'<!DOCTYPE a [<!ENTITY e "v">]><a>&e;</a>')


#: A quadratic blowup: one entity of 100,000 characters, referenced 10,000 times (a gigabyte
#: once expanded), which libxml2's nesting limit on entities does not catch.
QUADRATIC_BLOWUP = (
    b'<?xml version="1.0"?>\n<!DOCTYPE gmd:MD_Metadata [<!ENTITY a "'
    + b"a" * 100_000
    + b'">]>\n'
    + iso(file_id("&a;" * 10_000))
)


def test_x02_a_quadratic_blowup_is_refused_unexpanded() -> None:
    """X02: a quadratic-blowup record is refused for its DOCTYPE before any entity is read,
    within a second of CPU; the reason does not echo it."""
    started = time.process_time()
    message = reason(QUADRATIC_BLOWUP)
    assert message == (
        "document carries a DOCTYPE; DTDs and entity declarations are refused "
        "(billion-laughs and external-entity risk)"
    )
    assert "aaaa" not in message
    # and the safe parser, were it handed the document, refuses to expand it (libxml2's
    # amplification limit, which resolve_entities=False does not lift)
    with pytest.raises(etree.XMLSyntaxError, match="Maximum entity amplification factor"):
        etree.fromstring(QUADRATIC_BLOWUP, safe_parser())
    assert time.process_time() - started < 1.0


def test_x04_external_dtd_and_parameter_entity_on_http_never_connect() -> None:
    """X04: an external DTD, an external entity and a parameter entity naming an HTTP canary
    on loopback: each record is refused, and the canary counts 0 connections, through
    parse_record and through the safe parser itself."""
    with canary() as listening:
        url = listening.url
        documents = [
            f'<!DOCTYPE gmd:MD_Metadata SYSTEM "{url}x.dtd">'.encode() + iso(file_id("a")),
            f'<!DOCTYPE gmd:MD_Metadata PUBLIC "-//X//Y" "{url}y.dtd">'.encode()
            + iso(file_id("a")),
            f'<!DOCTYPE gmd:MD_Metadata [<!ENTITY e SYSTEM "{url}e">]>'.encode()
            + iso(file_id("&e;")),
            f'<!DOCTYPE gmd:MD_Metadata [<!ENTITY % p SYSTEM "{url}p"> %p;]>'.encode()
            + iso(file_id("a")),
        ]
        for document in documents:
            assert "DOCTYPE" in reason(document)
            with contextlib.suppress(etree.XMLSyntaxError):
                etree.fromstring(document, safe_parser())
        assert listening.connections == 0
        knock(listening)  # the control: a connection is counted
        assert listening.connections == 1


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"<gmd:x>" * 10_000 + b"</gmd:x>" * 10_000, "Excessive depth in document: 256"),
        (b"<gmd:abstract>" + b"x" * (11 * 1024 * 1024) + b"</gmd:abstract>", "Text node too long"),
    ],
    ids=["depth-10000", "text-node-11MB"],
)
def test_x07_deep_nesting_and_a_huge_text_node_are_refused(payload: bytes, words: str) -> None:
    """X07: nesting 10,000 deep and an 11 MB text node: a RecordError naming libxml2's limit
    (which huge_tree would lift), not a crash."""
    message = reason(
        iso(file_id("a")).replace(b"</gmd:MD_Metadata>", payload + b"</gmd:MD_Metadata>")
    )
    assert message.startswith("not well-formed XML: ")
    assert words in message
