"""The page reader against hostile pages: entity expansion, XXE, external DTDs, deep nesting,
huge text nodes and large pages; each fails the page, nothing is loaded, memory stays bounded."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from lxml import etree

from tests.support.canary import canary, knock
from tests.unit.oai_pages import GMD, fixture
from wiscat.shared.oaipmh import pages
from wiscat.shared.oaipmh.pages import (
    MalformedResponse,
    PageReader,
    RecordItem,
    ResponseError,
    announced_token,
    read_identify,
)


def test_billion_laughs_is_refused_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(MalformedResponse):
        list(PageReader(fixture("malformed-billion-laughs.xml")).items())
    assert time.monotonic() - started < 2


def test_xxe_is_refused_and_the_target_never_read(tmp_path: Path) -> None:
    target = tmp_path / "secret.txt"
    target.write_text("TOP-SECRET-CONTENT")
    # atime older than mtime: with relatime (or strictatime) any read moves it
    os.utime(target, (0, time.time()))
    body = fixture("malformed-xxe.xml").replace(b"@TARGET@", str(target).encode())
    reader = PageReader(body)
    seen: list[bytes] = []
    with pytest.raises(MalformedResponse) as caught:
        for item in reader.items():
            if isinstance(item, RecordItem) and item.metadata is not None:
                seen.append(etree.tostring(item.metadata))
    assert "TOP-SECRET" not in str(caught.value)
    assert not any(b"TOP-SECRET" in chunk for chunk in seen)
    untouched = os.stat(target).st_atime == 0
    target.read_text()
    if os.stat(target).st_atime != 0:  # atime is tracked here, so it proves no read happened
        assert untouched, "the parser read the XXE target"


def big_page(count: int) -> bytes:
    records = b"".join(
        b"<record><header><identifier>id-%d</identifier>"
        b"<datestamp>2024-03-01T00:00:00Z</datestamp></header><metadata>"
        b'<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd">'
        b"<gmd:fileIdentifier>%d</gmd:fileIdentifier></gmd:MD_Metadata>"
        b"</metadata></record>" % (n, n)
        for n in range(count)
    )
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>'
        b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request>"
        b"<ListRecords>" + records + b"<resumptionToken>next</resumptionToken></ListRecords>"
        b"</OAI-PMH>"
    )


def test_a_large_page_is_pruned_as_it_is_read() -> None:
    """L04: a page is pruned as it is read, not held whole: the records of a parse chunk are
    freed once they are read."""
    count = 20_000
    reader = PageReader(big_page(count))
    most_in_tree = 0
    seen = 0
    for item in reader.items():
        assert isinstance(item, RecordItem) and item.metadata is not None
        # the metadata element is alive and whole while the consumer holds the item
        assert item.metadata.findtext(GMD + "fileIdentifier") == str(seen)
        container = item.metadata.getparent()
        assert container is not None
        record = container.getparent()
        assert record is not None
        list_records = record.getparent()
        assert list_records is not None
        most_in_tree = max(most_in_tree, len(list_records))
        seen += 1
    assert seen == count
    assert reader.summary.resumption_token == "next"
    # at most the records of about one parse chunk are held at once, not the whole page
    per_chunk = pages._CHUNK * count // len(big_page(count))
    assert count > 10 * per_chunk
    assert most_in_tree < 2 * per_chunk


def hostile_page(doctype: bytes, payload: bytes = b"", *, pad: int = 0) -> bytes:
    """A ListRecords page of two records, ``doctype`` in its prolog after ``pad`` bytes of
    white space and a comment, ``payload`` in the second record's metadata."""
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        + (b"<!--" + b" " * pad + b"-->\n" if pad else b"")
        + doctype
        + b'\n<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request><ListRecords>"
        b"<record><header><identifier>good</identifier>"
        b"<datestamp>2024-03-01T00:00:00Z</datestamp></header><metadata>"
        b'<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd"/></metadata></record>'
        b"<record><header><identifier>bad</identifier>"
        b"<datestamp>2024-03-01T00:00:00Z</datestamp></header><metadata>"
        b'<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd">'
        + payload
        + b"</gmd:MD_Metadata></metadata></record></ListRecords></OAI-PMH>"
    )


