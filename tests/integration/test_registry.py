"""The distributed registry (docs/registry.md) on loopback: a tracker and member nodes, each a
real provider on its own fresh database, syncing over real HTTP; no mocks."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lxml import etree

from tests.support.registry_network import (
    DIFFICULTY,
    SYNC_SECONDS,
    eventually,
    fresh_databases,
    make_network,
    member_nodes,
    node_overrides,
    post_url,
    status_of,
    urls_of,
)
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import create_pool
from wiscat.shared.registry.chain import (
    Block,
    Tip,
    Transaction,
    blocks_from_xml,
    blocks_to_xml,
    meets_difficulty,
    mine,
    verify_chain,
)

# the tracker asks for an announce every second (its interval is its sync time, rounded up), and
# every member, all from 127.0.0.1, honours it
TRACKER: dict[str, object] = {
    "gisc_name": "TRACKER",
    "registry_announce_rate_limit_per_minute": 1000,
    "registry_sync_seconds": SYNC_SECONDS,
}


async def test_three_nodes_share_a_posted_url(tmp_path: Path, template_ready: str) -> None:
    async with (
        fresh_databases(template_ready, 4) as dbs,
        running_provider(dbs[0], **TRACKER) as tracker,
    ):
        net = make_network(tmp_path, 3, tracker=tracker.root + "/registry/announce")
        async with member_nodes(net, dbs[1:]) as nodes, aiohttp.ClientSession() as session:
            a, b, c = nodes
            # a real OAI-PMH 2.0 repository whose Identify gives exactly this baseURL: node b's
            status, text = await post_url(session, a, b.oai)
            assert status == 200, text
            assert "accepted" in text

            async def everywhere() -> bool:
                return [await urls_of(session, node) for node in nodes] == [[b.oai]] * 3

            await eventually(everywhere)

            # the friends-container shape, id = the tx-hash (SHA-512 of the URL)
            async with session.get(c.root + "/urls") as response:
                root = etree.fromstring(await response.read())
            assert [(e.tag, e.get("id"), e.text) for e in root] == [
                ("baseURL", hashlib.sha512(b.oai.encode()).hexdigest(), b.oai)
            ]
            # duplicates: at the node that took it, and at another one
            for node in (a, c):
                status, text = await post_url(session, node, b.oai)
                assert status == 409, text
            # not an OAI-PMH repository; malformed; a form without the field
            status, text = await post_url(session, a, b.root + "/healthz")
            assert status == 400 and "OAI-PMH" in text, text
            status, text = await post_url(session, a, b.oai + "?verb=Identify")
            assert status == 400 and "malformed" in text, text
            async with session.post(a.root + "/urls", data={"other": "x"}) as response:
                assert response.status == 400
            # Identify's baseURL must equal the submitted string exactly
            status, text = await post_url(session, a, b.oai + "/")
            assert status == 400 and "baseURL" in text, text

            # the form posts to /urls
            async with session.get(a.root + "/urls/form") as response:
                assert response.status == 200
                page = await response.text()
                # no script may run in it, and no other page may frame it
                policy = response.headers["Content-Security-Policy"]
                assert policy == "default-src 'none'; frame-ancestors 'none'"
            assert 'name="baseURL"' in page and 'action="/urls"' in page

            # a candidate link on every node: disabled, the whole catalogue, filed in the
            # registry's set
            for node, url in zip(nodes, dbs[1:], strict=True):
                pool = await create_pool(url, max_size=1)
                try:
                    links = await link_store.all_links(pool)
                finally:
                    await pool.close()
                candidates = [
                    (ln.base_url, ln.enabled, ln.remote_set, ln.local_set) for ln in links
                ]
                # node b is the registered repository: it never harvests itself
                expected = [] if node is b else [(b.oai, False, None, "REGISTRY-wis-test")]
                assert candidates == expected, node.root
            heights = {await status_of(session, node) for node in nodes}
            assert len(heights) == 1 and next(iter(heights))[0] == 1


async def test_rate_limit_on_submissions_per_client(tmp_path: Path, database_url: str) -> None:
    net = make_network(tmp_path, 1)
    overrides = node_overrides(net, 0, registry_rate_limit_per_minute=3)
    async with (
        running_provider(database_url, **overrides) as node,
        aiohttp.ClientSession() as session,
    ):

        async def statuses(client: str | None, count: int) -> list[int]:
            # behind a reverse proxy on the same host the client is the one it forwards for
            # (uvicorn trusts X-Forwarded-For from FORWARDED_ALLOW_IPS, loopback by default)
            headers = {"X-Forwarded-For": client} if client else {}
            found = []
            for _ in range(count):
                async with session.post(
                    node.root + "/urls", data={"baseURL": "ftp://x"}, headers=headers
                ) as response:
                    found.append(response.status)
                    if response.status == 429:
                        assert 0 < int(response.headers["Retry-After"]) <= 60
            return found

        assert await statuses(None, 5) == [400, 400, 400, 429, 429]
        assert await statuses("203.0.113.7", 4) == [400, 400, 400, 429]
        assert await statuses("198.51.100.2", 1) == [400]
        assert await statuses(None, 1) == [429]


async def test_altered_and_foreign_blocks_are_refused(tmp_path: Path, database_url: str) -> None:
    net = make_network(tmp_path, 2)
    genesis = net.network.genesis
    good = mine(
        genesis.hash, [Transaction.new("https://a.example.org/oai")], DIFFICULTY, net.keys[1]
    )
    altered = dataclasses.replace(
        good, transactions=(Transaction.new("https://evil.example.org/oai"),)
    )
    stranger = Ed25519PrivateKey.generate()
    foreign = mine(
        genesis.hash, [Transaction.new("https://b.example.org/oai")], DIFFICULTY, stranger
    )
    orphan = mine(
        "e" * 128, [Transaction.new("https://c.example.org/oai")], DIFFICULTY, net.keys[1]
    )
    weak = mine(genesis.hash, [Transaction.new("https://d.example.org/oai")], 0, net.keys[1])
    while meets_difficulty(weak.hash, DIFFICULTY):  # a block without its proof of work
        weak = mine(weak.hash, [Transaction.new("https://d.example.org/oai")], 0, net.keys[1])
    async with (
        running_provider(database_url, **node_overrides(net, 0)) as node,
        aiohttp.ClientSession() as session,
    ):

        async def push(block: Block) -> tuple[int, str]:
            async with session.post(
                node.root + "/registry/blocks",
                data=blocks_to_xml([block]),
                headers={"Content-Type": "application/xml"},
            ) as response:
                return response.status, await response.text()

        status, text = await push(altered)
        assert status == 400 and "transactions-hash" in text, text
        status, text = await push(foreign)
        assert status == 403 and "member" in text, text
        status, text = await push(weak)
        assert status == 400 and "puzzle" in text, text
        status, text = await push(orphan)
        assert status == 409, text
        async with session.post(node.root + "/registry/blocks", data=b"<blocks><x/>") as resp:
            assert resp.status == 400
        assert await urls_of(session, node) == []
        status, text = await push(good)
        assert status == 200, text
        status, text = await push(good)
        assert status == 200 and "known already" in text, text
        assert await urls_of(session, node) == ["https://a.example.org/oai"]
        # the same URL again in a later block (a replayed transaction) is refused
        replay = mine(good.hash, good.transactions, DIFFICULTY, net.keys[1])
        status, text = await push(replay)
        assert status == 400 and "already" in text, text


async def test_a_late_node_syncs_and_verifies_the_whole_chain(
    tmp_path: Path, template_ready: str
) -> None:
    async with (
        fresh_databases(template_ready, 4) as dbs,
        running_provider(dbs[0], **TRACKER) as tracker,
    ):
        net = make_network(tmp_path, 3, tracker=tracker.root + "/registry/announce")
        # a chain of 25 blocks made by member 2, handed to node 1
        blocks, previous = [], net.network.genesis.hash
        for n in range(25):
            txs = [Transaction.new(f"https://r{n}-{k}.example.org/oai") for k in range(3)]
            block = mine(previous, txs, DIFFICULTY, net.keys[1])
            blocks.append(block)
            previous = block.hash
        async with member_nodes(net, dbs[1:3]) as (first, second), aiohttp.ClientSession() as s:
            async with s.post(first.root + "/registry/blocks", data=blocks_to_xml(blocks)) as r:
                assert r.status == 200, await r.text()
            expected = [tx.base_url for block in blocks for tx in block.transactions]

            async def second_has_it() -> bool:
                return await urls_of(s, second) == expected

            await eventually(second_has_it)
            # a node that joins now knows only the key file: it pulls every block from its
            # peers and verifies them back to the genesis block
            overrides = node_overrides(net, 2, gisc_name="LATE")
            async with running_provider(dbs[3], **overrides) as late:

                async def late_has_it() -> bool:
                    return await urls_of(s, late) == expected

                await eventually(late_has_it)
                assert await status_of(s, late) == (25, blocks[-1].hash)
            pool = await create_pool(dbs[3], max_size=1)
            try:
                stored = await pool.fetch(
                    "select b.xml from registry_chain c join registry_blocks b "
                    "on b.hash = c.block_hash order by c.height"
                )
            finally:
                await pool.close()
            chain = [blocks_from_xml(bytes(row["xml"]))[0] for row in stored]
            assert chain[0] == net.network.genesis
            assert verify_chain(chain[0], chain[1:], DIFFICULTY, net.network.member_keys) == Tip(
                25, blocks[-1].hash
            )


async def test_nodes_that_mint_at_the_same_moment_end_on_one_chain(
    tmp_path: Path, template_ready: str
) -> None:
    async with (
        fresh_databases(template_ready, 3) as dbs,
        running_provider(dbs[0], **TRACKER) as tracker,
    ):
        net = make_network(tmp_path, 2, tracker=tracker.root + "/registry/announce")
        async with member_nodes(net, dbs[1:]) as (a, b), aiohttp.ClientSession() as session:

            async def know_each_other() -> bool:
                for node in (a, b):
                    async with session.get(node.root + "/registry/peers") as response:
                        peers = [p.text for p in etree.fromstring(await response.read())]
                    if len(peers) != 1:
                        return False
                return True

            await eventually(know_each_other)
            # 1. two submissions at once, one at each node: each mints on the genesis block
            results = await asyncio.gather(post_url(session, a, b.oai), post_url(session, b, a.oai))
            assert [status for status, _ in results] == [200, 200], results

            async def converged(count: int) -> bool:
                tips = {await status_of(session, node) for node in (a, b)}
                lists = [sorted(await urls_of(session, node)) for node in (a, b)]
                return len(tips) == 1 and lists[0] == lists[1] and len(lists[0]) == count

            await eventually(lambda: converged(2))
            assert sorted(await urls_of(session, a)) == sorted([a.oai, b.oai])

            # 2. a fork made on purpose: two competing blocks on the same tip, one given to
            # each node at the same moment; the lower hash wins on both and the loser's URL
            # returns to the pool and is minted again
            height, tip = await status_of(session, a)
            x = mine(tip, [Transaction.new("https://x.example.org/oai")], DIFFICULTY, net.keys[0])
            y = mine(tip, [Transaction.new("https://y.example.org/oai")], DIFFICULTY, net.keys[1])

            async def give(node: RunningProvider, block: Block) -> int:
                async with session.post(
                    node.root + "/registry/blocks", data=blocks_to_xml([block])
                ) as response:
                    return response.status

            assert list(await asyncio.gather(give(a, x), give(b, y))) == [200, 200]
            await eventually(lambda: converged(4))
            winner = min(x, y, key=lambda blk: blk.hash)
            pool = await create_pool(dbs[1], max_size=1)
            try:
                at_fork = await pool.fetchval(
                    "select block_hash from registry_chain where height = $1", height + 1
                )
            finally:
                await pool.close()
            assert at_fork == winner.hash
            final = await status_of(session, a)
            assert final[0] == height + 2
            assert sorted(await urls_of(session, b)) == sorted(
                [a.oai, b.oai, "https://x.example.org/oai", "https://y.example.org/oai"]
            )
