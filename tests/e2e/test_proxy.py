"""A node whose only way out is a proxy: ``WISCAT_PROXY_URL`` sends harvests and checks through
it (http in absolute form, https through CONNECT), with its credentials in a header and never in
what is logged or stored; ``WISCAT_NO_PROXY`` names hosts reached directly; a proxy that is
down, or refuses the credentials, fails the run with the reason.

The proxy and the peers are real servers on 127.0.0.1 (tests/support/forward_proxy.py)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trustme

from tests.e2e.nodes import Node, NodeFactory, free_port
from tests.support.forward_proxy import forward_proxy
from tests.support.servers import list_records_page, serving
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

RECORDS = 3
PASSWORD = "s3cret-proxy-pw"


def listing() -> bytes:
    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="proxied")) for n in range(RECORDS)]
    return list_records_page([render.record(r.identifier, now, [], False, r.xml) for r in records])


@pytest.fixture
async def peer() -> AsyncIterator[str]:
    async with serving(listing()) as url:
        yield url


async def linked(make_node: NodeFactory, url: str, **settings: str) -> Node:
    node = await make_node("A")
    node.extra.update(settings)
    await node.wiscat("link", "add", "peer", "--url", url, "--set", "WIS-GISC-P", "--disable")
    return node


async def test_a_harvest_goes_through_the_proxy(make_node: NodeFactory, peer: str) -> None:
    async with forward_proxy() as proxy:
        node = await linked(make_node, peer, WISCAT_PROXY_URL=proxy.url)
        code, out, err = await node.wiscat("harvest", "peer", check=False)
    assert code == 0, out + err
    assert f"added {RECORDS}," in out
    assert f"GET {peer}?verb=Identify HTTP/1.1" in proxy.asked
    assert any(line.startswith(f"GET {peer}?verb=ListRecords") for line in proxy.asked)


async def test_https_goes_through_a_tunnel_with_the_proxy_credentials(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    async with (
        serving(listing(), tls=context) as url,
        forward_proxy(credentials=("harvester", PASSWORD)) as proxy,
    ):
        with_credentials = proxy.url.replace("http://", f"http://harvester:{PASSWORD}@")
        node = await linked(
            make_node, url, WISCAT_PROXY_URL=with_credentials, WISCAT_CA_FILE=str(ca_file)
        )
        code, out, err = await node.wiscat("harvest", "peer", check=False)
        assert code == 0, out + err
        assert f"added {RECORDS}," in out
        assert proxy.asked[0] == f"CONNECT {url.split('/')[2]} HTTP/1.1"

        # a wrong password: refused at once, and no password shown anywhere
        wrong = proxy.url.replace("http://", "http://harvester:wrong-pw@")
        node.extra["WISCAT_PROXY_URL"] = wrong
        code, out, err = await node.wiscat("harvest", "peer", check=False)
        assert code != 0, out
        assert "proxy authentication required" in out
        assert "retrying" not in err
        _, listed, _ = await node.wiscat("link", "list", "--json")
    for text in (out, err, listed):
        assert "wrong-pw" not in text and PASSWORD not in text


async def test_a_proxy_that_wants_credentials_says_so(make_node: NodeFactory, peer: str) -> None:
    async with forward_proxy(credentials=("harvester", PASSWORD)) as proxy:
        node = await linked(make_node, peer, WISCAT_PROXY_URL=proxy.url)
        code, out, _ = await node.wiscat("harvest", "peer", check=False)
        assert code != 0, out
        assert f"the proxy {proxy.url} refused the request for {peer}: proxy authentication" in out
        assert len(proxy.asked) == 1  # not retried
        # given them, plain http requests carry them too (not only https tunnels)
        with_credentials = proxy.url.replace("http://", f"http://harvester:{PASSWORD}@")
        node.extra["WISCAT_PROXY_URL"] = with_credentials
        code, out, err = await node.wiscat("harvest", "peer", check=False)
    assert code == 0, out + err
    assert f"added {RECORDS}," in out
    assert PASSWORD not in out + err


async def test_no_proxy_hosts_are_reached_directly(make_node: NodeFactory, peer: str) -> None:
    async with forward_proxy() as proxy:
        node = await linked(
            make_node, peer, WISCAT_PROXY_URL=proxy.url, WISCAT_NO_PROXY="example.org, 127.0.0.0/8"
        )
        code, out, err = await node.wiscat("harvest", "peer", check=False)
    assert code == 0, out + err
    assert proxy.asked == []


async def test_a_proxy_that_is_down_fails_the_run_with_the_reason(
    make_node: NodeFactory, peer: str
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    node = await linked(make_node, peer, WISCAT_PROXY_URL=down, WISCAT_HARVEST_MAX_RETRIES="0")
    code, out, _ = await node.wiscat("harvest", "peer", check=False)
    assert code != 0, out
    assert f"cannot connect to the proxy {down}" in out


@pytest.mark.parametrize(
    "value",
    [
        f"https://user:{PASSWORD}@gate.internal:3128",
        f"http://user:{PASSWORD}@gate.internal:3128/path",
        "gate.internal:3128",
    ],
)
async def test_a_bad_proxy_url_is_refused_without_showing_it(
    make_node: NodeFactory, value: str
) -> None:
    node = await make_node("A")
    node.extra["WISCAT_PROXY_URL"] = value
    code, out, err = await node.wiscat("link", "list", check=False)
    assert code == 2, out
    assert "bad setting WISCAT_PROXY_URL" in err
    assert PASSWORD not in err and "gate.internal" not in err
