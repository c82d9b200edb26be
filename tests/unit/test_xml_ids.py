"""XML IDs repeated across the records of one list page (RELIABILITY P01)."""

from __future__ import annotations

from datetime import UTC, datetime

from lxml import etree

from tests.support.oai_validation import validate_oai
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render, xmlids
from wiscat.shared.oaipmh.pages import PageReader, RecordItem

GML_ID = "{http://www.opengis.net/gml/3.2}id"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _with_reference(n: int) -> bytes:
    """Record ``n`` whose TimePeriod is ``extent``, referred to by an xlink:href."""
    root = etree.fromstring(generate_record(n, gml_id="extent"))
    contact = root.find("{http://www.isotc211.org/2005/gmd}contact")
    assert contact is not None
    contact.set(XLINK_HREF, "#extent")
    return etree.tostring(root)


def _page(records: list[bytes]) -> bytes:
    writer = render.PageWriter()
    echo = {"verb": "ListRecords", "metadataPrefix": "iso19139"}
    writer.add(render.response_start(NOW, "http://127.0.0.1/oai", echo, "ListRecords"))
    for data in records:
        record = parse_record(data)
        writer.add_record(record.identifier, NOW, ["s"], False, record.xml)
    writer.add(render.response_end("ListRecords"))
    return writer.take()


def test_p01_repeated_ids_are_renamed_with_their_references_and_restored_when_read() -> None:
    records = [_with_reference(n) for n in range(3)]
    body = _page(records)
    validate_oai(body)
    tree = etree.fromstring(body)
    served = [e for e in tree.iter() if e.get(GML_ID)]
    identifiers = [parse_record(r).identifier for r in records]
    ends = ["", xmlids.suffix(identifiers[1]), xmlids.suffix(identifiers[2])]
    assert [e.get(GML_ID) for e in served] == [f"extent{end}" for end in ends]
    hrefs = [e.get(XLINK_HREF) for e in tree.iter() if e.get(XLINK_HREF)]
    assert hrefs == [f"#extent{end}" for end in ends]
    read = [i for i in PageReader(body).items() if isinstance(i, RecordItem)]
    for item, original in zip(read, records, strict=True):
        assert item.metadata is not None
        assert (
            parse_record(etree.tostring(item.metadata)).content_hash
            == parse_record(original).content_hash
        )


def test_p01_a_record_alone_or_without_repeats_is_served_as_stored() -> None:
    stored = [parse_record(generate_record(n)).xml.encode() for n in range(3)]
    ids = xmlids.PageIds()
    assert [ids.admit(str(n), data) for n, data in enumerate(stored)] == stored
    alone = parse_record(_with_reference(7))
    assert render.record(alone.identifier, NOW, [], False, alone.xml).count(alone.xml.encode()) == 1


def test_p01_every_id_attribute_of_a_stored_record_is_found_and_no_other() -> None:
    # an ID after each character that may precede an attribute's name, a value spanning lines,
    # and names that merely end in "id", which are not IDs
    stored = (
        b'<a xmlns:gml="g" id="one"><b\tgml:id="two"/><c\nid="thr\nee"/><d\rid="four"/>'
        b'<e uuid="not" xid="nor"/><f gml:id="one"/></a>'
    )
    assert xmlids._ids(stored) == {"one", "two", "thr\nee", "four"}
    assert xmlids._ids(b'<a id="five"/>' + b'<b uuid="x"/>' * 3 + b'<c id="six"/>') == {
        "five",
        "six",
    }
    assert xmlids._ids(b'<a uuid="x" id="open') == set()


def test_p01_the_ids_stored_with_a_record_are_those_its_search_finds() -> None:
    # what the provider takes from records.xml_ids instead of searching the record: the same
    # set, whatever the IDs hold (a line break, none at all, an empty one)
    for xml in (
        '<a xmlns:gml="g" id="one"><b\tgml:id="two"/><c\nid="thr\nee"/><f gml:id="one"/></a>',
        '<a uuid="x"><b>no ID here</b></a>',
        '<a id=""><b gml:id="é"/></a>',
    ):
        form = xmlids.stored_form(xml)
        assert xmlids._from_stored(form) == xmlids._ids(xml.encode()), xml
    assert xmlids.stored_form('<a id="b"><c gml:id="a"/></a>') == 'a"b"'
    assert xmlids.stored_form("<a/>") == ""
    assert xmlids.stored_form('<a id=""/>') == '"'
    record = parse_record(_with_reference(1))
    assert record.xml_ids == 'extent"'


def test_p01_a_page_renames_alike_from_the_stored_ids_or_by_searching() -> None:
    records = [parse_record(_with_reference(n)) for n in range(3)]
    pages = []
    for stored in (True, False):
        writer = render.PageWriter()
        for record in records:
            ids = record.xml_ids if stored else None
            writer.add_record(record.identifier, NOW, ["s"], False, record.xml, xml_ids=ids)
        pages.append(writer.take())
    assert pages[0] == pages[1]
    assert pages[0].count(b"page-dup-") == 4  # two records' ID and reference each
