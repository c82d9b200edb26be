"""F02: any text a record may hold comes out of the provider as it went in (Hypothesis).

Arbitrary Unicode text (no surrogates: no UTF-8 holds one) is put at the end of a generated
record's title or abstract, each character written as itself or by a character reference, and
the record is put through the admin API of a real provider on a real PostgreSQL. A text of
characters XML 1.0 allows (§2.2) is served by GetRecord and ListRecords, iso19139 and oai_dc,
in well-formed, XSD-valid responses, and read back by the harvester's page reader as it went
in, with the content hash the ingest computed. A text holding a character XML 1.0 does not
allow is refused at ingest with the reason (P14: the parser's message, line and column of the
first such character), and nothing of it is stored.

One provider and database serve every example of a test; each example puts a record of its
own number, so examples do not see each other's records.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from xml.sax.saxutils import escape

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.support.oai_client import OAI, Answer, oai_get
from tests.support.oai_validation import strict_checks, validate_oai
from tests.support.servers import RunningProvider, running_provider
from tests.unit.test_invalid_characters import allowed
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import parse_record, record_from_element
from wiscat.shared.oaipmh.pages import PageReader, RecordItem

GMD = "{http://www.isotc211.org/2005/gmd}"
DC = "{http://purl.org/dc/elements/1.1/}"
# the record's own title and abstract (not a thesaurus's title), and where their text ends
FIELDS = {
    "title": (
        f"{GMD}identificationInfo//{GMD}citation//{GMD}title/*",
        b"</gco:CharacterString></gmd:title>",
    ),
    "abstract": (
        f"{GMD}identificationInfo//{GMD}abstract/*",
        b"</gco:CharacterString></gmd:abstract>",
    ),
}
ADMIN = {"Authorization": "Bearer test-admin-token"}


@dataclass(frozen=True)
class Written:
    """A text as a record's field holds it: each character as itself or by reference."""

    characters: tuple[tuple[str, bool], ...]  # (character, written by a character reference)

    @property
    def text(self) -> str:
        return "".join(character for character, _ in self.characters)

    def markup(self) -> str:
        return "".join(
            f"&#{ord(c)};" if by_reference else escape(c) for c, by_reference in self.characters
        )


# Characters that have broken XML text handling somewhere, drawn often beside any character
# at all: the markup characters, line ends and other white space (XML 1.0 §2.11 reads a
# carriage return as a line feed), the ends of the ranges XML 1.0 §2.2 allows and the
# characters just outside them, a byte order mark, and characters Unicode normalisation
# would change (a wiscat node stores and serves a record's text as written).
TRICKY = (
    "<>&\"']]>"
    "\t\n\r \x85\xa0\u2028\u2029\u3000"
    "\x00\x01\x08\x0b\x0c\x0e\x1f\x7f\x80\x9f"
    "\ud7ff\ue000\ufffd\ufffe\uffff\U00010000\U0001fffe\U0010ffff\ufeff"
    "\u212b\u2126\u0301\ufb01\u1e9b\uff21"
)
any_character = st.characters(exclude_categories=["Cs"]) | st.sampled_from(TRICKY)
legal_character = st.characters(exclude_categories=["Cs"]).filter(
    lambda c: allowed(ord(c))
) | st.sampled_from([c for c in TRICKY if allowed(ord(c))])
#: every character XML 1.0 does not allow but the surrogates (§2.2: Char)
ILLEGAL = [chr(c) for c in range(0x20) if c not in (0x9, 0xA, 0xD)] + ["\ufffe", "\uffff"]


def written(character_strategy: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, bool]]:
    """A character and whether it is written by a character reference. A carriage return
    written as itself is read as a line feed (XML 1.0 §2.11, end-of-line handling): the only
    way to have one in a text is a reference."""
    return st.tuples(character_strategy, st.booleans()).map(
        lambda pair: (pair[0], pair[1] or pair[0] == "\r")
    )


legal_texts = st.lists(written(legal_character), min_size=1, max_size=40).map(
    lambda characters: Written(tuple(characters))
)
#: characters XML 1.0 allows, one it does not, then any characters at all
illegal_texts = st.builds(
    lambda before, bad, after: Written((*before, bad, *after)),
    st.lists(written(legal_character), max_size=20),
    written(st.sampled_from(ILLEGAL)),
    st.lists(written(any_character), max_size=20),
)


def with_text(n: int, field: str, written: Written) -> bytes:
    """Generated record ``n`` with ``written`` at the end of its title or abstract."""
    end = FIELDS[field][1]
    document = generate_record(n)
    assert document.count(end) >= 1
    return document.replace(end, written.markup().encode() + end, 1)


def field_text(metadata: etree._Element, field: str) -> str:
    found = metadata.find(FIELDS[field][0])
    assert found is not None, field
    return found.text or ""


def expected_reason(document: bytes, field: str, text: Written) -> str:
    """What the ingest says of a record whose text holds a character XML 1.0 does not allow:
    libxml2's message for the first one, with its line and column (of the character; after a
    character reference), both counted in characters from 1."""
    index = next(i for i, (c, _) in enumerate(text.characters) if not allowed(ord(c)))
    character, by_reference = text.characters[index]
    decoded = document.decode()
    start = decoded.index(text.markup() + FIELDS[field][1].decode())
    preceding = decoded[:start] + Written(text.characters[:index]).markup()
    line = preceding.count("\n") + 1
    column = len(preceding) - preceding.rfind("\n")
    if by_reference:
        message = f"xmlParseCharRef: invalid xmlChar value {ord(character)}"
        column += len(f"&#{ord(character)};")
    elif character == "\x00":
        message = "Invalid character: Char 0x0 out of allowed range\n"
    else:
        message = f"PCDATA invalid Char value {ord(character)}"
    return f"not well-formed XML: {message}, line {line}, column {column}"


