"""The harvester's page parser on recorded responses (tests/data/oai/, named after the verb or
the error they show)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from lxml import etree

from tests.unit.oai_pages import GMD, fixture
from wiscat.shared.oaipmh import errors
from wiscat.shared.oaipmh.pages import (
    HeaderItem,
    MalformedResponse,
    NotOAIResponse,
    PageReader,
    RecordItem,
    ResponseError,
    UnreadableItem,
    announced_token,
    parse_oai_date,
    read_errors,
    read_identify,
)


def identifier_of(item: HeaderItem | RecordItem) -> str:
    return item.identifier if isinstance(item, HeaderItem) else item.header.identifier


def read_all(body: bytes) -> tuple[list[HeaderItem | RecordItem], PageReader]:
    reader = PageReader(body)
    return list(reader.items()), reader


def test_list_records_page_with_token() -> None:
    items, reader = read_all(fixture("ListRecords-page1.xml"))
    assert all(isinstance(item, RecordItem) for item in items)
    first, deleted = items
    assert isinstance(first, RecordItem) and isinstance(deleted, RecordItem)
    assert first.header == HeaderItem(
        identifier="urn:x-wmo:md:int.wmo.wis::A",
        datestamp="2024-03-01T08:00:00Z",
        datestamp_parsed=datetime(2024, 3, 1, 8, 0, tzinfo=UTC),
        set_specs=("WIS-GISC-PEER", "WIS-CATALOGUE"),
        deleted=False,
    )
    assert first.metadata is not None and first.metadata.tag == GMD + "MD_Metadata"
    assert deleted.header.deleted and deleted.metadata is None
    summary = reader.summary
    assert summary.verb == "ListRecords"
    assert summary.response_date == datetime(2024, 3, 5, 10, 0, tzinfo=UTC)
    assert summary.errors == []
    assert summary.resumption_token == "page-2-token"
    assert (summary.cursor, summary.complete_list_size) == (0, 3)
    assert summary.expiration == datetime(2024, 3, 6, 10, 0, tzinfo=UTC)


def test_last_page_has_an_empty_token() -> None:
    items, reader = read_all(fixture("ListRecords-page2.xml"))
    assert [item.header.identifier for item in items if isinstance(item, RecordItem)] == [
        "urn:x-wmo:md:int.wmo.wis::C"
    ]
    # OAI-PMH 2.0 §3.5: an empty resumptionToken completes the list
    assert reader.summary.resumption_token is None
    assert (reader.summary.cursor, reader.summary.complete_list_size) == (2, 3)


def test_records_out_of_datestamp_order_are_all_delivered_in_document_order() -> None:
    items, _ = read_all(fixture("ListRecords-out-of-order.xml"))
    assert [i.header.identifier for i in items if isinstance(i, RecordItem)] == [
        "late",
        "early",
        "middle",
    ]


def test_list_identifiers_with_day_datestamps() -> None:
    items, reader = read_all(fixture("ListIdentifiers-day-granularity.xml"))
    assert all(isinstance(item, HeaderItem) for item in items)
    headers = [item for item in items if isinstance(item, HeaderItem)]
    assert [h.identifier for h in headers] == [
        "urn:x-wmo:md:int.wmo.wis::D",
        "urn:x-wmo:md:int.wmo.wis::E",
    ]
    assert headers[0].datestamp == "2024-03-04"
    assert headers[0].datestamp_parsed == datetime(2024, 3, 4, tzinfo=UTC)
    assert headers[0].set_specs == ("WIS-GISC-PEER",) and not headers[0].deleted
    assert headers[1].deleted and headers[1].set_specs == ()
    assert reader.summary.verb == "ListIdentifiers" and reader.summary.resumption_token is None


def test_an_item_whose_header_cannot_be_read_is_given_as_such_and_the_page_goes_on() -> None:
    """A peer's one bad header must not make its whole list unreadable, at every harvest."""
    items, reader = read_all(fixture("ListRecords-unreadable-headers.xml"))
    *unreadable, last = items
    assert [(i.identifier, i.reason) for i in unreadable if isinstance(i, UnreadableItem)] == [
        (
            "urn:x-wmo:md:int.wmo.wis::A",
            "a header whose datestamp '2024-02-30T08:00:00Z' is no date",
        ),
        (None, "a header without identifier"),
        ("urn:x-wmo:md:int.wmo.wis::C", "a header without datestamp"),
        (None, "a record without a header"),
    ]
    first = unreadable[0]
    assert isinstance(first, UnreadableItem)
    # the item as it came, namespace declarations included, for the quarantine
    raw = etree.fromstring(first.raw)
    assert raw.tag == "{http://www.openarchives.org/OAI/2.0/}record"
    assert raw.findtext(".//{*}datestamp") == "2024-02-30T08:00:00Z"
    assert isinstance(last, RecordItem) and last.header.identifier == "urn:x-wmo:md:int.wmo.wis::E"
    assert reader.summary.resumption_token == "next"


