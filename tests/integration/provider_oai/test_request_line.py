"""What the provider makes of a request line as sent: a raw ``#`` in it, and its length.

Each request is written as is by Python's ``http.client`` (which sends a target as given, ``#``
included, as some clients do) or over a raw socket, to a real provider on loopback over a real
PostgreSQL."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from urllib.parse import urlsplit

from tests.integration.provider_oai.answers import OWN, check
from tests.support import factories
from tests.support.oai_client import Answer
from tests.support.servers import running_provider
from wiscat.provider.serving import MAX_REQUEST_TARGET
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import parse_record


def _sent_as_is(root: str, target: str) -> Answer:
    """GET ``target`` written into the request line byte for byte."""
    url = urlsplit(root)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request("GET", target)
        response = conn.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read())
    finally:
        conn.close()


async def test_p02_a_raw_hash_in_the_query_is_a_bad_argument_not_another_record(
    db: Pool, database_url: str
) -> None:
    """An identifier holding ``#`` travels as ``%23``; sent raw, the ``#`` reaches the server
    (RFC 9112 allows none in a request target), which cut it and what followed, and served
    another record (``…synop.0`` for ``…synop.0#frag``). It is badArgument, naming ``%23``."""
    template = generate_record(1, centre="xx").decode()
    plain = parse_record(template).identifier
    hashed = plain + "#frag"
    await factories.load_records(db, OWN, range(5))
    records = [parse_record(template), parse_record(template.replace(plain, hashed))]
    async with db.acquire() as conn, conn.transaction():
        await store.upsert_records(conn, OWN, [incoming(r) for r in records])
    async with running_provider(database_url) as running:
        query = "verb=GetRecord&metadataPrefix=iso19139&identifier="
        encoded = await asyncio.to_thread(
            _sent_as_is, running.root, "/oai?" + query + plain + "%23frag"
        )
        check(encoded.body)
        assert encoded.xpath("//oai:header/oai:identifier/text()") == [hashed]
        for target in (
            "/oai?" + query + hashed,
            "/oai?verb=Identify#",
            "/oai?" + query + plain + "#",
        ):
            raw = await asyncio.to_thread(_sent_as_is, running.root, target)
            assert raw.status == 200
            check(raw.body)
            assert raw.errors() == ["badArgument"], target
            assert raw.xpath("//oai:record") == []
            assert "%23" in raw.xpath("string(//oai:error)")


async def test_p09_a_200_kb_token_in_the_url_is_a_bad_resumption_token(
    db: Pool, database_url: str
) -> None:
    """A request line up to MAX_REQUEST_TARGET reaches the endpoint: a 200 KB token (the server
    refused 64 KiB and more with a plain-text 400) is badResumptionToken, HTTP 200, XSD-valid."""
    await factories.load_records(db, OWN, range(5))
    async with running_provider(database_url) as running:
        for length in (70_000, 200_000, MAX_REQUEST_TARGET - 100):
            token = "A" * length
            got = await asyncio.to_thread(
                _sent_as_is, running.root, "/oai?verb=ListRecords&resumptionToken=" + token
            )
            assert got.status == 200, length
            check(got.body)
            assert got.errors() == ["badResumptionToken"]


async def test_p09_a_request_line_past_the_bound_is_refused_unread(
    db: Pool, database_url: str
) -> None:
    """Past MAX_REQUEST_TARGET the target is refused at the HTTP level, 414, and the connection
    closed: the server stops reading (it kept the line in memory as long as it came)."""
    async with running_provider(database_url) as running:
        url = urlsplit(running.root)
        sock = socket.create_connection((url.hostname, url.port))
        sock.settimeout(30)
        sent = 0
        began = time.monotonic()
        try:
            sock.sendall(b"GET /oai?verb=ListRecords&resumptionToken=")
            chunk = b"A" * 65536
            while sent < 256 * MAX_REQUEST_TARGET:  # 256 MiB, never sent whole
                await asyncio.to_thread(sock.sendall, chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while block := await asyncio.to_thread(sock.recv, 65536):
                answer += block
        except ConnectionResetError:
            pass
        sock.close()
        assert sent < 64 * MAX_REQUEST_TARGET, "the server read on past its bound"
        assert time.monotonic() - began < 30
        assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
        assert b"connection: close" in answer.lower()
        assert str(MAX_REQUEST_TARGET).encode() in answer
        # the next connection is served
        got = await asyncio.to_thread(_sent_as_is, running.root, "/oai?verb=Identify")
        assert got.status == 200
        assert got.errors() == []
