"""What a submitter of a URL learns, and what the registry node connects to, when the URL points
where it must not (RELIABILITY S01, S02, S06, S07, S11): every address is refused that is not
global, a port not on the node's list is refused before any connection, a URL that is not
http(s) or carries credentials is refused before any socket, and a fetch that fails says the
same whatever the failure (the node's log says which). Real providers, real sockets on
loopback; no mocks."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.support.registry_network import (
    S02_HOSTS,
    CountingResolver,
    canary,
    make_network,
    node_overrides,
    post_url,
    urls_of,
)
from tests.support.servers import running_provider, serving_app
from wiscat.shared.db.pool import Pool
from wiscat.shared.registry.safe_fetch import SafeFetcher
from wiscat.shared.registry_node import NodeConfig, RegistryNode, UrlRefused

UNREACHABLE = "the repository cannot be reached from this registry node (its log says why)"


async def test_s02_every_literal_form_of_a_local_address_is_refused_unconnected(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """S02: all 19 literal variants answer 400 with the one refusal text, the canary listening
    on the URLs' port sees no connection, and the node's log names the refused address (the
    port is on the node's list, so that the address check alone stands in the way)."""
    caplog.set_level(logging.INFO, logger="wiscat.registry")
    net = make_network(tmp_path, 1)
    async with canary() as listening:
        overrides = node_overrides(
            net,
            0,
            allow_private_fetch=False,
            registry_fetch_ports=(80, listening.port),
            registry_rate_limit_per_minute=100,
        )
        async with (
            running_provider(database_url, **overrides) as node,
            aiohttp.ClientSession() as session,
        ):
            answers = {
                host: await post_url(session, node, f"http://{host}:{listening.port}/oai")
                for host in S02_HOSTS
            }
            assert await urls_of(session, node) == []
        assert answers == {host: (400, UNREACHABLE + "\n") for host in S02_HOSTS}
        assert listening.connections == 0
    logged = [r for r in caplog.records if r.name == "wiscat.registry"]
    assert any(
        r.levelno == logging.WARNING
        and "10.0.0.1 is in 10.0.0.0/8, Private-Use (RFC 1918), not globally reachable"
        in r.getMessage()
        for r in logged
    ), [r.getMessage() for r in logged]


async def test_s07_a_port_off_the_list_is_refused_before_any_connection(
    tmp_path: Path, database_url: str
) -> None:
    """S07: with the default port list (80, 443, 8080, 8443), ports 22, 25, 5432, 6379 and
    11211 answer 400 naming the list; a canary on a port off the list, at an address the node
    may fetch from, sees no connection."""
    net = make_network(tmp_path, 1)
    async with canary() as listening:
        overrides = node_overrides(net, 0, allow_private_fetch=True)
        overrides.pop("registry_fetch_ports", None)  # the default list
        async with (
            running_provider(database_url, **overrides) as node,
            aiohttp.ClientSession() as session,
        ):
            assert node.settings.registry_fetch_ports == (80, 443, 8080, 8443)
            for port in (22, 25, 5432, 6379, 11211, listening.port):
                answer = await post_url(session, node, f"http://127.0.0.1:{port}/oai")
                assert answer == (
                    400,
                    f"this registry node fetches from ports 80, 443, 8080 and 8443 only, "
                    f"not {port}\n",
                ), port
        assert listening.connections == 0


class KnowsNoName(AbstractResolver):
    """A resolver that finds no name, as the system's does for a name nobody registered."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        raise OSError(socket.EAI_NONAME, f"{host}: Name or service not known")

    async def close(self) -> None:
        pass


async def test_s11_closed_silent_unknown_and_private_targets_get_one_answer(
    tmp_path: Path, db: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """S11: a closed port, a server that never answers, a name that does not resolve and a
    private address give the submitter the same refusal, so that the registry cannot be used
    to tell them apart; the node's log keeps each one's detail."""
    caplog.set_level(logging.INFO, logger="wiscat.registry")
    net = make_network(tmp_path, 1)
    config = NodeConfig("http://127.0.0.1:9", "http://127.0.0.1:9/oai", "WIS-GISC-TEST")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # holds the connection and never answers
        finally:
            writer.close()

    silent_server = await asyncio.start_server(silent, "127.0.0.1", 0)
    silent_port = silent_server.sockets[0].getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    every_port = range(1, 65536)

    async def refusal(fetcher: SafeFetcher, url: str) -> str:
        async with fetcher:
            node = RegistryNode(db, net.network, net.keys[0], fetcher, config)
            with pytest.raises(UrlRefused) as caught:
                await node.validate(url)
        return str(caught.value)

    try:
        texts = [
            await refusal(
                SafeFetcher(allow_private=True, ports=every_port),
                f"http://127.0.0.1:{closed_port}/oai",
            ),
            await refusal(
                SafeFetcher(allow_private=True, ports=every_port, timeout=0.5),
                f"http://127.0.0.1:{silent_port}/oai",
            ),
            await refusal(
                SafeFetcher(ports=every_port, resolver=KnowsNoName()),
                "http://repository.example.org/oai",
            ),
            await refusal(SafeFetcher(ports=every_port), f"http://127.0.0.1:{silent_port}/oai"),
        ]
    finally:
        silent_server.close()
        await silent_server.wait_closed()
    assert texts == [UNREACHABLE] * 4
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "wiscat.registry"]
    assert [level for level, _ in logged] == ["INFO", "INFO", "INFO", "WARNING"], logged
    assert f"127.0.0.1:{closed_port}" in logged[0][1] and "Connect call failed" in logged[0][1]
    assert "no answer" in logged[1][1]
    assert "repository.example.org" in logged[2][1] and "not known" in logged[2][1]
    assert "127.0.0.1 is in 127.0.0.0/8, Loopback" in logged[3][1]


async def test_s01_a_loopback_literal_is_refused_with_no_connection_and_no_dns_query(
    tmp_path: Path, database_url: str, db: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """S01: POST /urls of ``http://127.0.0.1:<canary>/oai`` answers 400 with the refusal text,
    the canary sees no connection, the log names the loopback range; and the fetcher asks no
    resolver about a literal address (the same fetcher does ask it about a name)."""
    caplog.set_level(logging.INFO, logger="wiscat.registry")
    net = make_network(tmp_path, 1)
    async with canary() as listening:
        url = f"http://127.0.0.1:{listening.port}/oai"
        overrides = node_overrides(
            net, 0, allow_private_fetch=False, registry_fetch_ports=(80, listening.port)
        )
        async with (
            running_provider(database_url, **overrides) as node,
            aiohttp.ClientSession() as session,
        ):
            assert await post_url(session, node, url) == (400, UNREACHABLE + "\n")
            assert await urls_of(session, node) == []

        resolver = CountingResolver({"repository.example.org": "127.0.0.1"})
        config = NodeConfig("http://127.0.0.1:9", "http://127.0.0.1:9/oai", "WIS-GISC-TEST")
        async with SafeFetcher(ports=(80, listening.port), resolver=resolver) as fetcher:
            registry = RegistryNode(db, net.network, net.keys[0], fetcher, config)
            refused = []
            for literal in (url, f"http://[::1]:{listening.port}/oai"):
                with pytest.raises(UrlRefused) as caught:
                    await registry.validate(literal)
                refused.append(str(caught.value))
            assert resolver.queries == []
            with pytest.raises(UrlRefused) as caught:
                await registry.validate(f"http://repository.example.org:{listening.port}/oai")
            refused.append(str(caught.value))
            assert resolver.queries == ["repository.example.org"]
        assert refused == [UNREACHABLE] * 3
        assert listening.connections == 0
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "wiscat.registry" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 4, warnings
    assert all("127.0.0.1 is in 127.0.0.0/8, Loopback" in w for w in warnings[:2]), warnings
    assert "::1 is in ::1/128, Loopback" in warnings[2], warnings


class CountedSocket(socket.socket):
    """``socket.socket`` that counts the sockets made while it stands in for it."""

    made = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        CountedSocket.made += 1
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


S06_URLS = {
    "file:///etc/passwd": "not an http(s) URL with a host",
    "ftp://repository.example.org/oai": "not an http(s) URL with a host",
    "gopher://repository.example.org:70/_oai": "not an http(s) URL with a host",
    "data:text/xml,<Identify/>": "not an http(s) URL with a host",
    "ws://repository.example.org/oai": "not an http(s) URL with a host",
    "javascript:alert(1)": "not an http(s) URL with a host",
    "http://user:secret@repository.example.org/oai": "carries credentials",
    "http://user@repository.example.org/oai": "carries credentials",
}


async def test_s06_other_schemes_and_credentials_are_refused_before_any_socket(
    tmp_path: Path, database_url: str, db: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S06: ``file:``, ``ftp:``, ``gopher:``, ``data:``, ``ws:``, ``javascript:`` and URLs with
    userinfo answer POST /urls with 400 saying why; submitted to a node directly, with
    ``socket.socket`` counting, none of them makes a socket (while a well-formed URL, the
    control, makes one) and no resolver is asked."""
    net = make_network(tmp_path, 1)
    async with (
        running_provider(database_url, **node_overrides(net, 0)) as node,
        aiohttp.ClientSession() as session,
    ):
        answers = {url: await post_url(session, node, url) for url in S06_URLS}
    assert answers == {
        url: (400, f"{url!r} is malformed: {problem}\n") for url, problem in S06_URLS.items()
    }

    resolver = CountingResolver()
    config = NodeConfig("http://127.0.0.1:9", "http://127.0.0.1:9/oai", "WIS-GISC-TEST")
    async with (
        canary() as listening,
        SafeFetcher(allow_private=True, ports=range(1, 65536), resolver=resolver) as fetcher,
    ):
        registry = RegistryNode(db, net.network, net.keys[0], fetcher, config)
        texts = {}
        monkeypatch.setattr(socket, "socket", CountedSocket)
        try:
            for url in S06_URLS:
                with pytest.raises(UrlRefused) as caught:
                    await registry.submit(url)
                texts[url] = str(caught.value)
            made_by_refusals = CountedSocket.made
            with pytest.raises(UrlRefused):  # the canary closes at once: no Identify
                await registry.validate(f"http://127.0.0.1:{listening.port}/oai")
        finally:
            monkeypatch.undo()
        assert listening.connections >= 1  # aiohttp tries a dropped connection again
    assert texts == {url: f"{url!r} is malformed: {problem}" for url, problem in S06_URLS.items()}
    assert made_by_refusals == 0
    assert CountedSocket.made >= 1
    assert resolver.queries == []


NOT_IDENTIFY = (
    "the answer to Identify is not an OAI-PMH 2.0 Identify response (this node's log says why)"
)


def identify(base_url: str, version: str = "2.0", doctype: bytes = b"") -> bytes:
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n' + doctype + b'<OAI-PMH xmlns="'
        b'http://www.openarchives.org/OAI/2.0/"><responseDate>2026-01-01T00:00:00Z'
        b'</responseDate><request verb="Identify">' + base_url.encode() + b"</request>"
        b"<Identify><repositoryName>R &amp;entity;</repositoryName><baseURL>"
        + base_url.encode()
        + b"</baseURL><protocolVersion>"
        + version.encode()
        + b"</protocolVersion><adminEmail>a@example.org</adminEmail><earliestDatestamp>"
        b"2020-01-01T00:00:00Z</earliestDatestamp><deletedRecord>transient</deletedRecord>"
        b"<granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify></OAI-PMH>"
    ).replace(b"&amp;entity;", b"&amp;" if not doctype else b"&secret;")


