"""The registry as an operator sets it up: keys and a key file with ``wiscat registry``, a URL
submitted at one node, and a second node that syncs the chain with ``wiscat registry sync``."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.nodes import Node, NodeFactory
from wiscat.shared.registry.keyfile import load_network, parse_network


@pytest.fixture
async def nodes(make_node: NodeFactory) -> tuple[Node, Node]:
    return await make_node("REGA"), await make_node("REGB")


async def test_keys_network_submission_and_sync_from_the_command_line(
    nodes: tuple[Node, Node], tmp_path: Path
) -> None:
    a, b = nodes
    a_key, b_key, network = tmp_path / "a.pem", tmp_path / "b.pem", tmp_path / "network.torrent"
    _, a_public, _ = await a.wiscat("registry", "keygen", "--out", str(a_key))
    _, b_public, _ = await b.wiscat("registry", "keygen", "--out", str(b_key))
    code, _, err = await a.wiscat("registry", "keygen", "--out", str(a_key), check=False)
    assert code == 1 and "not overwritten" in err
    a_root = f"http://127.0.0.1:{a.provider_port}"
    _, out, _ = await a.wiscat(
        "registry",
        "init-network",
        "wis-test",
        "--difficulty",
        "4",
        "--out",
        str(network),
        "--key",
        str(a_key),
        "--peer",
        a_root,
    )
    assert "network wis-test: info_hash " in out and "closed, 1 member(s)" in out
    assert network.read_bytes().startswith(b"d")  # a BitTorrent metainfo file
    assert a_public.strip().encode() in network.read_bytes()  # the founder is a member
    _, out, _ = await a.wiscat("registry", "add-member", str(network), b_public.strip())
    assert "2 member(s); the new info_hash is " in out
    info_hash = load_network(network).info_hash.hex()
    assert info_hash in out
    # the XML form of old: one network, one info_hash
    as_xml = tmp_path / "network.xml"
    _, out, _ = await a.wiscat("registry", "convert", str(network), "--out", str(as_xml))
    assert out.startswith(f"{as_xml}: the xml form of network wis-test, info_hash {info_hash}")
    assert as_xml.read_bytes().startswith(b"<?xml")
    assert parse_network(as_xml.read_bytes()).to_metainfo() == network.read_bytes()

    for node, key in ((a, a_key), (b, b_key)):
        node.extra.update(
            {
                "WISCAT_REGISTRY_KEY_FILE": str(network),
                "WISCAT_REGISTRY_PRIVATE_KEY_FILE": str(key),
                "WISCAT_ALLOW_PRIVATE_FETCH": "true",
                # every fetch of this network is from A (its Identify, and B's sync)
                "WISCAT_REGISTRY_FETCH_PORTS": str(a.provider_port),
            }
        )
    await a.start("provider", f"{a_root}/readyz")
    # the node registers its own base URL, at its own POST /urls
    _, out, _ = await a.wiscat("registry", "announce-self")
    assert out.startswith(f"accepted {a.oai} (id ")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{a_root}/urls", data={"baseURL": a.oai}) as response:
            assert response.status == 409
        async with http.get(f"{a_root}/urls") as response:
            listed = await response.text()
    assert f">{a.oai}</baseURL>" in listed
    _, out, _ = await a.wiscat("registry", "status")
    assert "1 URL(s)" in out
    assert f"network wis-test: info_hash {info_hash}, " in out

    # B has never run: it syncs from the key file's static peer and files the URL as a link
    code, out, _ = await b.wiscat("registry", "status", check=False)
    assert code == 1 and "no registry chain" in out
    _, out, _ = await b.wiscat("registry", "sync")
    assert "block(s) accepted" in out
    _, out, _ = await b.wiscat("registry", "status")
    assert "1 URL(s)" in out
    _, listed_links, _ = await b.wiscat("link", "list", "--json")
    [link] = json.loads(listed_links)
    assert (link["base_url"], link["enabled"]) == (a.oai, False)
    _, peers, _ = await b.wiscat("registry", "peers", "--json")
    assert a_root in {peer["url"] for peer in json.loads(peers)}
    # as a table: a row a peer under URL, SOURCE, LAST OK and LAST ERROR
    _, table, _ = await b.wiscat("registry", "peers")
    head, *rows = table.splitlines()
    assert head.split() == ["URL", "SOURCE", "LAST", "OK", "LAST", "ERROR"]
    by_url = {row.split()[0]: row for row in rows}
    peer = next(p for p in json.loads(peers) if p["url"] == a_root)
    assert by_url[a_root][head.index("SOURCE") :].split()[0] == peer["source"]
