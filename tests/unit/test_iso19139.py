"""One ISO 19139 record: safe parsing, identity, md datestamp and the canonical hash."""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from lxml import etree

from tests.canary import canary, knock
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import (
    GCO,
    GMD,
    NAMESPACES,
    Record,
    RecordError,
    canonical_hash,
    parse_record,
    parse_xml,
    record_from_element,
    safe_parser,
)

NS_DECL = f'xmlns:gmd="{GMD}" xmlns:gco="{GCO}"'


def iso(body: str, *, root_attrs: str = NS_DECL) -> bytes:
    return f"<gmd:MD_Metadata {root_attrs}>{body}</gmd:MD_Metadata>".encode()


def file_id(value: str) -> str:
    return (
        f"<gmd:fileIdentifier><gco:CharacterString>{value}</gco:CharacterString>"
        "</gmd:fileIdentifier>"
    )


def date_stamp(kind: str, value: str) -> str:
    return f"<gmd:dateStamp><gco:{kind}>{value}</gco:{kind}></gmd:dateStamp>"


def reason(data: bytes | str) -> str:
    with pytest.raises(RecordError) as caught:
        parse_record(data)
    return str(caught.value)


# --- the record ---------------------------------------------------------------------------------


def test_parse_generated_record() -> None:
    record = parse_record(generate_record(3))

    assert isinstance(record, Record)
    assert record.identifier == identifier_for(3) == "urn:x-wmo:md:int.wmo.wis::xx.taf.3"
    assert record.md_datestamp == datetime(2015, 1, 1, 0, 4, 51, tzinfo=UTC)
    assert len(record.content_hash) == 32
    assert record.xml.startswith("<gmd:MD_Metadata ")
    assert "<?xml" not in record.xml


def test_record_is_frozen() -> None:
    record = parse_record(generate_record(0))
    with pytest.raises(AttributeError):
        record.identifier = "other"  # type: ignore[misc]


def test_stored_xml_reparses_to_the_same_record() -> None:
    record = parse_record(generate_record(11))
    assert parse_record(record.xml) == record


def test_identifier_is_trimmed() -> None:
    record = parse_record(iso(file_id("\n   urn:x-wmo:md:int.wmo.wis::abc  \t")))
    assert record.identifier == "urn:x-wmo:md:int.wmo.wis::abc"


def test_text_input_with_encoding_declaration() -> None:
    text = '<?xml version="1.0" encoding="ISO-8859-1"?>\n' + iso(file_id("café")).decode()
    assert parse_record(text).identifier == "café"


def test_latin1_bytes_follow_their_declaration() -> None:
    """H10: a record's bytes are read by their declared encoding."""
    data = b'<?xml version="1.0" encoding="ISO-8859-1"?>' + iso(file_id("café")).decode().encode(
        "iso-8859-1"
    )
    assert b"caf\xe9" in data
    assert parse_record(data).identifier == "café"


def test_xml_declaration_and_outer_comments_are_not_stored() -> None:
    data = b'<?xml version="1.0"?>\n<!-- exported -->\n' + iso(file_id("a")) + b"\n<?done?>"
    record = parse_record(data)
    assert record.xml == iso(file_id("a")).decode()


# --- refusals -----------------------------------------------------------------------------------


def test_record_error_is_a_value_error() -> None:
    assert issubclass(RecordError, ValueError)


def test_malformed_xml_names_the_line() -> None:
    message = reason(iso(f"\n{file_id('a')}\n<gmd:b></gmd:c>\n"))
    assert message.startswith("not well-formed XML: Opening and ending tag mismatch")
    # where the error is, once: not also lxml's "(<string>, line 1)", which names another line
    assert message.endswith("line 3, column 16") and "<string>" not in message


def test_undeclared_prefix_is_not_well_formed() -> None:
    message = reason(b"<gmd:MD_Metadata/>")
    assert message.startswith("not well-formed XML:")
    assert "prefix gmd" in message


def test_text_that_is_not_unicode() -> None:
    message = reason(iso(file_id("a")).decode() + "\ud800")
    assert message.startswith("not well-formed XML: surrogates not allowed")


def test_empty_document() -> None:
    assert reason(b"") == "not well-formed XML: Document is empty, line 1, column 1"


