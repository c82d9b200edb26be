"""The harvester's OAI-PMH client over HTTP: redirects, compression, the headers it sends and
the connections it opens to one peer.

Each peer is a small real server on 127.0.0.1; nothing in the HTTP path is mocked."""

from __future__ import annotations

import asyncio
import logging
import ssl
import zlib
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from tests.integration.harvester_client.peers import (
    LOGGER,
    ClientFactory,
    Peer,
    Serve,
    identifiers,
    two_pages,
    xml,
)
from tests.support.servers import serving_app
from wiscat.harvester.client import OAIClient
from wiscat.harvester.errors import (
    BadResponse,
    PeerHTTPError,
)
from wiscat.harvester.service import client_settings
from wiscat.shared.settings import Settings


async def test_gzip_responses_are_decompressed(serve: Serve, client: OAIClient) -> None:
    """H22: gzip answers are decoded."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        response = two_pages(request)
        response.enable_compression()
        return response

    peer = await serve(handler)
    assert len(await identifiers(client, peer.url)) == 3


@pytest.mark.parametrize(
    ("encoding", "wbits"),
    [("deflate", 15), ("deflate", -15), ("gzip", 31), ("deflate", 31)],
    ids=["deflate-zlib", "deflate-raw", "gzip", "gzip-called-deflate"],
)
async def test_every_deflate_framing_is_read(
    serve: Serve, client: OAIClient, encoding: str, wbits: int
) -> None:
    # "deflate" is zlib-wrapped (RFC 9110 §8.4.1.2), yet some servers send it raw: that failed
    # the list with "broken deflate stream"
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        packed = zlib.compressobj(6, zlib.DEFLATED, wbits)
        body = packed.compress(two_pages(request).body) + packed.flush()  # type: ignore[arg-type]
        return web.Response(
            body=body, headers={"Content-Type": "text/xml", "Content-Encoding": encoding}
        )

    peer = await serve(handler)
    assert len(await identifiers(client, peer.url)) == 3


async def test_a_broken_gzip_stream_fails_the_list(serve: Serve, client: OAIClient) -> None:
    async def handler(request: web.Request, peer: Peer) -> web.Response:
        whole = zlib.compress(two_pages(request).body, wbits=31)  # type: ignore[arg-type]
        broken = whole[:20] + bytes(b ^ 0x5A for b in whole[20:60]) + whole[60:]
        return web.Response(
            body=broken, headers={"Content-Type": "text/xml", "Content-Encoding": "gzip"}
        )

    peer = await serve(handler)
    with pytest.raises(BadResponse) as caught:
        await identifiers(client, peer.url)
    assert "broken gzip stream" in caught.value.reason
    assert peer.count == 1  # the peer's answer, not a transient failure


async def test_redirects_that_lead_nowhere(serve: Serve, client: OAIClient) -> None:
    """H11: a redirect loop is given up at its 5th redirect (ClientSettings.max_redirects;
    aiohttp's own default is 10), a redirect to another scheme at once; neither is retried."""

    async def loop(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPFound(f"{peer.url}?hop={peer.count}")

    looping = await serve(loop)
    with pytest.raises(BadResponse) as caught:
        await client.identify(looping.url)
    assert caught.value.reason == f"{looping.url} redirected 5 times without an answer"
    assert looping.count == 5  # not retried

    async def elsewhere(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPMovedPermanently("ftp://user:secret@peer.example/oai")

    moved = await serve(elsewhere)
    with pytest.raises(BadResponse) as caught:
        await client.identify(moved.url)
    assert caught.value.reason == (
        f"{moved.url} redirected to 'ftp://user:***@peer.example/oai', "
        "which is not a valid http(s) URL"
    )
    assert moved.count == 1


async def test_an_http_error_after_a_redirect_names_where_it_came_from(
    serve: Serve, client: OAIClient
) -> None:
    """The peer moved its endpoint and the old one redirects to a page that is gone: the
    reason names the URL that answered 404, not the one asked, which answered 302."""

    async def moved(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPFound("/gone/oai")  # nothing is served there: the server answers 404

    peer = await serve(moved)
    with pytest.raises(PeerHTTPError) as caught:
        await client.identify(peer.url)
    gone = peer.url.replace("/oai", "/gone/oai")
    assert caught.value.reason == (
        f"HTTP 404 from {gone} (redirected from {peer.url}), answering Identify"
    )
    assert caught.value.status == 404 and peer.count == 1


async def test_a_peer_that_moved_permanently_is_followed_and_told_once(
    serve: Serve, client: OAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def new_home(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    home = await serve(new_home)

    async def old_home(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPMovedPermanently(f"{home.url}?{request.query_string}")

    old = await serve(old_home)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            await client.identify(old.url)
    told = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert told == [
        f"{old.url} moved permanently to {home.url} (HTTP 301): every request to it is "
        f"redirected; point its links at the new URL (wiscat link set NAME --url {home.url})"
    ]
    assert client.moved == {old.url: home.url}
    assert (old.count, home.count) == (3, 3)

    # a temporary redirect is the peer's business: nothing to tell
    async def away(request: web.Request, peer: Peer) -> web.Response:
        raise web.HTTPFound(f"{home.url}?{request.query_string}")

    caplog.clear()
    temporary = await serve(away)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await client.identify(temporary.url)
    assert [r for r in caplog.records if r.name == LOGGER] == []
    assert temporary.url not in client.moved


async def test_https_is_not_followed_to_plain_http(
    serve: Serve, client_for: ClientFactory, tmp_path: Path
) -> None:
    """A redirect from https to http would take what any machine on the way wrote for the
    peer's records; from http to https (a peer that moved to https) is followed."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client = client_for(ca_file=tmp_path / "ca.pem")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)

    async def plain(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    http_peer = await serve(plain)
    secure = web.Application()

    async def down(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{http_peer.url}?{request.query_string}")

    async def answer(request: web.Request) -> web.Response:
        return xml("Identify.xml")

    secure.router.add_get("/down/oai", down)
    secure.router.add_get("/oai", answer)
    async with serving_app(secure, tls) as root:
        with pytest.raises(BadResponse) as caught:
            await client.identify(f"{root}/down/oai")
        assert caught.value.reason == (
            f"{root}/down/oai redirected to {http_peer.url}: from https to plain http, which a "
            "harvest does not follow"
        )

        async def up(request: web.Request, peer: Peer) -> web.Response:
            raise web.HTTPMovedPermanently(f"{root}/oai?{request.query_string}")

        upgraded = await serve(up)
        await client.identify(upgraded.url)  # answered by the https peer
        assert upgraded.count == 1


async def test_h22_requests_accept_identity_too(serve: Serve, client: OAIClient) -> None:
    """H22: a request asks for gzip or deflate and says an uncompressed answer is welcome too
    (identity with q > 0), for a peer that cannot compress."""

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    peer = await serve(handler)
    await client.identify(peer.url)
    assert peer.headers[0]["Accept-Encoding"] == "gzip, deflate, identity;q=0.5"


async def test_h23_requests_name_the_node_and_its_contact(serve: Serve) -> None:
    """H23: a harvest names its software and version (User-Agent) and the node's contact
    address (From, RFC 9110 §10.1.2: the operator of a robot), which is WISCAT_ADMIN_EMAIL."""
    settings = client_settings(
        Settings(_env_file=None, gisc_name="T", admin_email="ops@gisc.example")  # type: ignore[call-arg]
    )

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        return xml("Identify.xml")

    peer = await serve(handler)
    async with OAIClient.session(settings) as session:
        await OAIClient(session, settings).identify(peer.url)
    from wiscat.shared.version import VERSION

    assert peer.headers[0]["User-Agent"] == f"wiscat-harvester/{VERSION} (OAI-PMH 2.0)"
    assert peer.headers[0]["From"] == "ops@gisc.example"


async def test_h23_connections_to_one_peer_are_capped(serve: Serve) -> None:
    """H23: however many requests a harvester process has for one peer host (links harvested
    at once, pages read ahead, GetRecords), at most ClientSettings.connections_per_host (4)
    connections to it are open at once; the rest wait for one."""
    settings = client_settings(Settings(_env_file=None, gisc_name="T"))  # type: ignore[call-arg]
    assert settings.connections_per_host == 4
    at_once = 0
    most = 0
    ports: set[int] = set()

    async def handler(request: web.Request, peer: Peer) -> web.Response:
        nonlocal at_once, most
        assert request.transport is not None
        ports.add(request.transport.get_extra_info("peername")[1])
        at_once += 1
        most = max(most, at_once)
        await asyncio.sleep(0.3)
        at_once -= 1
        return xml("Identify.xml")

    peer = await serve(handler)
    async with OAIClient.session(settings) as session:
        client = OAIClient(session, settings)
        await asyncio.gather(*(client.identify(peer.url) for _ in range(12)))
    assert peer.count == 12
    assert most == 4
    assert len(ports) == 4  # the connections are kept and reused
