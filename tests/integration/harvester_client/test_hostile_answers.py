"""The harvester's OAI-PMH client against answers that are not what was asked or are hostile:
HTML, another verb, broken or mis-encoded XML, entity expansion, XXE, and bodies past the cap.

Each peer is a small real server on 127.0.0.1; nothing in the HTTP path is mocked."""

from __future__ import annotations

import os
import resource
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.harvester_client.peers import (
    ClientFactory,
    Peer,
    Serve,
    fixture,
    identifiers,
    xml,
)
from tests.integration.peak_memory import peak_growth
from wiscat.harvester.client import OAIClient
from wiscat.harvester.errors import (
    BadResponse,
    ResponseTooLarge,
)
from wiscat.shared.oaipmh.pages import MalformedResponse, NotOAIResponse, RecordItem


async def fails_with(
    serve: Serve, client: OAIClient, body: bytes, content_type: str = "text/xml"
) -> BadResponse:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(body=body, content_type=content_type)

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await identifiers(client, peer.url)
    assert peer.count == 1  # a broken body is the peer's answer, not a transient failure
    return caught.value


async def test_an_html_page_with_status_200(serve: Serve, client: OAIClient) -> None:
    """H07: an HTML page with status 200 is not OAI-PMH."""
    failure = await fails_with(serve, client, fixture("not-oai-html-error.html"), "text/html")
    assert isinstance(failure.__cause__, NotOAIResponse)
    assert "HTML" in failure.reason


async def test_a_list_answered_with_another_verb(serve: Serve, client: OAIClient) -> None:
    # a ListRecords request answered with ListIdentifiers headers: read as records to get, or
    # as a list that ended, the run went on as if the peer had answered what it was asked
    failure = await fails_with(serve, client, fixture("ListIdentifiers-day-granularity.xml"))
    assert "a ListRecords request to" in failure.reason
    assert failure.reason.endswith("was answered with 'ListIdentifiers'")


async def test_get_record_answered_with_a_list(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("ListRecords-page1.xml")

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await client.get_record(peer.url, "urn:x-wmo:md:int.wmo.wis::A", "iso19139")
    assert caught.value.reason == (
        f"a GetRecord request to {peer.url} was answered with 'ListRecords'"
    )


async def test_truncated_xml(serve: Serve, client: OAIClient) -> None:
    """H06: a page whose XML is cut short is refused, naming the line."""
    failure = await fails_with(serve, client, fixture("malformed-truncated.xml"))
    assert isinstance(failure.__cause__, MalformedResponse)
    assert "line 21" in failure.reason


async def test_invalid_xml_characters(serve: Serve, client: OAIClient) -> None:
    """H09: a page holding a character XML forbids is refused."""
    failure = await fails_with(serve, client, fixture("malformed-invalid-characters.xml"))
    assert isinstance(failure.__cause__, MalformedResponse)
    assert "invalid Char" in failure.reason


async def test_billion_laughs_is_refused(serve: Serve, client: OAIClient) -> None:
    """X01: a billion-laughs page is refused quickly, its content not echoed."""
    started = time.monotonic()
    failure = await fails_with(serve, client, fixture("malformed-billion-laughs.xml"))
    assert isinstance(failure.__cause__, MalformedResponse)
    assert time.monotonic() - started < 2
    assert "lollol" not in failure.reason


async def test_xxe_is_refused_and_its_target_never_read(
    serve: Serve, client: OAIClient, tmp_path: Path
) -> None:
    """X03: an XXE page is refused and its target never read."""
    target = tmp_path / "secret.txt"
    target.write_text("TOP-SECRET-CONTENT")
    os.utime(target, (0, time.time()))  # atime before mtime: any read moves it (relatime)
    body = fixture("malformed-xxe.xml").replace(b"@TARGET@", str(target).encode())
    failure = await fails_with(serve, client, body)
    assert isinstance(failure.__cause__, MalformedResponse)
    assert "TOP-SECRET" not in failure.reason and "TOP-SECRET" not in repr(failure.__cause__)
    untouched = os.stat(target).st_atime == 0
    target.read_text()
    if os.stat(target).st_atime != 0:  # atime is tracked on this filesystem: it proves no read
        assert untouched, "the XXE target was read"


BOMB_PREFIX = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
    b"<responseDate>2024-03-05T10:00:00Z</responseDate><request>x</request><ListRecords>"
)