def test_wrong_root() -> None:
    message = reason(b'<foo xmlns="urn:example"><bar/></foo>')
    assert message == "root element is {urn:example}foo, expected gmd:MD_Metadata"


def test_root_in_the_wrong_namespace() -> None:
    message = reason(b'<MD_Metadata xmlns="http://standards.iso.org/iso/19115/-3/mdb/2.0"/>')
    assert message.startswith("root element is {http://standards.iso.org/iso/19115/-3/mdb/2.0}")


def test_missing_file_identifier() -> None:
    assert reason(iso(date_stamp("Date", "2024-01-01"))) == "no gmd:fileIdentifier"


def test_nested_file_identifier_does_not_count() -> None:
    body = f"<gmd:identificationInfo>{file_id('deep')}</gmd:identificationInfo>"
    assert reason(iso(body)) == "no gmd:fileIdentifier"


def test_empty_file_identifier() -> None:
    assert reason(iso(file_id("   "))) == "gmd:fileIdentifier is empty"


def test_a_long_date_stamp_is_shown_cut() -> None:
    assert reason(iso(file_id("a") + date_stamp("DateTime", "9" * 10_000))) == (
        "gmd:dateStamp is not a date: '" + "9" * 57 + "...'"
    )


def test_file_identifier_longer_than_an_index_entry_can_hold() -> None:
    # 1,024 bytes of UTF-8 at most: "é" is two
    assert parse_record(iso(file_id("é" * 512))).identifier == "é" * 512
    assert reason(iso(file_id("é" * 512 + "x"))) == "gmd:fileIdentifier is longer than 1024 bytes"


def test_file_identifier_that_no_oai_answer_can_carry() -> None:
    # OAI-PMH.xsd: a header's identifier is an xs:anyURI (wiscat.shared.oaipmh.identifiers)
    assert reason(iso(file_id("urn:x:a#b#c"))) == (
        "gmd:fileIdentifier 'urn:x:a#b#c' is not a URI, as an OAI-PMH identifier must be "
        "(xs:anyURI): more than one '#'"
    )
    long_bad = "urn:x:%zz" + "a" * 200
    assert reason(iso(file_id(long_bad))) == (
        f"gmd:fileIdentifier {long_bad[:77] + '...'!r} is not a URI, as an OAI-PMH identifier "
        "must be (xs:anyURI): a '%' not followed by two hexadecimal digits"
    )
    # what xs:anyURI takes as escaped: a space, a letter that is not ASCII
    assert parse_record(iso(file_id("urn:x:météo a"))).identifier == "urn:x:météo a"


def test_file_identifier_without_character_string() -> None:
    body = '<gmd:fileIdentifier gco:nilReason="missing"/>'
    assert reason(iso(body)) == "gmd:fileIdentifier has no gco:CharacterString (nor gmx:Anchor)"


def test_file_identifier_as_an_anchor() -> None:
    # gmx:Anchor stands in for gco:CharacterString (its substitution group in the ISO 19139
    # schemas); such a record was quarantined as having no identifier
    body = (
        '<gmd:fileIdentifier><gmx:Anchor xmlns:gmx="http://www.isotc211.org/2005/gmx" '
        'xmlns:xlink="http://www.w3.org/1999/xlink" xlink:href="https://example.org/md/a">'
        " urn:x-wmo:md:int.wmo.wis::a </gmx:Anchor></gmd:fileIdentifier>"
    )
    assert parse_record(iso(body)).identifier == "urn:x-wmo:md:int.wmo.wis::a"


def test_binary_data_is_named_as_such() -> None:
    # libxml2 stops at a NUL and calls the document empty
    assert reason(b"\x00\x00\x00abc") == (
        "not well-formed XML: it begins with a NUL byte (binary data, not a record)"
    )
    assert reason(b"").startswith("not well-formed XML: Document is empty")
    # text in UTF-16 or UTF-32 without a byte order mark (its XML declaration tells the
    # encoding) begins with NUL bytes too, and is read
    record = '<?xml version="1.0"?>' + iso(file_id("a")).decode()
    for encoding in ("utf-16-be", "utf-32-be"):
        assert parse_record(record.encode(encoding)).identifier == "a"