async def test_s08_a_reachable_server_that_is_no_repository_gets_texts_that_echo_nothing(
    tmp_path: Path, db: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """S08: valid XML that is not Identify, an OAI-PMH error, broken XML, another
    protocolVersion or baseURL, and an Identify with an XXE each get a fixed refusal that
    repeats nothing of the peer's body (its log keeps the detail); the external entities are
    neither fetched (0 canary connections) nor read."""
    caplog.set_level(logging.INFO, logger="wiscat.registry")
    net = make_network(tmp_path, 1)
    config = NodeConfig("http://127.0.0.1:9", "http://127.0.0.1:9/oai", "WIS-GISC-TEST")
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-FROM-A-FILE")
    bodies: dict[str, bytes] = {}

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=bodies[request.path], content_type="text/xml")

    app = web.Application()
    app.router.add_get("/{name}/oai", answer)
    async with canary() as listening, serving_app(app) as root:
        xxe = (
            f'<!DOCTYPE OAI-PMH [<!ENTITY secret SYSTEM "file://{secret}">'
            f'<!ENTITY remote SYSTEM "http://127.0.0.1:{listening.port}/SECRET">]>\n'
        ).encode()
        bodies = {
            "/root/oai": b"<TOP-SECRET-ROOT>SECRET</TOP-SECRET-ROOT>",
            "/html/oai": b"<html><body>SECRET page</body></html>",
            "/error/oai": (
                b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>'
                b"2026-01-01T00:00:00Z</responseDate><request>x</request>"
                b'<error code="badVerb">SECRET error text</error></OAI-PMH>'
            ),
            "/broken/oai": b"<a>SECRET<SECRET-TAG></a>",
            "/version/oai": identify(f"{root}/version/oai", version="SECRET-1.1"),
            "/base/oai": identify("http://SECRET.example.org/oai"),
            "/xxe/oai": identify(f"{root}/xxe/oai", doctype=xxe),
        }
        async with SafeFetcher(allow_private=True, ports=range(1, 65536)) as fetcher:
            registry = RegistryNode(db, net.network, net.keys[0], fetcher, config)
            texts = {}
            for path in bodies:
                with pytest.raises(UrlRefused) as caught:
                    await registry.validate(root + path)
                texts[path.split("/")[1]] = str(caught.value)
        assert listening.connections == 0
    assert texts == {
        "root": NOT_IDENTIFY,
        "html": NOT_IDENTIFY,
        "error": NOT_IDENTIFY,
        "broken": NOT_IDENTIFY,
        "version": "the Identify response's protocolVersion is not 2.0",
        "base": "the Identify response's baseURL is not the submitted URL, character for character",
        "xxe": "the Identify response declares a DOCTYPE (refused)",
    }
    logged = [r.getMessage() for r in caplog.records if r.name == "wiscat.registry"]
    assert any("TOP-SECRET-ROOT" in m for m in logged), logged
    assert any("'SECRET-1.1'" in m for m in logged), logged
    assert any("http://SECRET.example.org/oai" in m for m in logged), logged
    assert not any("SECRET-FROM-A-FILE" in m for m in logged), logged