BOMB_SUFFIX = b"</ListRecords></OAI-PMH>"


def gzip_bomb(megabytes: int) -> Iterator[bytes]:
    """A gzip stream of BOMB_PREFIX, ``megabytes`` MiB of spaces and BOMB_SUFFIX, made lazily.

    After a full flush a deflate stream needs no history, so one compressed megabyte of spaces
    (about 1 KiB) stands for every megabyte: the bomb costs no CPU to build.
    """
    spaces = b" " * (1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    yield compressor.compress(BOMB_PREFIX) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(spaces) + compressor.flush(zlib.Z_FULL_FLUSH)
    for _ in range(megabytes):
        yield block
    tail = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the final block
    yield tail.compress(BOMB_SUFFIX) + tail.flush()
    crc = zlib.crc32(BOMB_PREFIX)
    for _ in range(megabytes):
        crc = zlib.crc32(spaces, crc)
    crc = zlib.crc32(BOMB_SUFFIX, crc)
    size = len(BOMB_PREFIX) + megabytes * len(spaces) + len(BOMB_SUFFIX)
    yield struct.pack("<II", crc, size & 0xFFFFFFFF)


def test_the_bomb_is_an_honest_gzip_stream() -> None:
    import gzip

    assert gzip.decompress(b"".join(gzip_bomb(3))) == BOMB_PREFIX + b" " * (3 << 20) + BOMB_SUFFIX


async def test_a_gzip_bomb_is_stopped_at_the_cap(serve: Serve, client_for: ClientFactory) -> None:
    """X08: a 1 GiB gzip bomb is stopped at the 8 MiB page cap within 5 s, not retried, this
    process's peak memory (reset before the fetch, so whatever ran before does not hide it)
    growing less than the cap + 64 MiB."""

    async def handler(request: web.Request, peer: Peer) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/xml", "Content-Encoding": "gzip"}
        )
        await response.prepare(request)
        try:
            for piece in gzip_bomb(1024):  # 1 GiB once decompressed, about 1 MiB on the wire
                await response.write(piece)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client hung up, as it should
        return response

    peer = await serve(handler)
    client = client_for(max_decompressed_bytes=8 * 1024 * 1024)
    started = time.monotonic()
    with peak_growth() as grown, pytest.raises(ResponseTooLarge) as caught:
        await identifiers(client, peer.url)
    elapsed = time.monotonic() - started
    # the criterion: peak memory < the cap + 64 MiB
    assert grown.kib < (8 << 10) + (64 << 10), f"peak memory grew by {grown.kib} KiB"
    assert elapsed < 5
    assert peer.count == 1
    assert caught.value.reason == (
        f"response from 127.0.0.1 exceeds {8 * 1024 * 1024} bytes decompressed "
        "(the cap is WISCAT_HARVEST_MAX_PAGE_BYTES)"
    )


def one_record_page(title: str) -> str:
    """A ListRecords page of one record whose title is ``title``, as text to encode."""
    return (
        "<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'>"
        "<responseDate>2024-01-02T00:00:00Z</responseDate>"
        "<request verb='ListRecords'>http://peer/oai</request><ListRecords><record>"
        "<header><identifier>id-1</identifier><datestamp>2024-01-01T00:00:00Z</datestamp></header>"
        "<metadata><title xmlns='urn:t'>" + title + "</title></metadata>"
        "</record></ListRecords></OAI-PMH>"
    )


ENCODED_PAGES = {
    "iso-8859-1 declared": b"<?xml version='1.0' encoding='ISO-8859-1'?>"
    + one_record_page("caf\u00e9").encode("latin-1"),
    "utf-16 with a bom": (
        "<?xml version='1.0' encoding='UTF-16'?>" + one_record_page("caf\u00e9")
    ).encode("utf-16"),  # Python writes the BOM
    "utf-8 with a bom": b"\xef\xbb\xbf<?xml version='1.0' encoding='UTF-8'?>"
    + one_record_page("caf\u00e9").encode(),
}