@pytest.fixture
async def provider(database_url: str) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url) as running:
        yield running


@pytest.fixture
def numbers() -> Iterator[int]:
    """A fresh record number for each example."""
    return itertools.count(1)


async def list_records(provider: RunningProvider, prefix: str, stamp: str) -> list[Answer]:
    """Every page of ListRecords from ``stamp`` until ``stamp``, each checked well-formed,
    XSD-valid and strict."""
    pages = [await oai_get(provider.oai, verb="ListRecords", metadataPrefix=prefix,
                           **{"from": stamp, "until": stamp})]  # fmt: skip
    while True:
        check(pages[-1])
        token = pages[-1].xpath("//oai:ListRecords/oai:resumptionToken")
        if not token or not (token[0].text or "").strip():
            return pages
        pages.append(await oai_get(provider.oai, verb="ListRecords", resumptionToken=token[0].text))


def check(answer: Answer) -> None:
    assert answer.status == 200, answer.body[-500:]
    validate_oai(answer.body)
    strict_checks(answer.body)
    assert answer.errors() == [], answer.body[-500:]


def read_record(pages: list[Answer], identifier: str) -> tuple[str, str, bytes]:
    """The title and abstract of ``identifier`` as the harvester's page reader reads them from
    a list, and the content hash its record would be stored with."""
    found = []
    for page in pages:
        for item in PageReader(page.body).items():
            assert isinstance(item, RecordItem), item
            if item.header.identifier == identifier:
                assert item.metadata is not None
                record = record_from_element(item.metadata, safe_parsed=True)
                metadata = etree.fromstring(record.xml.encode())
                found.append(
                    (
                        field_text(metadata, "title"),
                        field_text(metadata, "abstract"),
                        record.content_hash,
                    )
                )
    assert len(found) == 1, (identifier, len(found))
    return found[0]


async def put(provider: RunningProvider, identifier: str, document: bytes) -> tuple[int, object]:
    async with (
        aiohttp.ClientSession() as http,
        http.put(
            f"{provider.root}/admin/records/{identifier}", data=document, headers=ADMIN
        ) as response,
    ):
        return response.status, await response.json()


# One provider and database serve every example (each puts a record of its own number).
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=legal_texts, field=st.sampled_from(sorted(FIELDS)))
async def test_f02_any_text_xml_allows_is_served_as_put(
    provider: RunningProvider, numbers: Iterator[int], text: Written, field: str
) -> None:
    """F02: a text of characters XML 1.0 allows, in a record put through the admin API, comes
    back from GetRecord and ListRecords as it went in, in well-formed and XSD-valid responses
    (iso19139 and oai_dc), and the harvester's page reader makes of it the record the ingest
    made, content hash and all."""
    n = next(numbers)
    identifier = identifier_for(n)
    document = with_text(n, field, text)
    assert await put(provider, identifier, document) == (
        201,
        {"identifier": identifier, "outcome": "added"},
    )
    original = etree.fromstring(generate_record(n))
    expected = {name: field_text(original, name) for name in FIELDS}
    expected[field] += text.text
    content_hash = parse_record(document).content_hash

    answer = await oai_get(
        provider.oai, verb="GetRecord", identifier=identifier, metadataPrefix="iso19139"
    )
    check(answer)
    assert read_record([answer], identifier) == (
        expected["title"],
        expected["abstract"],
        content_hash,
    )
    stamp = answer.tree.findtext(f".//{OAI}header/{OAI}datestamp")
    assert stamp is not None
    assert read_record(await list_records(provider, "iso19139", stamp), identifier) == (
        expected["title"],
        expected["abstract"],
        content_hash,
    )
    # the Dublin Core crosswalk of the same record: valid, and the text in it, its runs of
    # white space folded as the crosswalk folds them (wiscat.shared.crosswalk)
    dublin_core = [
        (
            [e.text or "" for e in record.iter(f"{DC}title")],
            [e.text or "" for e in record.iter(f"{DC}description")],
        )
        for page in await list_records(provider, "oai_dc", stamp)
        for record in page.xpath("//oai:record")
        if record.findtext(f"{OAI}header/{OAI}identifier") == identifier
    ]
    assert dublin_core == [
        ([" ".join(expected["title"].split())], [" ".join(expected["abstract"].split())])
    ]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=illegal_texts, field=st.sampled_from(sorted(FIELDS)))
async def test_f02_p14_a_text_xml_does_not_allow_is_refused_with_the_reason(
    provider: RunningProvider, numbers: Iterator[int], text: Written, field: str
) -> None:
    """F02, P14: a text holding a character XML 1.0 does not allow, as itself or by a
    character reference, is refused at the admin API with the reason (the first such
    character, its line and column), and nothing of the record is stored."""
    n = next(numbers)
    identifier = identifier_for(n)
    document = with_text(n, field, text)
    assert await put(provider, identifier, document) == (
        400,
        {"detail": f"record refused: {expected_reason(document, field, text)}"},
    )
    answer = await oai_get(
        provider.oai, verb="GetRecord", identifier=identifier, metadataPrefix="iso19139"
    )
    assert answer.errors() == ["idDoesNotExist"]
