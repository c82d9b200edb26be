"""What a client can make the provider read or do (RELIABILITY S11): every request body is
capped per route as it comes in, whatever its transfer encoding, and the unauthenticated
registry forms are rate-limited per client. A real provider on loopback, spoken to over a raw
socket where a library would hide what is sent and when; no mocks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.support.registry_network import make_network, node_overrides
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db.pool import Pool

AUTH = "Authorization: Bearer test-admin-token\r\n"
FORM = "application/x-www-form-urlencoded"
# what a server that waits for the whole body is given to answer: it never does
NO_ANSWER_SECONDS = 10.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after its answer


@pytest.fixture
async def node(tmp_path: Path, db: Pool, database_url: str) -> AsyncIterator[RunningProvider]:
    """A registry member node, so that every route that takes a body is there."""
    net = make_network(tmp_path, 1)
    async with running_provider(database_url, **node_overrides(net, 0)) as running:
        yield running


async def upload(
    node: RunningProvider,
    request: str,
    headers: str,
    start: bytes,
    size: int,
    *,
    chunked: bool = True,
) -> Answer:
    """Send the head of ``request`` ("POST /urls") and, chunked, ``size`` bytes of its body
    (``start``, then padding) but never the last chunk; otherwise the head declares ``size``
    bytes and none is sent. A server that waits for the whole body never answers."""
    url = urlsplit(node.root)
    assert url.hostname is not None and url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
        head = f"{request} HTTP/1.1\r\nHost: {url.netloc}\r\n{framing}\r\n{headers}\r\n"
        writer.write(head.encode())
        body = start + b"A" * (size - len(start)) if chunked else b""
        for offset in range(0, len(body), 64 * 1024):
            piece = body[offset : offset + 64 * 1024]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        try:
            status_line = await asyncio.wait_for(reader.readline(), NO_ANSWER_SECONDS)
        except TimeoutError:
            raise AssertionError(f"{request}: no answer while its body is unfinished") from None
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        found = dict(line.lower().split(": ", 1) for line in lines if line)
        answer = await reader.readexactly(int(found["content-length"]))
        closed = await asyncio.wait_for(reader.read(), NO_ANSWER_SECONDS) == b""
        return Answer(int(status_line.split()[1]), found, answer, closed)
    finally:
        writer.close()


BODIES = [
    # (request, extra headers, the body's first bytes, the cap, the refusal)
    (
        "POST /urls",
        f"Content-Type: {FORM}\r\n",
        b"baseURL=https%3A%2F%2Frepository.example.org%2Foai&padding=",
        65536,
        "a form may be at most 65536 bytes",
    ),
    (
        "POST /registry/announce",
        f"Content-Type: {FORM}\r\n",
        b"network=wis-test&url=https%3A%2F%2Fnode.example.org&padding=",
        65536,
        "a form may be at most 65536 bytes",
    ),
    (
        "POST /oai",
        f"Content-Type: {FORM}\r\n",
        b"verb=Identify&padding=",
        65536,
        "an OAI-PMH request may be at most 65536 bytes",
    ),
    (
        # read by FastAPI before it looks at the token: no token sent
        "POST /admin/links",
        "Content-Type: application/json\r\n",
        b'{"name": "huge", "url": "https://peer.example.org/oai", "set": "',
        1024 * 1024,
        "an admin request may be at most 1048576 bytes",
    ),
    (
        "POST /registry/blocks",
        "Content-Type: application/xml\r\n",
        b"<blocks>",
        16 * 1024 * 1024,
        "the blocks sent at once may be at most 16777216 bytes",
    ),
    (
        # the record PUT keeps its own, larger cap
        "PUT /admin/records/some-id",
        AUTH + "Content-Type: application/xml\r\n",
        b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'>",
        20 * 1024 * 1024,
        "a record may be at most 20971520 bytes",
    ),
]


async def assert_nothing_kept(db: Pool) -> None:
    for table in ("registry_pool", "registry_members", "links", "records"):
        assert await db.fetchval(f"select count(*) from {table}") == 0, table


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
@pytest.mark.parametrize(("request_line", "headers", "start", "cap", "refusal"), BODIES)
async def test_s11_a_body_past_its_cap_is_refused_before_it_ends(
    node: RunningProvider,
    db: Pool,
    request_line: str,
    headers: str,
    start: bytes,
    cap: int,
    refusal: str,
    chunked: bool,
) -> None:
    """S11: a body one byte past its route's cap, whose end never comes, is answered 413 and
    the connection closed: the server read no further than the cap and kept nothing. Chunked
    (no Content-Length: the 180 MB form to /urls and /registry/announce was read whole), or
    with a Content-Length over the cap (refused before any of the body is sent)."""
    answer = await upload(node, request_line, headers, start, cap + 1, chunked=chunked)
    assert (answer.status, json.loads(answer.body)) == (413, {"detail": refusal})
    assert answer.headers["connection"] == "close"
    assert answer.closed
    await assert_nothing_kept(db)


async def test_s11_a_body_at_its_cap_is_read(node: RunningProvider) -> None:
    """S11: the cap is the largest body taken, not the smallest refused (a form of 65536 bytes
    is read: /oai answers its Identify)."""
    body = b"verb=Identify&padding=" + b"A" * (65536 - 22)
    reader, writer = await asyncio.open_connection("127.0.0.1", urlsplit(node.root).port)
    try:
        writer.write(
            b"POST /oai HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (FORM.encode(), len(body), body)
        )
        status_line = await asyncio.wait_for(reader.readline(), NO_ANSWER_SECONDS)
    finally:
        writer.close()
    assert status_line.split()[1] == b"200"


@pytest.mark.parametrize(
    ("path", "setting", "form", "what"),
    [
        ("/urls", "registry_rate_limit_per_minute", {"baseURL": "ftp://x"}, "submissions"),
        (
            "/registry/announce",
            "registry_announce_rate_limit_per_minute",
            {"network": "wis-test", "url": "https://node.example.org"},
            "announcements",
        ),
    ],
)
async def test_s11_a_client_over_the_rate_limit_is_told_when_to_come_back(
    tmp_path: Path, database_url: str, path: str, setting: str, form: dict[str, str], what: str
) -> None:
    """S11: of N+1 forms from one client in a minute the last is answered 429 with the seconds
    until the first leaves the minute in Retry-After; another client is not held back."""
    net = make_network(tmp_path, 1)
    async with (
        running_provider(database_url, **node_overrides(net, 0, **{setting: 3})) as node,
        aiohttp.ClientSession() as session,
    ):

        async def send(client: str) -> tuple[int, str, str | None]:
            # uvicorn takes the client from X-Forwarded-For sent from loopback
            headers = {"X-Forwarded-For": client}
            async with session.post(node.root + path, data=form, headers=headers) as response:
                return response.status, await response.text(), response.headers.get("Retry-After")

        first = time.monotonic()
        answers = [await send("203.0.113.7") for _ in range(4)]
        elapsed = time.monotonic() - first
        assert all(status != 429 for status, _, _ in answers[:3]), answers
        status, text, retry_after = answers[3]
        assert (status, text) == (429, f"at most 3 {what} a minute from one client\n")
        # the first form leaves the minute 60 s after it came (the whole seconds, rounded up)
        assert retry_after is not None and 60 - elapsed <= int(retry_after) <= 60, retry_after
        assert (await send("198.51.100.2"))[0] != 429