def test_two_file_identifiers() -> None:
    assert reason(iso(file_id("a") + file_id("b"))) == "more than one gmd:fileIdentifier"


def test_unparsable_date_stamp() -> None:
    message = reason(iso(file_id("a") + date_stamp("DateTime", "yesterday")))
    assert message == "gmd:dateStamp is not a date: 'yesterday'"


def test_date_stamp_without_date() -> None:
    message = reason(iso(file_id("a") + "<gmd:dateStamp/>"))
    assert message == "gmd:dateStamp holds neither gco:DateTime nor gco:Date"


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("DateTime", "2024-02-30T00:00:00Z"),
        ("DateTime", "2024-01-02"),
        ("DateTime", "2024-01-02 10:00:00"),
        ("Date", "2024-13-01"),
        ("Date", "2024-01-02T10:00:00Z"),
        ("Date", ""),
        ("Date", "\uff12\uff10\uff12\uff14-01-02"),  # full-width digits
        ("DateTime", "2024-01-0\u0662T10:00:00Z"),  # an Arabic-Indic digit
    ],
)
def test_bad_date_values(kind: str, value: str) -> None:
    assert reason(iso(file_id("a") + date_stamp(kind, value))).startswith("gmd:dateStamp")


# --- md datestamp ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("DateTime", "2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("DateTime", " 2024-01-02T03:04:05 ", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("DateTime", "2024-01-02T03:04:05+02:00", datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)),
        (
            "DateTime",
            "2024-01-02T03:04:05.250-01:30",
            datetime(2024, 1, 2, 4, 34, 5, 250000, tzinfo=UTC),
        ),
        ("Date", "2024-01-02", datetime(2024, 1, 2, tzinfo=UTC)),
        ("Date", "2024-01-02Z", datetime(2024, 1, 2, tzinfo=UTC)),
        ("Date", "2024-01-02+02:00", datetime(2024, 1, 1, 22, tzinfo=UTC)),
        ("Date", "2024-07", datetime(2024, 7, 1, tzinfo=UTC)),
        ("Date", "2024", datetime(2024, 1, 1, tzinfo=UTC)),
    ],
)
def test_md_datestamp_forms(kind: str, value: str, expected: datetime) -> None:
    stamp = parse_record(iso(file_id("a") + date_stamp(kind, value))).md_datestamp
    assert stamp == expected
    assert stamp is not None and stamp.utcoffset() is not None
    assert stamp.tzinfo is UTC


def test_md_datestamp_is_optional() -> None:
    assert parse_record(iso(file_id("a"))).md_datestamp is None


def test_a_date_stamp_far_ahead_is_refused() -> None:
    """2102 for 2012: stored, such a record could never be corrected, every true copy being
    older (invariant 5); so it is refused (quarantined when harvested), with the reason."""
    message = reason(iso(file_id("a") + date_stamp("DateTime", "2102-03-04T00:00:00Z")))
    assert message == (
        "gmd:dateStamp 2102-03-04T00:00:00Z is in the future: stored, no correction with a true "
        "date could replace it (it would be older)"
    )
    # a record made where the day has begun, or by a clock a little fast, is taken
    soon = datetime.now(UTC) + timedelta(hours=20)
    stamp = soon.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert parse_record(iso(file_id("a") + date_stamp("DateTime", stamp))).md_datestamp
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert parse_record(iso(file_id("a") + date_stamp("Date", tomorrow))).md_datestamp
    later = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    assert reason(iso(file_id("a") + date_stamp("Date", later))).endswith(
        "is in the future: "
        "stored, no correction with a true date could replace it (it would be older)"
    )


# --- DOCTYPE, entities and external resources -----------------------------------------------------

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


# --- elements taken from a larger document --------------------------------------------------------

OAI_PAGE = """<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"
    xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
    xmlns:gco="http://www.isotc211.org/2005/gco">
  <ListRecords><record><metadata>{record}</metadata></record></ListRecords>
</OAI-PMH>"""


