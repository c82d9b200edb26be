"""The registry's outbound fetcher against real servers on loopback: redirects are checked again
at connect time, redirect loops, slow servers and oversized bodies end cleanly (RELIABILITY S04,
S05, S08, S09)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.support.registry_network import TEST_FETCH_PORTS, canary
from tests.support.servers import serving_app
from wiscat.shared.registry.safe_fetch import (
    FetchFailed,
    ForbiddenAddress,
    ForbiddenPort,
    SafeFetcher,
)


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


class ScriptedResolver(AbstractResolver):
    """A name server of our own: each query of a name gets the next address of its script (the
    last one again once the script runs out)."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.queries: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answered = self.queries.count(host)
        self.queries.append(host)
        addresses = self.script[host]
        address = addresses[min(answered, len(addresses) - 1)]
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        pass


# 127.0.0.1, where the test servers listen, stands in for a public address; 127.0.0.2, where
# the canaries listen, for the node's own network
def only_127_0_0_1(address: str) -> bool:
    return address == "127.0.0.1"


async def test_s04_a_name_rebound_to_a_refused_address_is_refused_at_connect(
    server: Server,
) -> None:
    """S04, DNS rebinding: a name that resolved to an allowed address resolves to a refused
    one the next time; that connection is refused when its socket is made, and the canary at
    the refused address sees nothing."""
    port = int(server.root.rsplit(":", 1)[1])
    resolver = ScriptedResolver({"rebind.test": ["127.0.0.1", "127.0.0.2"]})
    async with canary(host="127.0.0.2") as listening:
        async with SafeFetcher(
            address_policy=only_127_0_0_1, ports=TEST_FETCH_PORTS, resolver=resolver
        ) as fetcher:
            first = await fetcher.get(f"http://rebind.test:{port}/small")
            # another port: aiohttp caches an answer per name and port
            with pytest.raises(ForbiddenAddress) as caught:
                await fetcher.get(f"http://rebind.test:{listening.port}/oai")
        assert listening.connections == 0
    assert (first.status, first.body) == (200, b"<ok/>")
    assert resolver.queries == ["rebind.test", "rebind.test"]
    assert str(caught.value) == (
        "rebind.test is a non-global address: 127.0.0.2 is in 127.0.0.0/8, Loopback "
        "(RFC 1122 §3.2.1.3), not globally reachable"
    )


async def test_s05_a_redirect_to_a_name_of_a_refused_address_is_never_connected(
    server: Server,
) -> None:
    """S05: an allowed server redirects to a literal refused address and to a name that
    resolves to one: each hop is refused at its socket, the canary there sees no connection.
    A guard that checked only the submitted URL's resolution would let both through."""
    resolver = ScriptedResolver({"internal.test": ["127.0.0.2"]})
    async with canary(host="127.0.0.2") as listening:
        async with SafeFetcher(
            address_policy=only_127_0_0_1, ports=TEST_FETCH_PORTS, resolver=resolver
        ) as fetcher:
            refusals = []
            for target in (
                f"http://127.0.0.2:{listening.port}/",
                f"http://internal.test:{listening.port}/",
            ):
                server.redirect_to = target
                with pytest.raises(ForbiddenAddress) as caught:
                    await fetcher.get(server.root + "/redirect")
                refusals.append(str(caught.value))
        assert listening.connections == 0
    loopback = "127.0.0.2 is in 127.0.0.0/8, Loopback (RFC 1122 §3.2.1.3), not globally reachable"
    assert refusals == [
        f"127.0.0.2 is a non-global address: {loopback}",
        f"internal.test is a non-global address: {loopback}",
    ]
    assert resolver.queries == ["internal.test"]


async def test_s09_a_proxy_in_the_environment_is_not_used(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S09: with HTTP_PROXY and HTTPS_PROXY naming a listener on loopback (and no NO_PROXY),
    the registry's fetcher goes straight to the server and its address guard still refuses;
    the proxy sees no connection, while an aiohttp session that trusts the environment, the
    control, does reach it."""
    async with canary() as proxy, canary(host="127.0.0.2") as refused:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        async with SafeFetcher(address_policy=only_127_0_0_1, ports=TEST_FETCH_PORTS) as fetcher:
            fetched = await fetcher.get(server.root + "/small")
            with pytest.raises(ForbiddenAddress, match=r"^127\.0\.0\.2 is a non-global"):
                await fetcher.get(f"http://127.0.0.2:{refused.port}/oai")
        assert (fetched.status, fetched.body) == (200, b"<ok/>")
        assert (proxy.connections, refused.connections) == (0, 0)

        async with aiohttp.ClientSession(trust_env=True) as trusting:
            with pytest.raises(aiohttp.ClientError):
                await trusting.get(server.root + "/small")
        assert proxy.connections >= 1


async def test_s08_a_peer_that_drips_is_given_up_at_the_total_timeout() -> None:
    """S08, slowloris: a peer that sends its answer one byte at a time, a little faster than a
    read would wait, is given up when the total timeout ends (within it plus a second)."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 100000\r\n\r\n"

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            for byte in answer + b"x" * 100_000:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.1)
        except ConnectionError:
            pass
        finally:
            writer.close()

    dripping = await asyncio.start_server(drip, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{dripping.sockets[0].getsockname()[1]}/oai"
    try:
        async with SafeFetcher(allow_private=True, timeout=1, ports=TEST_FETCH_PORTS) as fetcher:
            started = time.monotonic()
            with pytest.raises(FetchFailed) as caught:
                await fetcher.get(url)
            elapsed = time.monotonic() - started
    finally:
        dripping.close()
        await dripping.wait_closed()
    assert str(caught.value) == f"no answer from {url} within 1 s"
    assert elapsed < 1 + 1


async def test_s08_a_5_mib_identify_is_cut_at_1_mib() -> None:
    """S08: an Identify of 5 MiB sent without a length is read up to the 1 MiB cap only."""
    sent = 0

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nConnection: close\r\n\r\n")
        try:
            writer.write(b"<OAI-PMH><Identify><description>")
            for _ in range(5 * 16):
                writer.write(b"x" * 65536)
                await writer.drain()
                sent += 65536
        except ConnectionError:
            pass
        finally:
            writer.close()

    flooding = await asyncio.start_server(flood, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{flooding.sockets[0].getsockname()[1]}/oai"
    try:
        async with SafeFetcher(allow_private=True, ports=TEST_FETCH_PORTS) as fetcher:
            assert fetcher.max_bytes == 1024 * 1024
            with pytest.raises(FetchFailed) as caught:
                await fetcher.get(url, {"verb": "Identify"})
    finally:
        flooding.close()
        await flooding.wait_closed()
    assert str(caught.value) == "the response is larger than 1048576 bytes"