def test_get_record() -> None:
    items, reader = read_all(fixture("GetRecord.xml"))
    assert len(items) == 1 and isinstance(items[0], RecordItem)
    assert items[0].header.identifier == "urn:x-wmo:md:int.wmo.wis::A"
    assert items[0].metadata is not None
    assert reader.summary.verb == "GetRecord"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-05T10:11:12Z", datetime(2024, 3, 5, 10, 11, 12, tzinfo=UTC)),
        ("2024-03-05", datetime(2024, 3, 5, tzinfo=UTC)),
        (" 2024-03-05 ", datetime(2024, 3, 5, tzinfo=UTC)),
        # what OAI-PMH.xsd allows beyond the protocol's two forms (xs:date in datestamps,
        # fractions in datestamps, any xs:dateTime in responseDate and expirationDate), and
        # peers send: read to the second, in UTC
        ("2017-11-09T12:50:22.485Z", datetime(2017, 11, 9, 12, 50, 22, tzinfo=UTC)),
        ("2017-11-09T12:50:22.9999999Z", datetime(2017, 11, 9, 12, 50, 22, tzinfo=UTC)),
        ("2024-03-05Z", datetime(2024, 3, 5, tzinfo=UTC)),
        ("2024-03-05+02:00", datetime(2024, 3, 4, 22, tzinfo=UTC)),
        ("2024-03-05T10:11:12+01:30", datetime(2024, 3, 5, 8, 41, 12, tzinfo=UTC)),
        ("2024-03-05T23:11:12-05:00", datetime(2024, 3, 6, 4, 11, 12, tzinfo=UTC)),
        ("2024-03-05T10:11:12.5-00:00", datetime(2024, 3, 5, 10, 11, 12, tzinfo=UTC)),
        ("2024-03-05T10:11:12", datetime(2024, 3, 5, 10, 11, 12, tzinfo=UTC)),
        ("0001-01-01T00:00:00+02:00", datetime(1, 1, 1, tzinfo=UTC)),  # held at the first
    ],
)
def test_datestamps_of_both_granularities(text: str, expected: datetime) -> None:
    assert parse_oai_date(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2024-03-05 10:11:12",
        "05/03/2024",
        "",
        "2024-13-01",
        "2024-02-30T00:00:00Z",
        "2024-03-05T24:00:00Z",
        "2024-03-05T10:11Z",
        "2024-03-05T10:11:12.Z",
        "2024-03-05T10:11:12+0200",
        "2024-03-05TZ",
        "20240305",
    ],
)
def test_bad_datestamps_are_malformed(text: str) -> None:
    with pytest.raises(MalformedResponse):
        parse_oai_date(text)


def test_identify_seconds_granularity() -> None:
    info = read_identify(fixture("Identify.xml"))
    assert info.repository_name == "GISC Peer"
    assert info.base_url == "http://peer.example/oai"
    assert info.protocol_version == "2.0"
    assert info.earliest_datestamp == datetime(2010, 1, 1, tzinfo=UTC)
    assert info.deleted_record == "transient"
    assert info.granularity == "YYYY-MM-DDThh:mm:ssZ" and not info.day_granularity
    assert info.compression == ("gzip", "deflate")


def test_identify_day_granularity() -> None:
    info = read_identify(fixture("Identify-day-granularity.xml"))
    assert info.day_granularity
    assert info.earliest_datestamp == datetime(2011, 6, 30, tzinfo=UTC)
    assert info.deleted_record == "no"
    assert info.compression == ()