def test_record_from_element_inside_a_page() -> None:
    standalone = parse_record(iso(file_id("urn:a") + date_stamp("Date", "2024-05-06")))
    # The page declares gco on the envelope only, as some providers do.
    inner = f'<gmd:MD_Metadata xmlns:gmd="{GMD}">{file_id("urn:a")}'
    inner += date_stamp("Date", "2024-05-06") + "</gmd:MD_Metadata>"
    page = etree.fromstring(OAI_PAGE.format(record=inner).encode(), safe_parser())
    element = page.find(".//{http://www.openarchives.org/OAI/2.0/}metadata")[0]

    record = record_from_element(element)

    assert record.identifier == "urn:a"
    assert record.md_datestamp == datetime(2024, 5, 6, tzinfo=UTC)
    assert record.content_hash == standalone.content_hash
    # Only the namespaces the record uses travel with it, not the envelope's.
    assert "http://www.openarchives.org/OAI/2.0/" not in record.xml
    assert "XMLSchema-instance" not in record.xml
    assert parse_record(record.xml).content_hash == record.content_hash
    # The record was taken out of the page (the harvester is done with it there).
    assert element.getparent() is None
    assert len(page.find(".//{http://www.openarchives.org/OAI/2.0/}metadata")) == 0


def test_generated_record_inside_a_page_keeps_its_hash() -> None:
    data = generate_record(42)
    body = etree.tostring(etree.fromstring(data), encoding="unicode")
    page = etree.fromstring(OAI_PAGE.format(record=body).encode(), safe_parser())
    element = page.find(".//{http://www.openarchives.org/OAI/2.0/}metadata")[0]

    assert record_from_element(element) == parse_record(data)


# --- canonical hash: what counts as the same ----------------------------------------------------


def hash_of(data: bytes | str) -> bytes:
    return canonical_hash(parse_xml(data))


def test_hash_is_sha256_of_c14n() -> None:
    import hashlib

    data = iso(file_id("a"))
    canonical = etree.canonicalize(parse_xml(data), strip_text=True)
    assert hash_of(data) == hashlib.sha256(canonical.encode()).digest()


def test_reindenting_does_not_change_the_hash() -> None:
    original = generate_record(5)
    compact_parser = etree.XMLParser(remove_blank_text=True)
    compact = etree.tostring(etree.fromstring(original, compact_parser))
    pretty = etree.tostring(etree.fromstring(compact), pretty_print=True)
    crlf = original.replace(b"\n", b"\r\n")
    tabs = original.replace(b"\n  ", b"\n\t\t")

    assert b"\n" not in compact.strip()
    hashes = {hash_of(variant) for variant in (original, compact, pretty, crlf, tabs)}
    assert len(hashes) == 1


def test_padding_around_text_does_not_change_the_hash() -> None:
    assert hash_of(iso(file_id("abc"))) == hash_of(iso(file_id("\n   abc \t ")))


def test_attribute_order_and_quotes_do_not_change_the_hash() -> None:
    a = iso(file_id("a") + '<gmd:x codeList="L" codeListValue="V" id="1"/>')
    b = iso(file_id("a") + "<gmd:x id='1' codeListValue='V' codeList='L'></gmd:x>")
    assert hash_of(a) == hash_of(b)


def test_namespace_declaration_placement_does_not_change_the_hash() -> None:
    on_root = iso(file_id("a"), root_attrs=NS_DECL + ' xmlns:unused="urn:unused"')
    on_use = (
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}"><gmd:fileIdentifier>'
        f'<gco:CharacterString xmlns:gco="{GCO}">a</gco:CharacterString>'
        "</gmd:fileIdentifier></gmd:MD_Metadata>"
    ).encode()
    assert hash_of(on_root) == hash_of(on_use)


def test_declaration_encoding_cdata_and_references_do_not_change_the_hash() -> None:
    plain = iso(file_id("é &amp; b"))
    dressed = b'<?xml version="1.0" encoding="ISO-8859-1"?>' + iso(
        file_id("&#233; <![CDATA[&]]> b")
    ).decode().encode("iso-8859-1")
    assert hash_of(plain) == hash_of(dressed)


def test_comments_do_not_change_the_hash() -> None:
    assert hash_of(iso(file_id("a"))) == hash_of(iso("<!-- note -->" + file_id("a")))


