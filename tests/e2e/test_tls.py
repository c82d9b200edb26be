"""Peers over https: a certificate the node does not trust, or a port that does not speak TLS,
fails the run at once with the reason (no retry changes either); ``WISCAT_CA_FILE`` trusts a
private CA's certificates besides the system's, for the harvester and the consistency checker.

The peer is a real https server on 127.0.0.1 whose certificate a test CA (trustme) signed."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from tests.e2e.nodes import Node, NodeFactory
from tests.support.servers import list_records_page, serving
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

RECORDS = 3


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def https_peer(ca: trustme.CA) -> AsyncIterator[str]:
    """A peer on https://127.0.0.1 listing ``RECORDS`` records, its certificate from ``ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="tls")) for n in range(RECORDS)]
    listing = list_records_page(
        [render.record(r.identifier, now, [], False, r.xml) for r in records]
    )
    headers = b"".join(render.header(r.identifier, now, [], False) for r in records)
    identifiers = (
        render.response_start(
            now, "https://peer/oai", {"verb": "ListIdentifiers"}, "ListIdentifiers"
        )
        + headers
        + render.response_end("ListIdentifiers")
    )

    async def pages(request: web.Request) -> bytes:
        return identifiers if request.query.get("verb") == "ListIdentifiers" else listing

    async with serving(b"", pages=pages, tls=context) as url:
        yield url


async def node_linked_to(make_node: NodeFactory, url: str) -> Node:
    node = await make_node("A")
    await node.wiscat("link", "add", "peer", "--url", url, "--set", "WIS-GISC-P", "--disable")
    return node


async def test_an_untrusted_certificate_fails_the_run_at_once(
    make_node: NodeFactory, https_peer: str
) -> None:
    node = await node_linked_to(make_node, https_peer)
    code, out, err = await node.wiscat("harvest", "peer", check=False)
    assert code != 0, out
    port = https_peer.split(":")[2].split("/")[0]
    assert f"the TLS certificate of 127.0.0.1:{port} is not trusted" in out + err
    assert "WISCAT_CA_FILE" in out + err
    assert "retrying" not in err  # a certificate does not change between attempts


async def test_the_ca_file_trusts_a_private_ca(
    make_node: NodeFactory, https_peer: str, ca: trustme.CA, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    node = await node_linked_to(make_node, https_peer)
    node.extra["WISCAT_CA_FILE"] = str(ca_file)
    code, out, err = await node.wiscat("harvest", "peer", check=False)
    assert code == 0, out + err
    assert f"added {RECORDS}," in out
    # the consistency checker trusts it too: the node's copy of the set is the peer's
    await node.start("provider", node.oai + "?verb=Identify")
    code, out, err = await node.wiscat(
        "check", "--set", "WIS-GISC-P", "--source", https_peer, node.oai, check=False
    )
    assert code == 0, out + err
    assert "outcome: consistent" in out


async def test_https_to_a_plain_http_port_says_so(make_node: NodeFactory) -> None:
    async with serving(b"") as url:
        node = await node_linked_to(make_node, url.replace("http://", "https://"))
        code, out, err = await node.wiscat("harvest", "peer", check=False)
    assert code != 0, out
    assert "the port does not speak TLS" in out + err
    assert "retrying" not in err


@pytest.mark.parametrize("content", ["", "not a certificate\n"])
async def test_a_ca_file_without_certificates_is_a_bad_setting(
    make_node: NodeFactory, tmp_path: Path, content: str
) -> None:
    node = await make_node("A")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(content)
    node.extra["WISCAT_CA_FILE"] = str(ca_file)
    code, out, err = await node.wiscat("link", "list", check=False)
    assert code == 2, out
    assert "bad setting WISCAT_CA_FILE" in err
    assert "a PEM file of CA certificates" in err
    node.extra["WISCAT_CA_FILE"] = str(tmp_path / "missing.pem")
    code, _, err = await node.wiscat("link", "list", check=False)
    assert code == 2
    assert "No such file or directory" in err


async def test_an_expired_certificate_is_told_as_such(
    make_node: NodeFactory, ca: trustme.CA, tmp_path: Path
) -> None:
    """Trusted issuer, expired certificate: the reason says so, with no word of WISCAT_CA_FILE
    (which cannot help)."""
    now = datetime.now(UTC)
    gone = now - timedelta(hours=1)
    expired = ca.issue_cert("127.0.0.1", not_before=now - timedelta(days=9), not_after=gone)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    expired.configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    async with serving(b"", tls=context) as url:
        node = await node_linked_to(make_node, url)
        node.extra["WISCAT_CA_FILE"] = str(ca_file)
        code, out, _ = await node.wiscat("harvest", "peer", check=False)
    assert code != 0, out
    assert "is not trusted: certificate has expired\n" in out
