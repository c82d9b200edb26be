"""Nodes that find each other through a real BitTorrent tracker (Debian's opentracker on
loopback, whitelist mode), in an open network; a tracker's addresses held to the outbound
address rules; fork choice in an open network. Real providers, a real tracker, real databases;
no mocks."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.opentracker import announce, running_opentracker
from tests.support.registry_network import (
    TEST_FETCH_PORTS,
    NetworkFiles,
    canary,
    eventually,
    fresh_databases,
    make_network,
    node_overrides,
    post_url,
    urls_of,
)
from tests.support.servers import RunningProvider, running_provider, serving_app
from wiscat.shared.db import registry as store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.registry.chain import Tip, Transaction, url_hash
from wiscat.shared.registry.discovery import Discovery
from wiscat.shared.registry.safe_fetch import SafeFetcher
from wiscat.shared.registry.tracker import (
    Announce,
    TrackerError,
    TrackerReply,
    new_peer_id,
    parse_reply,
    reply_body,
)
from wiscat.shared.registry_node import NodeConfig, RegistryNode


def with_tracker(net: NetworkFiles, tracker: str) -> NetworkFiles:
    """The key file with ``tracker`` added: the trackers are outside ``info``, so the network
    (its info_hash, which the tracker's whitelist names) is the same."""
    network = dataclasses.replace(net.network, trackers=((tracker,),))
    assert network.info_hash == net.network.info_hash
    net.key_file.write_bytes(network.to_metainfo())
    return dataclasses.replace(net, network=network)


async def test_an_open_network_found_through_opentracker_shares_a_url(
    tmp_path: Path, template_ready: str
) -> None:
    net = make_network(tmp_path, 3, open_network=True)
    info_hash = net.network.info_hash
    async with (
        running_opentracker(info_hash) as tracker,
        fresh_databases(template_ready, 3) as dbs,
        aiohttp.ClientSession() as session,
    ):
        net = with_tracker(net, tracker.announce)
        assert net.network.is_open and net.network.peers == ()  # the tracker, nothing else
        # whitelist mode: the tracker serves the networks of its access list, and no other
        other = Announce(bytes(20), new_peer_id(), 9)
        with pytest.raises(TrackerError) as refused:
            await announce(session, tracker.announce, other)
        assert str(refused.value) == (
            "the tracker refused: Requested download is not authorized for use with this tracker."
        )
        async with contextlib.AsyncExitStack() as stack:
            # no node holds a key the key file lists (it lists none): node c signs with a key of
            # its own, a and b with keys made at start-up
            # and b registers itself (seed 004, "Automated Registration") once it listens
            nodes: list[RunningProvider] = [
                await stack.enter_async_context(
                    running_provider(
                        url,
                        gisc_name=f"NODE{n}",
                        **node_overrides(net, 2 if n == 2 else None, registry_register_self=n == 1),
                    )
                )
                for n, url in enumerate(dbs)
            ]
            a, b, c = nodes
            status, text = await post_url(session, c, a.oai)
            assert status == 200, text

            async def everywhere() -> bool:
                wanted = sorted([a.oai, b.oai])
                return all([wanted == sorted(await urls_of(session, n)) for n in nodes])

            await eventually(everywhere)
            # found through the tracker only. Each node learnt the nodes that announced before
            # it (the tracker's interval, some 30 minutes, keeps them from asking again soon):
            # the last knows both others, and every pair is linked one way or the other
            links = set()
            for node, url in zip(nodes, dbs, strict=True):
                for peer in await _peers_of(url):
                    assert peer.source == "tracker", peer
                    links.add(frozenset((node.root, peer.url)))
            assert links == {frozenset((x.root, y.root)) for x, y in ((a, b), (a, c), (b, c))}
            assert await _others(session, tracker.announce, info_hash) == {
                node.root for node in nodes
            }
        # the nodes stopped, each told the tracker so (event=stopped): it names none of them
        assert await _others(session, tracker.announce, info_hash) == set()


async def _others(session: aiohttp.ClientSession, tracker: str, info_hash: bytes) -> set[str]:
    """The nodes the tracker names to a newcomer (opentracker names the asker too: left out)."""
    reply = await announce(session, tracker, Announce(info_hash, new_peer_id(), 9))
    assert reply.interval > 0
    return {f"http://{host}:{port}" for host, port in reply.peers if port != 9}


async def _peers_of(database_url: str) -> list[store.Peer]:
    pool = await create_pool(database_url, max_size=1)
    try:
        return await store.all_peers(pool)
    finally:
        await pool.close()


@pytest.mark.parametrize("allowed", [False, True])
async def test_a_loopback_peer_from_a_tracker_is_contacted_only_when_allowed(
    tmp_path: Path, db: Pool, allowed: bool
) -> None:
    net = make_network(tmp_path, 1, open_network=True)
    async with (
        running_opentracker(net.network.info_hash) as tracker,
        canary() as listener,
        aiohttp.ClientSession() as session,
    ):
        net = with_tracker(net, tracker.announce)
        # anyone may announce anything: here, an address on this machine's loopback
        planted = Announce(net.network.info_hash, new_peer_id(), listener.port, "started")
        await announce(session, tracker.announce, planted)
        root = "http://node.example.org:8080"
        config = NodeConfig(
            node_url=root,
            own_base_url=root + "/oai",
            own_set="WIS-GISC-TEST",
            allow_private_peers=allowed,
        )
        # the tracker itself is on loopback: this fetcher may reach it (a test's set-up)
        async with SafeFetcher(allow_private=True, timeout=2, ports=TEST_FETCH_PORTS) as fetcher:
            node = RegistryNode(db, net.network, None, fetcher, config)
            await node.prepare()
            assert await node.announce() == []
            await node.discovery.stop()
        assert await store.all_peers(db) == []
        # refused: no connection at all; allowed: asked for its status (aiohttp tries twice on a
        # connection closed at once), and not taken: the canary is no node
        assert (listener.connections > 0) is allowed


async def test_trackers_are_tried_in_order_and_their_interval_is_honoured(
    tmp_path: Path, db: Pool
) -> None:
    asked: list[tuple[str, str | None]] = []

    async def dead(request: web.Request) -> web.Response:
        asked.append(("dead", request.query.get("event")))
        return web.Response(status=503)

    async def live(request: web.Request) -> web.Response:
        asked.append(("live", request.query.get("event")))
        answer = reply_body(3600, [("192.0.2.1", 8080)])  # interval: one hour
        return web.Response(body=answer, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/dead/announce", dead)
    app.router.add_get("/live/announce", live)
    net = make_network(tmp_path, 1, open_network=True)
    async with (
        serving_app(app) as root,
        SafeFetcher(allow_private=True, timeout=2, ports=TEST_FETCH_PORTS) as fetcher,
    ):
        # BEP 12: one tier of two trackers; the first does not answer
        tier = (f"{root}/dead/announce", f"{root}/live/announce")
        network = dataclasses.replace(net.network, trackers=(tier,))
        discovery = Discovery(network, fetcher, port=8080, fetch_ports=TEST_FETCH_PORTS)
        assert await discovery.announce() == [("192.0.2.1", 8080)]
        assert asked == [("dead", "started"), ("live", "started")]
        assert await discovery.announce() is None  # the interval has not passed: not asked
        assert await discovery.announce(force=True) == [("192.0.2.1", 8080)]
        await discovery.stop()
        # BEP 12: the tracker that answered is asked first from then on
        assert asked[2:] == [("live", None), ("live", "stopped")]


async def test_a_node_is_a_bittorrent_tracker(database_url: str) -> None:
    info_hash = bytes.fromhex("0123456789abcdef0123456789abcdef01234567")
    async with (
        running_provider(database_url, registry_sync_seconds=2.5) as node,
        aiohttp.ClientSession() as session,
    ):
        tracker = node.root + "/registry/announce"
        first = await announce(session, tracker, Announce(info_hash, new_peer_id(), 7001))
        assert first == TrackerReply(3, ())  # its interval: its own sync time, rounded up
        second = await announce(session, tracker, Announce(info_hash, new_peer_id(), 7002))
        assert second.peers == (("127.0.0.1", 7001),)  # compact, the asker left out
        stopped = Announce(info_hash, new_peer_id(), 7001, "stopped")
        assert (await announce(session, tracker, stopped)).peers == ()
        again = await announce(session, tracker, Announce(info_hash, new_peer_id(), 7003))
        assert again.peers == (("127.0.0.1", 7002),)
        # BEP 3: a refusal is a 200 answer with a failure reason
        async with session.get(tracker, params={"info_hash": "short"}) as response:
            assert response.status == 200
            with pytest.raises(TrackerError) as refused:
                parse_reply(await response.read())
        assert str(refused.value) == (
            "the tracker refused: info_hash: 20 bytes, %-escaped, are required"
        )


async def test_two_nodes_of_an_open_network_minting_at_once_converge(
    tmp_path: Path, template_ready: str
) -> None:
    """Fork choice (docs/registry.md): equal work, so the lower tip hash wins on both nodes, and
    the URL of the losing block goes back to its node's pool and is minted again."""
    net = make_network(tmp_path, 1, open_network=True)
    urls = ("https://a.example.org/oai", "https://b.example.org/oai")
    async with (
        fresh_databases(template_ready, 2) as dbs,
        SafeFetcher(timeout=2) as fetcher,
        contextlib.AsyncExitStack() as stack,
    ):
        nodes = await _unstarted_nodes(net, dbs, urls, fetcher, stack)
        first, second = [await node.mint_once() for node in nodes]
        assert first is not None and second is not None and first.signer != second.signer
        minted = [first, second]
        assert {block.previous_hash for block in minted} == {net.network.genesis.hash}
        results = [await nodes[0].accept(second), await nodes[1].accept(first)]
        winner = 0 if first.hash < second.hash else 1
        loser = 1 - winner
        tips = {await store.chain_tip(node.pool) for node in nodes}
        assert tips == {Tip(1, minted[winner].hash)}
        # the node that switched put its URL back in its pool
        assert results[loser].new_tip and results[loser].returned_to_pool == 1
        assert not results[winner].new_tip
        assert await store.url_status(nodes[loser].pool, url_hash(urls[loser])) == "pool"
        again = await nodes[loser].mint_once()
        assert again is not None and again.previous_hash == minted[winner].hash
        await nodes[winner].accept(again)
        for node in nodes:
            assert await store.chain_tip(node.pool) == Tip(2, again.hash)
            listed = [tx.base_url for tx in await store.accepted_urls(node.pool)]
            assert listed == [urls[winner], urls[loser]]


async def test_a_node_that_knows_no_peer_is_sent_the_block_that_beat_its_own(
    tmp_path: Path, template_ready: str
) -> None:
    """Fork choice needs the two tips to meet. The first node of an open network to announce
    learns no peer from the tracker, so it pulls from nobody, and the others' pushes reach it
    only once they know it: a block it lost a tie to, minted before then, must be sent to it by
    a peer that finds its chain behind, or the tie stands for ever (each keeps its own block)."""
    net = make_network(tmp_path, 1, open_network=True)
    urls = ("https://a.example.org/oai", "https://b.example.org/oai")
    async with (
        fresh_databases(template_ready, 2) as dbs,
        SafeFetcher(allow_private=True, timeout=2, ports=TEST_FETCH_PORTS) as fetcher,
        contextlib.AsyncExitStack() as stack,
    ):
        nodes = await _unstarted_nodes(net, dbs, urls, fetcher, stack)
        minted = [await node.mint_once() for node in nodes]  # both before either knows the other
        assert minted[0] is not None and minted[1] is not None
        winner = 0 if minted[0].hash < minted[1].hash else 1
        loser = 1 - winner
        # the loser is served and knows no peer; the winner learns it, finds its tip no better
        # than its own, and would pull nothing
        served = await stack.enter_async_context(
            running_provider(dbs[loser], gisc_name="FIRST", **node_overrides(net, None))
        )
        assert await store.add_peer(nodes[winner].pool, served.root, "tracker")

        async def converged() -> bool:
            await nodes[winner].pull_from(served.root)
            tips = {await store.chain_tip(node.pool) for node in nodes}
            held = [{tx.base_url for tx in await store.accepted_urls(n.pool)} for n in nodes]
            return len(tips) == 1 and held == [set(urls), set(urls)]

        await eventually(converged, seconds=15)
        # the served node switched to the winner's block and minted its own URL again on it
        tip = await store.chain_tip(nodes[loser].pool)
        assert tip is not None and tip.height == 2


async def _unstarted_nodes(
    net: NetworkFiles,
    dbs: list[str],
    urls: tuple[str, ...],
    fetcher: SafeFetcher,
    stack: contextlib.AsyncExitStack,
) -> list[RegistryNode]:
    """A node per database, with a key of its own and no loops running, each holding one of
    ``urls`` in its pool, to mint when the test says."""
    nodes = []
    for n, (url, base_url) in enumerate(zip(dbs, urls, strict=True)):
        pool = await create_pool(url, max_size=2)
        stack.push_async_callback(pool.close)
        root = f"http://node{n}.example.org"
        config = NodeConfig(node_url=root, own_base_url=root + "/oai", own_set="WIS-GISC-T")
        node = RegistryNode(pool, net.network, None, fetcher, config)
        stack.push_async_callback(node.stop)
        await node.prepare()
        assert await store.pool_add_new(node.pool, Transaction.new(base_url))
        nodes.append(node)
    return nodes