def test_real_text_change_changes_the_hash() -> None:
    original = generate_record(5)
    edited = original.replace(b"#5</gco:CharacterString>", b"#6</gco:CharacterString>")
    assert edited != original
    assert hash_of(original) != hash_of(edited)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (file_id("a b"), file_id("a  b")),  # whitespace inside text counts
        (file_id("a"), file_id("A")),
        (
            file_id("a") + '<gmd:x codeListValue="V"/>',
            file_id("a") + '<gmd:x codeListValue="V "/>',
        ),
        (file_id("a") + "<gmd:x/><gmd:y/>", file_id("a") + "<gmd:y/><gmd:x/>"),
        (file_id("a"), file_id("a") + "<?pi data?>"),
    ],
)
def test_meaningful_changes_change_the_hash(a: str, b: str) -> None:
    assert hash_of(iso(a)) != hash_of(iso(b))


def test_prefix_choice_counts() -> None:
    other_prefix = iso(file_id("a")).replace(b"gco:", b"c:").replace(b"xmlns:gco", b"xmlns:c")
    assert parse_record(other_prefix).identifier == "a"
    assert hash_of(iso(file_id("a"))) != hash_of(other_prefix)


def c14n2_hash(root: etree._Element) -> bytes:
    """The definition canonical_hash implements: SHA-256 of lxml's C14N 2.0 with strip_text."""
    return hashlib.sha256(etree.canonicalize(root, strip_text=True).encode()).digest()


def reserialised(data: bytes) -> str:
    """The same record written differently: every element's attributes in reverse order, new
    indentation, and each namespace declared on the elements that use it rather than on the root,
    which declares an unused one instead."""
    root = etree.fromstring(data, etree.XMLParser(remove_blank_text=True))
    for element in root.iter(etree.Element):
        attributes = list(element.attrib.items())
        element.attrib.clear()
        for name, value in reversed(attributes):
            element.set(name, value)
    etree.indent(root, space="\t   ")
    text = etree.tostring(root, encoding="unicode")
    uris = dict(re.findall(r' xmlns:(\w+)="([^"]*)"', text[: text.index(">")]))
    text = re.sub(r' xmlns:\w+="[^"]*"', "", text)

    def declare_used(match: re.Match[str]) -> str:
        tag = match.group(1)
        used = {tag.split(":", 1)[0]} | set(re.findall(r'\s(\w+):[\w.-]+="', tag))
        declarations = "".join(f' xmlns:{p}="{uris[p]}"' for p in sorted(used, reverse=True))
        return f"<{tag}{declarations}{match.group(2)}>"

    text = re.sub(r"<(\w+:[^>]*?)(/?)>", declare_used, text)
    return text.replace("<gmd:MD_Metadata ", '<gmd:MD_Metadata xmlns:unused="urn:unused" ', 1)


@pytest.mark.parametrize("n", [0, 7, 42])
def test_reserialised_record_hashes_the_same(n: int) -> None:
    original = generate_record(n)
    variant = reserialised(original)
    root_tag = variant[: variant.index(">")]

    # The variant really is written differently, and is still the same record.
    assert "xmlns:gco" not in root_tag and "xmlns:unused" in root_tag
    assert variant.count(f'xmlns:gco="{GCO}"') > 1
    assert "\n\t   <gmd:" in variant
    assert variant.index('codeListValue="') < variant.index('codeList="')
    assert parse_record(variant).identifier == identifier_for(n)

    assert hash_of(variant) == hash_of(original)
    assert parse_record(variant).content_hash == parse_record(original).content_hash


@pytest.mark.parametrize("n", [3, 8])
def test_one_character_text_change_changes_the_hash(n: int) -> None:
    original = generate_record(n).decode()
    start = original.index("<gmd:abstract>")
    start = original.index("<gco:CharacterString>", start) + len("<gco:CharacterString>")
    middle = start + (original.index("</gco:CharacterString>", start) - start) // 2
    replacement = "x" if original[middle] != "x" else "y"
    edited = original[:middle] + replacement + original[middle + 1 :]

    assert len(edited) == len(original) and edited != original
    assert hash_of(edited) != hash_of(original)
    # Padding the changed record is still no change to it.
    padded = edited.replace("<gmd:abstract>", "<gmd:abstract>\n\n    ", 1)
    assert hash_of(padded) == hash_of(edited)