def test_blank_lines_before_the_xml_declaration_are_passed_over() -> None:
    # not well-formed (XML allows nothing before its declaration), but servers whose templates
    # begin with a blank line send it, PHP's often; every page of such a peer failed
    expected, _ = read_all(fixture("ListRecords-page1.xml"))
    items, reader = read_all(b"\n\r\n  \t" + fixture("ListRecords-page1.xml"))
    assert [identifier_of(i) for i in items] == [identifier_of(i) for i in expected]
    assert reader.summary.resumption_token is not None
    assert read_identify(b"\n" + fixture("Identify.xml")).repository_name == "GISC Peer"
    with pytest.raises(MalformedResponse):  # anything else before it stays an error
        read_all(b"\nx" + fixture("ListRecords-page1.xml"))


@pytest.mark.parametrize("earliest", ["", "<earliestDatestamp>soon</earliestDatestamp>"])
def test_identify_without_a_valid_earliest_datestamp_is_read(earliest: str) -> None:
    # used only to slice the peer's range for the rolling re-harvest: no reason to fail every run
    body = fixture("Identify.xml")
    body = re.sub(rb"<earliestDatestamp>[^<]*</earliestDatestamp>", earliest.encode(), body)
    info = read_identify(body)
    assert info.earliest_datestamp == datetime(1970, 1, 1, tzinfo=UTC)
    assert info.granularity == "YYYY-MM-DDThh:mm:ssZ"


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("error-badResumptionToken.xml", errors.BadResumptionToken),
        ("error-cannotDisseminateFormat.xml", errors.CannotDisseminateFormat),
        ("error-noRecordsMatch.xml", errors.NoRecordsMatch),
    ],
)
def test_oai_errors_are_raised_as_their_classes(name: str, cls: type[errors.OAIError]) -> None:
    reader = PageReader(fixture(name))
    with pytest.raises(cls) as caught:
        list(reader.items())
    assert caught.value.message
    assert [type(e) for e in reader.summary.errors] == [cls]
    assert reader.summary.response_date == datetime(2024, 3, 5, 10, 0, 2, tzinfo=UTC)


def test_read_errors_tells_error_documents_from_other_bodies() -> None:
    found = read_errors(fixture("error-badResumptionToken.xml"))
    assert [type(e) for e in found] == [errors.BadResumptionToken]
    assert read_errors(fixture("ListRecords-page1.xml")) == []
    assert read_errors(fixture("not-oai-html-error.html")) == []
    assert read_errors(b"") == []


@pytest.mark.parametrize(
    "body",
    [
        fixture("not-oai-html-error.html"),
        b"<html><body><p>Bad gateway<br></p></body></html>",
        fixture("not-oai-wrong-namespace.xml"),
        b"",
        b"   \n",
    ],
    ids=["html-page", "html-without-doctype", "wrong-namespace", "empty", "blank"],
)
def test_not_oai_responses(body: bytes) -> None:
    with pytest.raises(NotOAIResponse):
        list(PageReader(body).items())


def test_a_json_body_is_refused() -> None:
    with pytest.raises(ResponseError):
        list(PageReader(b'{"error": "maintenance"}').items())


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("malformed-truncated.xml", "line 21"),
        ("malformed-invalid-characters.xml", "invalid Char"),
    ],
)
def test_malformed_responses_name_lxml_finding_and_line(name: str, words: str) -> None:
    with pytest.raises(MalformedResponse) as caught:
        list(PageReader(fixture(name)).items())
    assert words in str(caught.value)


def test_truncated_page_yields_the_records_before_the_break() -> None:
    reader = PageReader(fixture("malformed-truncated.xml"))
    seen: list[str] = []
    with pytest.raises(MalformedResponse):
        seen.extend(identifier_of(item) for item in reader.items())
    # the body is parsed in chunks: a whole record before the break may or may not come out,
    # but nothing after it does
    assert seen in ([], ["urn:x-wmo:md:int.wmo.wis::A"])


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (b'<resumptionToken cursor="0">next&amp;page</resumptionToken>', "next&page"),
        (b"<resumptionToken> spaced </resumptionToken>", "spaced"),
        (b'<resumptionToken completeListSize="3" cursor="2"/>', None),
        (b"<resumptionToken></resumptionToken>", None),
        (b"<oai:resumptionToken>prefixed</oai:resumptionToken>", None),
        (b"<resumptionToken>broken &bad; entity</resumptionToken>", None),
        (b"", None),
    ],
)
def test_announced_token(tail: bytes, expected: str | None) -> None:
    body = b"<OAI-PMH><ListRecords><record/>" + tail + b"</ListRecords></OAI-PMH>"
    assert announced_token(body) == expected