@pytest.mark.parametrize("form", list(ENCODED_PAGES))
async def test_h10_a_page_is_read_by_its_encoding(
    serve: Serve, client: OAIClient, form: str
) -> None:
    """H10: a whole page in ISO-8859-1 (declared so), in UTF-16 with a BOM, or in UTF-8 after
    a BOM, gives the exact text."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(body=ENCODED_PAGES[form], headers={"Content-Type": "text/xml"})

    peer = await serve(handler)
    titles: list[str | None] = []
    async for page in client.list_pages(peer.url, "ListRecords", metadata_prefix="iso19139"):
        for item in page.items():
            assert isinstance(item, RecordItem) and item.metadata is not None
            titles.append(item.metadata.text)
    assert titles == ["caf\u00e9"]


async def test_h10_latin1_bytes_declared_as_utf8_are_refused(
    serve: Serve, client: OAIClient
) -> None:
    """H10: a page declared UTF-8 whose bytes are Latin-1 is refused, not read with U+FFFD."""
    body = b"<?xml version='1.0' encoding='UTF-8'?>" + one_record_page("caf\u00e9").encode(
        "latin-1"
    )
    failure = await fails_with(serve, client, body)
    assert isinstance(failure.__cause__, MalformedResponse)
    assert failure.reason.startswith("not well-formed XML: Invalid bytes in character encoding")
    assert "\ufffd" not in failure.reason


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "content-length"])
async def test_x08_a_300_mib_plain_body_is_stopped_at_the_cap(
    serve: Serve, client_for: ClientFactory, declared: bool
) -> None:
    """X08: a plain (not compressed) 300 MiB answer, streamed by the peer chunked or with its
    length declared, is stopped at the 8 MiB cap, not retried, the process's peak memory
    growing less than the cap + 64 MiB."""
    megabyte = b" " * (1 << 20)
    size = len(BOMB_PREFIX) + 300 * len(megabyte) + len(BOMB_SUFFIX)

    async def handler(request: web.Request, peer: Peer) -> web.StreamResponse:
        headers = {"Content-Type": "text/xml"}
        if declared:
            headers["Content-Length"] = str(size)
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        try:
            await response.write(BOMB_PREFIX)
            for _ in range(300):
                await response.write(megabyte)
            await response.write(BOMB_SUFFIX)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client hung up, as it should
        return response

    peer = await serve(handler)
    cap = 8 * 1024 * 1024
    client = client_for(max_decompressed_bytes=cap)
    with peak_growth() as grown, pytest.raises(ResponseTooLarge) as caught:
        await identifiers(client, peer.url)
    assert peer.count == 1
    assert caught.value.reason == (
        f"response from 127.0.0.1 exceeds {cap} bytes (the cap is WISCAT_HARVEST_MAX_PAGE_BYTES)"
    )
    assert grown.kib < (cap >> 10) + 64 * 1024, f"peak memory grew by {grown.kib} KiB"


@pytest.mark.parametrize("where", ["after", "before"])
async def test_x08_many_concatenated_empty_gzip_members_cost_little_cpu(
    serve: Serve, client: OAIClient, where: str
) -> None:
    """X08: a page gzipped as one member beside 200,000 empty gzip members (4 MB on the wire):
    the page is read, or refused as a bad response, within 2 s of the process's CPU (aiohttp
    before 3.14.4 took unbounded CPU on such a stream)."""
    import gzip

    page = gzip.compress(fixture("ListRecords-page2.xml"))
    empty = gzip.compress(b"")
    members = empty * 200_000
    body = page + members if where == "after" else members + page

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(
            body=body, headers={"Content-Type": "text/xml", "Content-Encoding": "gzip"}
        )

    peer = await serve(handler)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    try:
        outcome: object = await identifiers(client, peer.url)
    except BadResponse as refused:
        outcome = refused
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert usage.ru_utime + usage.ru_stime - cpu_before < 2.0
    assert peer.count == 1
    # aiohttp decodes the first member alone: the members after the page are never inflated,
    # and members before it leave an empty body
    if where == "after":
        assert outcome == ["urn:x-wmo:md:int.wmo.wis::C"]
    else:
        assert isinstance(outcome, BadResponse), outcome
        assert outcome.reason == f"the response body is empty (from {peer.url})"
