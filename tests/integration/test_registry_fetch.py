"""The registry's outbound fetcher against real servers on loopback: redirects are checked again
at connect time, redirect loops, slow servers and oversized bodies end cleanly."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from shared.registry.safe_fetch import FetchFailed, ForbiddenAddress, ForbiddenPort, SafeFetcher
from tests.registry_network import TEST_FETCH_PORTS
from tests.servers import serving_app


@dataclass
class Server:
    root: str
    redirect_to: str = ""


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """A small server on 127.0.0.1 that redirects, loops, dawdles and sends too much."""
    served = Server("")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(served.redirect_to)

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 200_000)

    async def small(request: web.Request) -> web.Response:
        return web.Response(text="<ok/>", content_type="application/xml")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response(text="<late/>", content_type="application/xml")

    app = web.Application()
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/loop", loop)
    app.router.add_get("/big", big)
    app.router.add_get("/small", small)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    served.root = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield served
    finally:
        await runner.cleanup()


async def test_a_redirect_to_a_refused_address_is_never_connected(server: Server) -> None:
    # 127.0.0.2 is loopback too; the policy allows only 127.0.0.1, so it stands in for an
    # address the redirect must not reach
    """S05: a redirect to a refused address is refused on its hop, never connected."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.2", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        fetcher = SafeFetcher(
            address_policy=lambda address: address == "127.0.0.1", ports=TEST_FETCH_PORTS
        )
        async with fetcher:
            assert (await fetcher.get(server.root + "/small")).body == b"<ok/>"
            server.redirect_to = f"http://127.0.0.2:{port}/oai"
            with pytest.raises(ForbiddenAddress, match=r"127\.0\.0\.2"):
                await fetcher.get(server.root + "/redirect")
            server.redirect_to = "ftp://example.org/oai"
            with pytest.raises(FetchFailed, match="http"):
                await fetcher.get(server.root + "/redirect")
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


async def test_a_redirect_to_a_port_off_the_list_is_never_connected(server: Server) -> None:
    """S07 on the redirect hop: the target's port is checked before its connection, like the
    first URL's."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    server_port = int(server.root.rsplit(":", 1)[1])
    try:
        async with SafeFetcher(allow_private=True, ports=(server_port,)) as fetcher:
            assert (await fetcher.get(server.root + "/small")).body == b"<ok/>"
            server.redirect_to = f"http://127.0.0.1:{port}/oai"
            with pytest.raises(ForbiddenPort) as caught:
                await fetcher.get(server.root + "/redirect")
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert str(caught.value) == (
        f"this registry node fetches from ports {server_port} only, not {port}"
    )


async def test_redirect_loops_and_oversized_bodies_end_cleanly(server: Server) -> None:
    async with SafeFetcher(
        allow_private=True, max_bytes=100_000, max_redirects=3, ports=TEST_FETCH_PORTS
    ) as fetcher:
        with pytest.raises(FetchFailed, match="redirects"):
            await fetcher.get(server.root + "/loop")
        with pytest.raises(FetchFailed, match="larger"):
            await fetcher.get(server.root + "/big")
        assert (await fetcher.get(server.root + "/big", max_bytes=300_000)).status == 200
        with pytest.raises(FetchFailed, match="http"):
            await fetcher.get("file:///etc/passwd")


async def test_a_server_that_does_not_answer_in_time_is_given_up(server: Server) -> None:
    """S08: a registry fetch that gets no answer is given up at its timeout."""
    async with SafeFetcher(allow_private=True, timeout=0.3, ports=TEST_FETCH_PORTS) as fetcher:
        started = time.monotonic()
        with pytest.raises(FetchFailed, match="no answer"):
            await fetcher.get(server.root + "/slow")
    assert time.monotonic() - started < 1.5


async def test_an_answer_that_is_not_http_is_told_on_one_line() -> None:
    """A broken chunk: aiohttp's parser message, the bytes it stumbled on included, without the
    "400" it makes up, its caret line and its line breaks."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/oai"
    try:
        async with SafeFetcher(allow_private=True, ports=TEST_FETCH_PORTS) as fetcher:
            with pytest.raises(FetchFailed) as caught:
                await fetcher.get(url)
    finally:
        server.close()
        await server.wait_closed()
    assert str(caught.value) == (
        f"broken HTTP response from {url}: Invalid character in chunk size: b'ZZ'"
    )


async def test_https_registry_nodes_are_trusted_through_the_ca_file(tmp_path: Path) -> None:
    """A registry node over https whose certificate a private CA signed: refused with the reason
    until that CA is in WISCAT_CA_FILE (``ca_file``), then fetched."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    app = web.Application()
    app.router.add_get("/urls", _urls)
    async with serving_app(app, context) as root:
        async with SafeFetcher(allow_private=True, timeout=5, ports=TEST_FETCH_PORTS) as fetcher:
            with pytest.raises(
                FetchFailed, match=r"TLS certificate of 127\.0\.0\.1:\d+ is not trusted"
            ):
                await fetcher.get(root + "/urls")
        ca_file = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        async with SafeFetcher(
            allow_private=True, timeout=5, ca_file=ca_file, ports=TEST_FETCH_PORTS
        ) as fetcher:
            response = await fetcher.get(root + "/urls")
    assert (response.status, response.body) == (200, b"<BaseURLs/>")


async def _urls(request: web.Request) -> web.Response:
    return web.Response(text="<BaseURLs/>", content_type="application/xml")
