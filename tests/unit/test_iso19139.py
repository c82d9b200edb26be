"""One ISO 19139 record: safe parsing, identity, md datestamp and the canonical hash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.iso_documents import date_stamp, file_id, iso, reason
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import (
    Record,
    RecordError,
    parse_record,
)


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
