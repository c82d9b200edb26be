"""One registry node beyond the three-node scenarios: a relay node without a member key, links
enabled by configuration, an internal error, the tracker's memory, a node that is its own
tracker. Real providers and a real database; no mocks."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from lxml import etree

from tests.support.registry_network import (
    DIFFICULTY,
    make_network,
    node_overrides,
    post_url,
    urls_of,
)
from tests.support.servers import running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import registry as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.registry.chain import Transaction, blocks_to_xml, mine
from wiscat.shared.registry.safe_fetch import SafeFetcher
from wiscat.shared.registry_node import TRACKER_MEMBER_TTL, NodeConfig, RegistryNode

URL = "https://repository.example.org/oai"


async def test_a_relay_node_cannot_mint_but_files_enabled_links_when_told(
    tmp_path: Path, database_url: str, db: Pool
) -> None:
    net = make_network(tmp_path, 1)
    block = mine(net.network.genesis.hash, [Transaction.new(URL)], DIFFICULTY, net.keys[0])
    overrides = node_overrides(net, None, registry_auto_enable_links=True)
    async with (
        running_provider(database_url, **overrides) as node,
        aiohttp.ClientSession() as session,
    ):
        status, text = await post_url(session, node, URL)
        assert status == 503 and "member key" in text, text
        async with session.post(node.root + "/registry/blocks", data=blocks_to_xml([block])) as r:
            assert r.status == 200, await r.text()
        assert await urls_of(session, node) == [URL]
    [link] = await link_store.all_links(db)
    assert (link.base_url, link.enabled, link.remote_set, link.local_set) == (
        URL,
        True,
        None,
        "REGISTRY-wis-test",
    )


async def test_an_internal_error_answers_500(tmp_path: Path, database_url: str, db: Pool) -> None:
    net = make_network(tmp_path, 1)
    async with (
        running_provider(database_url, **node_overrides(net, 0)) as node,
        aiohttp.ClientSession() as session,
    ):
        await db.execute("alter table registry_pool rename to registry_pool_gone")
        status, text = await post_url(session, node, node.oai)
        assert (status, text) == (500, "internal error\n")


async def test_the_tracker_answers_recent_members_and_forgets_silent_ones(
    database_url: str, db: Pool
) -> None:
    async with running_provider(database_url) as tracker, aiohttp.ClientSession() as session:

        async def announce(network: str, url: str) -> tuple[int, list[str]]:
            form = {"network": network, "url": url}
            async with session.post(tracker.root + "/registry/announce", data=form) as response:
                if response.status != 200:
                    return response.status, []
                root = etree.fromstring(await response.read())
            return 200, [peer.text or "" for peer in root]

        assert await announce("wis-a", "https://one.example.org") == (
            200,
            ["https://one.example.org"],
        )
        assert (await announce("wis-b", "https://other.example.org"))[0] == 200
        await db.execute(
            "update registry_members set last_announce = now() - interval '2 hours' "
            "where url = 'https://one.example.org'"
        )
        status, members = await announce("wis-a", "https://two.example.org")
        assert (status, members) == (200, ["https://two.example.org"])
        assert (await announce("not a name", "https://x.example.org"))[0] == 400
        assert (await announce("wis-a", "ftp://x.example.org"))[0] == 400
        # 2,000 characters of CJK text (6 KB in UTF-8) could not be indexed: the insert failed
        # and the tracker, open to anyone, answered 500
        wide = "https://x.example.org/" + "".join(chr(0x4E00 + n * 7) for n in range(2000))
        assert (await announce("wis-a", wide))[0] == 400
        assert (await announce("wis-a", "https://x.example.org/" + "a" * 2026))[0] == 200
    stored = {row["url"] for row in await db.fetch("select url from registry_members")}
    assert stored == {
        "https://two.example.org",
        "https://other.example.org",
        "https://x.example.org/" + "a" * 2026,
    }


async def test_a_node_that_is_its_own_tracker_announces_without_http(
    tmp_path: Path, db: Pool
) -> None:
    root = "http://127.0.0.1:9"  # the discard port: nothing answers there
    net = make_network(tmp_path, 1, tracker=root + "/registry/announce")
    config = NodeConfig(node_url=root, own_base_url=root + "/oai", own_set="WIS-GISC-TEST")
    # this fetcher refuses loopback addresses: a request to the tracker would raise
    async with SafeFetcher(timeout=2) as fetcher:
        node = RegistryNode(db, net.network, net.keys[0], fetcher, config)
        await node.prepare()
        name = net.network.info_hash.hex()  # a tracker knows a network by its info_hash
        await store.announce(db, name, "https://peer.example.org", None, TRACKER_MEMBER_TTL)
        # a member is untrusted until its status names this network: this one does not resolve
        assert await node.announce() == []
    members = await store.network_members(db, name, TRACKER_MEMBER_TTL)
    assert sorted(members) == [root, "https://peer.example.org"]
    assert await store.all_peers(db) == []
