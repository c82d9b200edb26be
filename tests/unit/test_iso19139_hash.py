"""The canonical content hash of an ISO 19139 record (SHA-256 of its C14N 2.0 form): what
changes it and what does not."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

import pytest
from lxml import etree

from tests.unit.iso_documents import NS_DECL, date_stamp, file_id, iso
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import (
    GCO,
    GMD,
    NAMESPACES,
    canonical_hash,
    parse_record,
    parse_xml,
    record_from_element,
    safe_parser,
)

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
        # each edge alone, in a record whose other text runs need no trimming
        *(
            file_id("a") + f"<gmd:x>{text}</gmd:x>"
            for space in (" ", "\t", "\n", "&#13;")
            for text in (f"{space}t", f"t{space}")
        ),
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
