"""The harvester's OAI-PMH client retries what a peer may answer better later (503 and its
Retry-After, 5xx, timeouts, refused connections) with a backoff, and no other status.

Each peer is a small real server on 127.0.0.1; nothing in the HTTP path is mocked."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from aiohttp import web

from tests.integration.harvester_client.peers import (
    LOGGER,
    SETTINGS,
    ClientFactory,
    Handler,
    Peer,
    Serve,
    identifiers,
    xml,
)
from wiscat.harvester.client import OAIClient
from wiscat.harvester.errors import (
    BadResponse,
    PeerHTTPError,
    PeerTimeout,
    PeerUnreachable,
)
from wiscat.harvester.service import client_settings
from wiscat.shared.oaipmh import errors
from wiscat.shared.settings import Settings


def unavailable_once(retry_after: Callable[[], str], then: str) -> Handler:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if peer.count == 1:
            return web.Response(
                status=503, text="overloaded", headers={"Retry-After": retry_after()}
            )
        return xml(then)

    return handler


async def test_503_retry_after_seconds(serve: Serve, client: OAIClient) -> None:
    """H03: a 503's Retry-After in seconds is waited out."""
    peer = await serve(unavailable_once(lambda: "1", "Identify.xml"))
    info = await client.identify(peer.url)
    assert info.repository_name == "GISC Peer"
    assert peer.count == 2
    assert 0.9 <= peer.times[1] - peer.times[0] < 1.8


async def test_503_retry_after_http_date(serve: Serve, client: OAIClient) -> None:
    """H04: a 503's Retry-After as an HTTP date is waited out."""

    def in_two_seconds() -> str:
        return format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)

    peer = await serve(unavailable_once(in_two_seconds, "Identify.xml"))
    await client.identify(peer.url)
    assert peer.count == 2
    # an HTTP-date has whole seconds: the wait is between 1 and 2 s
    assert 0.9 <= peer.times[1] - peer.times[0] < 2.6


async def test_retry_after_is_capped(serve: Serve, client_for: ClientFactory) -> None:
    peer = await serve(unavailable_once(lambda: "3600", "Identify.xml"))
    await client_for(retry_after_cap=0.3).identify(peer.url)
    assert 0.25 <= peer.times[1] - peer.times[0] < 1.5