def test_announced_token_is_the_last_one() -> None:
    body = b"<a><resumptionToken>first</resumptionToken><resumptionToken>last</resumptionToken></a>"
    assert announced_token(body) == "last"


def test_indentation_between_elements_is_dropped_and_content_kept() -> None:
    body = (
        b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request><ListRecords>"
        b"<record><header><identifier>a</identifier><datestamp>2024-03-01T00:00:00Z</datestamp>"
        b'</header><metadata><m:r xmlns:m="urn:m">\n  <m:space> </m:space>\n  '
        b"<m:mixed>x <m:i>y</m:i> <m:i>z</m:i></m:mixed>\n</m:r></metadata></record>"
        b"</ListRecords></OAI-PMH>"
    )
    (item,) = PageReader(body).items()
    assert isinstance(item, RecordItem) and item.metadata is not None
    payload = item.metadata
    payload.getparent().remove(payload)  # as the harvester takes it, without the envelope
    assert etree.tostring(payload, with_tail=False) == (
        b'<m:r xmlns:m="urn:m"><m:space> </m:space>'
        b"<m:mixed>x <m:i>y</m:i> <m:i>z</m:i></m:mixed></m:r>"
    )


def test_a_record_whose_metadata_holds_two_elements_is_unreadable() -> None:
    """Its first element was taken as the record and the second dropped, in silence: which of
    the two the peer meant, nothing says (§2.5: a single manifestation of the metadata)."""
    record = (
        "<record><header><identifier>urn:x:two</identifier>"
        "<datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        "<metadata><a xmlns='urn:a'/><!-- c --> <b xmlns='urn:b'/></metadata></record>"
        "<record><header><identifier>urn:x:one</identifier>"
        "<datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        "<metadata><!-- note --> <a xmlns='urn:a'/> </metadata></record>"
    )
    body = (
        "<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        "<responseDate>2024-01-02T00:00:00Z</responseDate><request>http://h/oai</request>"
        f"<ListRecords>{record}</ListRecords></OAI-PMH>"
    ).encode()
    items = PageReader(body).items()
    two = next(items)
    assert isinstance(two, UnreadableItem) and (two.identifier, two.reason) == (
        "urn:x:two",
        "its metadata holds 2 elements, where OAI-PMH allows one (§2.5)",
    )
    assert etree.fromstring(two.raw).findall(".//{urn:b}b")  # kept whole for the quarantine
    one = next(items)  # comments and blanks around the one element are no second record
    assert isinstance(one, RecordItem) and one.header.identifier == "urn:x:one"
    assert one.metadata is not None and one.metadata.tag == "{urn:a}a"


@pytest.mark.parametrize(
    ("header", "identifier", "reason"),
    [
        (
            "<identifier>urn:x:a</identifier><identifier>urn:x:b</identifier>"
            "<datestamp>2024-01-01T00:00:00Z</datestamp>",
            None,
            "a header with two identifiers, 'urn:x:a' and 'urn:x:b'",
        ),
        (
            "<identifier>urn:x:a</identifier><datestamp>2024-01-01T00:00:00Z</datestamp>"
            "<datestamp>2025-01-01T00:00:00Z</datestamp>",
            "urn:x:a",
            "a header with two datestamps",
        ),
    ],
)
def test_a_header_with_two_identifiers_or_datestamps_is_unreadable(
    header: str, identifier: str | None, reason: str
) -> None:
    # the last one was taken: a deleted header could delete a record the peer never meant
    body = (
        "<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        "<responseDate>2024-01-02T00:00:00Z</responseDate><request>http://h/oai</request>"
        f"<ListIdentifiers><header status='deleted'>{header}</header></ListIdentifiers></OAI-PMH>"
    ).encode()
    [item] = read_all(body)[0]
    assert isinstance(item, UnreadableItem) and (item.identifier, item.reason) == (
        identifier,
        reason,
    )