DOCTYPE_REFUSED = "the response carries a DOCTYPE, which is refused"


def refusal(body: bytes) -> MalformedResponse:
    reader = PageReader(body)
    with pytest.raises(MalformedResponse) as caught:
        for _ in reader.items():
            pass
    return caught.value


@pytest.mark.parametrize("pad", [0, 70_000], ids=["plain", "behind-70KB-of-prolog"])
def test_x02_a_quadratic_blowup_page_is_refused(pad: int) -> None:
    """X02: a quadratic-blowup page (an entity of 100,000 characters used 10,000 times) is
    refused for its DOCTYPE, nothing of it echoed, within a second of CPU; one whose DOCTYPE
    stands behind 70 KB of prolog, past the bytes looked at before parsing, is refused by
    libxml2's amplification limit, unexpanded (resolve_entities=False)."""
    body = hostile_page(
        b'<!DOCTYPE OAI-PMH [<!ENTITY a "' + b"a" * 100_000 + b'">]>', b"&a;" * 10_000, pad=pad
    )
    started = time.process_time()
    refused = refusal(body)
    assert time.process_time() - started < 1.0
    assert str(refused) == (
        DOCTYPE_REFUSED
        if not pad
        else "not well-formed XML: Maximum entity amplification factor exceeded, see "
        "xmlCtxtSetMaxAmplification., line 4, column 525"
    )


def test_x04_pages_naming_an_http_canary_never_connect() -> None:
    """X04: pages whose external DTD, external entity or parameter entity names an HTTP canary
    on loopback are refused (before parsing, or behind 70 KB of prolog by the parser), and the
    canary counts 0 connections; announced_token and read_identify parse nothing of them."""
    with canary() as listening:
        url = listening.url.encode()
        doctypes = [
            b'<!DOCTYPE OAI-PMH SYSTEM "' + url + b'x.dtd">',
            b'<!DOCTYPE OAI-PMH [<!ENTITY e SYSTEM "' + url + b'e">]>',
            b'<!DOCTYPE OAI-PMH [<!ENTITY % p SYSTEM "' + url + b'p"> %p;]>',
        ]
        for doctype in doctypes:
            for pad in (0, 70_000):
                body = hostile_page(doctype, b"&e;" if b"ENTITY e" in doctype else b"", pad=pad)
                refused = refusal(body)
                if not pad:  # behind the prolog: the parser's own refusal, whichever it is
                    assert str(refused) == DOCTYPE_REFUSED
                with pytest.raises(ResponseError):
                    read_identify(body)
                announced_token(body)
        assert listening.connections == 0
        knock(listening)
        assert listening.connections == 1


def test_x06_a_harmless_internal_entity_fails_the_whole_page() -> None:
    """X06: Rule: a page declaring even a harmless internal entity, used in one record, is
    refused whole, nothing of it given, the good record neither (README "Harvest peers": a
    DOCTYPE fails the run; there is no lenient mode)."""
    reader = PageReader(hostile_page(b'<!DOCTYPE OAI-PMH [<!ENTITY x "X">]>', b"&x;"))
    given = []
    with pytest.raises(MalformedResponse, match=DOCTYPE_REFUSED):
        given.extend(reader.items())
    assert given == []


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"<gmd:x>" * 10_000 + b"</gmd:x>" * 10_000, "Excessive depth in document: 256"),
        (b"<gmd:abstract>" + b"x" * (11 * 1024 * 1024) + b"</gmd:abstract>", "Text node too long"),
    ],
    ids=["depth-10000", "text-node-11MB"],
)
def test_x07_deep_nesting_and_a_huge_text_node_fail_the_page(payload: bytes, words: str) -> None:
    """X07: a record nested 10,000 deep or holding an 11 MB text node fails its page with a
    MalformedResponse naming libxml2's limit (no crash), after the records before it."""
    reader = PageReader(hostile_page(b"", payload))
    given = []
    with pytest.raises(MalformedResponse) as caught:
        given.extend(item.header.identifier for item in reader.items())  # type: ignore[union-attr]
    assert str(caught.value).startswith("not well-formed XML: ")
    assert words in str(caught.value)
    assert given in ([], ["good"])