async def test_500_then_success_is_retried_and_logged(
    serve: Serve, client: OAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if peer.count == 1:
            return web.Response(status=500, text="Internal Server Error")
        return xml("Identify.xml")

    peer = await serve(handler)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await client.identify(peer.url)
    assert peer.count == 2
    retries = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(retries) == 1
    assert peer.url in retries[0] and "attempt 1" in retries[0] and "500" in retries[0]


@pytest.mark.parametrize(("status", "text"), [(404, "Not Found"), (302, "moved somewhere")])
async def test_h05_h11_a_404_or_a_302_without_location_is_final(
    serve: Serve, client: OAIClient, status: int, text: str
) -> None:
    """H05: a 404 is final; H11: a 302 with no Location leads nowhere, and is final too (aiohttp
    lists it in its own redirect history, but nothing was followed): one request, its status in
    the reason."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(status=status, text=text)

    peer = await serve(handler)
    with pytest.raises(PeerHTTPError) as caught:
        await client.identify(peer.url)
    assert caught.value.status == status
    assert caught.value.reason == f"HTTP {status} from {peer.url}, answering Identify"
    assert peer.count == 1


async def test_a_status_retried_in_vain_says_how_often_and_what_the_peer_asked(
    serve: Serve, client: OAIClient
) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "0"})

    peer = await serve(handler)
    with pytest.raises(PeerHTTPError) as caught:
        await client.identify(peer.url)
    attempts = SETTINGS.max_retries + 1
    assert caught.value.reason == (
        f"HTTP 429 from {peer.url}, answering Identify, after {attempts} attempts "
        "(the last with Retry-After: 0)"
    )
    assert peer.count == attempts


async def test_an_oai_error_sent_with_http_422(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("error-cannotDisseminateFormat.xml", status=422)

    peer = await serve(handler)
    with pytest.raises(errors.CannotDisseminateFormat):
        await identifiers(client, peer.url)
    assert peer.count == 1


async def test_a_peer_that_hangs_times_out(serve: Serve, client_for: ClientFactory) -> None:
    """H02: a peer that never answers is given up at its timeout, after the attempts set."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        await peer.release.wait()
        return web.Response(status=503)

    peer = await serve(handler)
    client = client_for(read_timeout=0.4, max_retries=1)
    started = time.monotonic()
    with pytest.raises(PeerTimeout) as caught:
        await client.identify(peer.url)
    elapsed = time.monotonic() - started
    # two attempts of 0.4 s each, and a short backoff between them
    assert 0.7 <= elapsed < 2.0
    assert peer.count == 2
    assert len(caught.value.reason) < 300


async def test_a_peer_that_drips_its_answer_times_out(
    serve: Serve, client_for: ClientFactory
) -> None:
    """H02: a byte every 0.05 s keeps the read timeout from ever firing; the response's total
    time bounds each attempt (WISCAT_HARVEST_TIMEOUT_SECONDS, or 15 minutes, whichever is
    longer): each attempt given up within the total timeout + 2 s, retried exactly as often as
    set."""

    async def handler(request: web.Request, peer: Peer) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/xml"})
        await response.prepare(request)
        while not peer.release.is_set():
            await response.write(b" ")
            await asyncio.sleep(0.05)
        return response

    peer = await serve(handler)
    total = 1.0
    client = client_for(read_timeout=0.5, total_timeout=total, max_retries=1)
    started = time.monotonic()
    try:
        with pytest.raises(PeerTimeout) as caught:
            # a client the drip holds for ever fails here, not by hanging the suite
            await asyncio.wait_for(client.identify(peer.url), 2 * (total + 2))
    finally:
        peer.release.set()
    ended = time.monotonic()
    assert caught.value.reason == f"no answer from {peer.url} in time (after 2 attempts)"
    assert peer.count == 2  # one retry, as set
    # each attempt lasts its total timeout (the drip never lets the read timeout fire), no more
    # than 2 s beyond it; the backoff between them is short
    first, second = (peer.times[1] - peer.times[0]), (ended - peer.times[1])
    assert total * 0.9 <= first < total + 2, f"the first attempt took {first:.2f} s"
    assert total * 0.9 <= second < total + 2, f"the second attempt took {second:.2f} s"
    assert ended - started < 2 * (total + 2)


def test_the_whole_response_may_take_at_least_the_read_timeout() -> None:
    default = client_settings(Settings(_env_file=None, gisc_name="T"))  # type: ignore[call-arg]
    assert (default.read_timeout, default.total_timeout) == (120, 900)
    longer = Settings(_env_file=None, gisc_name="T", harvest_timeout_seconds=3600)  # type: ignore[call-arg]
    assert client_settings(longer).total_timeout == 3600


async def test_an_unreachable_peer(client_for: ClientFactory) -> None:
    """H01: a refused connection is PeerUnreachable."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(PeerUnreachable):
        await client_for(max_retries=1).identify(f"http://127.0.0.1:{port}/oai")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HELLO THERE\r\n\r\n", "Bad status line: Expected HTTP/, RTSP/ or ICE/: b'HELLO THERE'"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nxx",
            "Invalid character in Content-Length: b'Content-Length: abc'",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n",
            "Invalid character in chunk size: b'ZZ'",
        ),
        (
            b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 20_000 + b"\r\n\r\n",
            "Got more than 8190 bytes when reading: b'aaaa",
        ),
    ],
)
async def test_an_answer_that_is_not_http(
    client: OAIClient, answer: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer (or a broken proxy before it) whose answer HTTP cannot read: retried as a
    transient fault, then the list fails as BadResponse with the parser's first line; it was
    an 'unexpected error' with a traceback, as if wiscat had failed, and a made-up HTTP 400."""
    asked = 0

    async def answer_with(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal asked
        asked += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_with, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/oai"
    try:
        with pytest.raises(BadResponse) as caught:
            await client.identify(url)
    finally:
        server.close()
        await server.wait_closed()
    # the parser's message on one line, the bytes it stumbled on included, its caret left out
    assert caught.value.reason.startswith(f"broken HTTP response from {url}: {reason}")
    assert "\n" not in caught.value.reason and "^" not in caught.value.reason
    assert len(caught.value.reason) < 300
    assert asked == SETTINGS.max_retries + 1
    assert "broken HTTP response" in caplog.text  # each retry logged as such


async def test_h01_attempts_to_a_refused_peer_are_spaced_by_the_backoff(
    client_for: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """H01: a peer that refuses connections is tried max_retries + 1 times, each retry after
    the full-jitter backoff it logs (uniform in 0 to base * 2^(attempt - 1), capped), and the
    attempts take at least those waits in all."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    url = f"http://127.0.0.1:{port}/oai"
    # six retries: their random waits sum to under the logs' rounding (0.3 s) about once in
    # 5,000 runs, where three did about once in 50, and a sleep skipped would then pass
    client = client_for(max_retries=6, backoff_base=0.2, backoff_cap=0.5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(PeerUnreachable) as caught:
        await client.identify(url)
    elapsed = time.monotonic() - started
    assert caught.value.reason.startswith(f"cannot reach {url}: Cannot connect to host")
    retries = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [m.split(" (attempt ")[1].split(")")[0] for m in retries] == [
        f"{n} of 7" for n in range(1, 7)
    ]
    waits = [float(m.rsplit("retrying in ", 1)[1].removesuffix(" s")) for m in retries]
    # each wait within its ceiling: 0.2, 0.4, then 0.8 and more cut to the cap of 0.5 (logged
    # to 0.1 s, so each within 0.05 of the wait slept)
    ceilings = [0.2, 0.4, 0.5, 0.5, 0.5, 0.5]
    assert all(0 <= w <= ceiling + 0.05 for w, ceiling in zip(waits, ceilings, strict=True))
    assert elapsed >= sum(waits) - 0.05 * len(waits)  # the waits were slept, not skipped


async def test_h04_a_503_without_retry_after_is_retried_after_the_usual_backoff(
    serve: Serve, client_for: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """H04. Rule: a 503 without Retry-After is retried after the usual full-jitter backoff
    (docs/harvesting.md: "retried with backoff (honouring Retry-After)"), not after a fixed
    60 s: WISCAT_HARVEST_MAX_RETRIES bounds how often."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if peer.count <= 2:
            return web.Response(status=503, text="busy")
        return xml("Identify.xml")

    peer = await serve(handler)
    client = client_for(max_retries=2, backoff_base=0.2, backoff_cap=0.3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        info = await client.identify(peer.url)
    assert info.repository_name == "GISC Peer"
    assert peer.count == 3
    retries = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [m.split(" s")[0].rsplit(" ", 1)[0] for m in retries] == [
        f"HTTP 503 from {peer.url} (attempt 1 of 3): retrying in",
        f"HTTP 503 from {peer.url} (attempt 2 of 3): retrying in",
    ]
    waits = [float(m.rsplit("retrying in ", 1)[1].removesuffix(" s")) for m in retries]
    assert waits[0] <= 0.2 + 0.05 and waits[1] <= 0.3 + 0.05
    gaps = [later - earlier for earlier, later in zip(peer.times, peer.times[1:], strict=False)]
    assert all(gap >= wait - 0.06 for gap, wait in zip(gaps, waits, strict=True))
    assert all(gap < 5 for gap in gaps)


@pytest.mark.parametrize("status", [401, 403])
async def test_h05_401_and_403_are_final(serve: Serve, client: OAIClient, status: int) -> None:
    """H05: a peer that wants credentials, or refuses us, is asked once: no retry would
    change its answer."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        if request.query["verb"] == "Identify":
            return xml("Identify.xml")
        return web.Response(status=status, text="go away")

    peer = await serve(handler)
    await client.identify(peer.url)
    with pytest.raises(PeerHTTPError) as caught:
        await identifiers(client, peer.url)
    assert caught.value.status == status
    assert caught.value.reason == f"HTTP {status} from {peer.url}, answering ListRecords"
    assert peer.count == 2