@pytest.mark.parametrize(
    ("status", "deleted"),
    [("deleted", True), (" Deleted ", True), ("", False), ("withdrawn", None)],
)
def test_a_header_status_is_deleted_or_nothing(status: str, deleted: bool | None) -> None:
    body = (
        "<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        "<responseDate>2024-01-02T00:00:00Z</responseDate><request>http://h/oai</request>"
        f"<ListIdentifiers><header status='{status}'><identifier>urn:x:a</identifier>"
        "<datestamp>2024-01-01T00:00:00Z</datestamp></header></ListIdentifiers></OAI-PMH>"
    ).encode()
    [item] = read_all(body)[0]
    if deleted is not None:  # "Deleted" was taken as live, the deletion lost
        assert isinstance(item, HeaderItem) and item.deleted == deleted
    else:  # was taken as live: a status whose meaning is not plain is not guessed at
        assert isinstance(item, UnreadableItem) and item.reason == (
            f"a header whose status {status!r} is not 'deleted', the one status OAI-PMH has"
        )


def test_a_response_with_no_answer_in_it_is_not_an_empty_list() -> None:
    # an envelope with no verb's element and no error was read as an empty list: the list
    # ended there, the run "ok"
    body = (
        b"<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        b"<responseDate>2024-01-02T00:00:00Z</responseDate><request>http://h/oai</request>"
        b"</OAI-PMH>"
    )
    with pytest.raises(NotOAIResponse, match="no verb's element, and no error"):
        read_all(body)


def test_a_page_with_two_resumption_tokens_is_malformed() -> None:
    # the last was followed: the records the list goes on with after the other were skipped
    body = (
        b"<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        b"<responseDate>2024-01-02T00:00:00Z</responseDate><request>http://h/oai</request>"
        b"<ListIdentifiers><header><identifier>urn:x:a</identifier>"
        b"<datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        b"<resumptionToken>t1</resumptionToken><resumptionToken>t2</resumptionToken>"
        b"</ListIdentifiers></OAI-PMH>"
    )
    with pytest.raises(MalformedResponse, match="two resumptionTokens"):
        read_all(body)


def _identify_with(descriptions: str) -> bytes:
    return fixture("Identify.xml").replace(b"</Identify>", descriptions.encode() + b"</Identify>")


@pytest.mark.parametrize(
    ("descriptions", "url"),
    [
        ("", None),
        (
            '<description><wiscat:changes xmlns:wiscat="urn:wiscat:oai-pmh:1" '
            'url=" https://peer.example/oai/changes "/></description>',
            "https://peer.example/oai/changes",
        ),
        (  # not a URL of http(s): the first that is
            '<description><wiscat:changes xmlns:wiscat="urn:wiscat:oai-pmh:1" '
            'url="file:///etc/passwd"/></description>'
            '<description><wiscat:changes xmlns:wiscat="urn:wiscat:oai-pmh:1" '
            'url="http://peer.example/changes"/></description>',
            "http://peer.example/changes",
        ),
        (  # another namespace's element of the name
            '<description><changes xmlns="urn:other" url="http://x.example/c"/></description>',
            None,
        ),
    ],
)
def test_identify_gives_the_peer_s_change_hint_stream(descriptions: str, url: str | None) -> None:
    assert read_identify(_identify_with(descriptions)).changes_url == url


def test_oai_names_inside_a_record_are_its_content_not_the_list() -> None:
    # a record's metadata may hold elements of the OAI-PMH namespace (a record about
    # OAI-PMH, or a broken peer's template): they are the record's, never a verb's element,
    # a header or a token of the page's own
    oai = "http://www.openarchives.org/OAI/2.0/"
    inside = (
        f"<x xmlns:o='{oai}'><o:ListIdentifiers><o:header><o:identifier>urn:x:inner</o:identifier>"
        "<o:datestamp>2024-01-01T00:00:00Z</o:datestamp></o:header>"
        "<o:resumptionToken>inner</o:resumptionToken></o:ListIdentifiers></x>"
    )
    body = (
        f"<OAI-PMH xmlns='{oai}'>"
        "<responseDate>2024-01-02T00:00:00Z</responseDate><request>http://h/oai</request>"
        "<ListRecords><record><header><identifier>urn:x:outer</identifier>"
        "<datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        f"<metadata>{inside}</metadata></record>"
        "<resumptionToken>outer</resumptionToken></ListRecords></OAI-PMH>"
    ).encode()
    items, reader = read_all(body)
    assert [identifier_of(item) for item in items] == ["urn:x:outer"]
    record = items[0]
    assert isinstance(record, RecordItem) and record.metadata is not None
    assert record.metadata.findtext(f".//{{{oai}}}identifier") == "urn:x:inner"
    assert (reader.summary.verb, reader.summary.resumption_token) == ("ListRecords", "outer")