def test_hash_is_c14n2_for_generated_records_and_variants() -> None:
    for n in range(0, 200, 9):
        original = generate_record(n)
        for data in (original, reserialised(original)):
            root = parse_xml(data)
            assert canonical_hash(root) == c14n2_hash(root)


@pytest.mark.parametrize(
    "body",
    [
        file_id(" a <!-- c --> b "),  # text on both sides of a comment is one run
        file_id("&#13;a&#13;b&#13;"),  # carriage returns from references: trimmed at the ends
        file_id("a") + '<gmd:x codeList="a &gt;  b" codeListValue=" &lt; "> v </gmd:x>',
        file_id("a") + '<gmd:x codeList="&#9;&#10;&#13;"/>',
        file_id("a\t") + "<gmd:x>\n<gmd:y>b</gmd:y>\t</gmd:x>",  # ASCII edges, each kind
        file_id("a") + '<gmd:x codeList="> b"><gmd:y>c</gmd:y></gmd:x>',  # a ">" that is no edge
        file_id(" \u00a0a\u3000"),  # whitespace beyond ASCII, as str.strip() sees it
        file_id("a") + "<gmd:x>\n  <?pi  a > b < c ?>\n  t  <?other?></gmd:x>",
        file_id("a") + '<gmd:x xml:space="preserve">  kept  <gmd:y> too </gmd:y></gmd:x>',
        file_id("a") + '<gmd:x xml:space="preserve"><gmd:y xml:space="default"> t </gmd:y></gmd:x>',
        file_id("a") + '<gmd:x xmlns="urn:d"><y xmlns=""> t </y><z/></gmd:x>',
    ],
)
def test_hash_is_c14n2_in_corner_cases(body: str) -> None:
    root = parse_xml(iso(body))
    assert canonical_hash(root) == c14n2_hash(root)


def test_corner_cases_of_trimming() -> None:
    assert hash_of(iso(file_id(" a <!-- c --> b "))) == hash_of(iso(file_id("a  b")))
    assert hash_of(iso(file_id("&#13;a&#13;"))) == hash_of(iso(file_id("a")))
    assert hash_of(iso(file_id("a&#13;b"))) != hash_of(iso(file_id("ab")))
    # ">" followed by whitespace inside an attribute value is not the end of a tag.
    spaced = iso(file_id("a") + '<gmd:x codeList="a&gt; b"/>')
    assert hash_of(spaced) != hash_of(iso(file_id("a") + '<gmd:x codeList="a&gt;b"/>'))
    # xml:space="preserve" keeps padding in its scope.
    kept = '<gmd:x xml:space="preserve">{}</gmd:x>'
    assert hash_of(iso(file_id("a") + kept.format(" t "))) != hash_of(
        iso(file_id("a") + kept.format("t"))
    )


def test_cdata_kept_by_the_parser_does_not_change_the_hash() -> None:
    data = iso(file_id("<![CDATA[ a < b ]]>"))
    kept = etree.fromstring(data, etree.XMLParser(strip_cdata=False))
    assert b"CDATA" in etree.tostring(kept)
    assert canonical_hash(kept) == hash_of(iso(file_id("a &lt; b")))


def test_canonical_hash_leaves_the_element_untouched() -> None:
    data = iso(file_id(" a ") + "<!-- c --><gmd:x>\n  <?pi d?>  </gmd:x>")
    root = parse_xml(data)
    before = etree.tostring(root)
    canonical_hash(root)
    assert etree.tostring(root) == before


def test_canonical_hash_of_an_element_inside_a_page() -> None:
    data = generate_record(42)
    body = etree.tostring(etree.fromstring(data), encoding="unicode")
    page = etree.fromstring(OAI_PAGE.format(record=body).encode(), safe_parser())
    metadata = page.find(".//{http://www.openarchives.org/OAI/2.0/}metadata")
    assert metadata is not None
    assert canonical_hash(metadata[0]) == hash_of(data)


def test_namespaces_map_is_usable_for_find() -> None:
    root = parse_xml(generate_record(1))
    assert root.find("gmd:identificationInfo/gmd:MD_DataIdentification", NAMESPACES) is not None


# --- RELIABILITY X02, X04, X07: more hostile records ---------------------------------------------

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
