"""The registry (issue 30): how fast a new URL reaches 10 nodes that found each other through a
BitTorrent tracker, and what verifying a long chain costs.

    lines = await registry.run(server_url)   # markdown lines for docs/benchmarks.md

The tracker is Debian's opentracker on loopback, in its whitelist mode (the network's info_hash
in its access list), as the tests run it (tests/support/opentracker.py). The nodes are real
providers on
loopback, each on its own database of the one PostgreSQL server, all in this process, in an open
network (the key file lists no members: each node signs with a key made at start-up). None has a
static peer: the key file names the tracker and nothing else, so each node knows the others only
from the tracker's answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lxml import etree

from bench.measure import machine
from tests.support import pg
from tests.support.opentracker import announce, running_opentracker
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.registry.chain import (
    Block,
    Transaction,
    make_genesis,
    mine,
    public_key_text,
    verify_chain,
)
from wiscat.shared.registry.keyfile import new_network
from wiscat.shared.registry.tracker import Announce, new_peer_id

PROPAGATION_DIFFICULTY = 12
PROPAGATION_NODES = 10
REPETITIONS = 5  # URLs posted at each of the two origins
SYNC_SECONDS = 1.0  # every node's WISCAT_REGISTRY_SYNC_SECONDS (default 60)
CHAIN_DIFFICULTY = 8
CHAIN_LENGTH = 10_000
POLL_SECONDS = 0.05


@dataclasses.dataclass
class Propagation:
    tracker_interval: int  # seconds, as opentracker answers
    connect_seconds: float  # from the first node's start until every pair of nodes is linked
    links: int  # peer entries in all (a node knows those that announced before it)
    first_peers: int  # the peers of the node that announced first
    last_peers: int  # and of the one that announced last
    answered: dict[str, list[float]]  # origin: seconds until POST /urls answered, each URL
    everywhere: dict[str, list[float]]  # origin: seconds until every node lists the URL


async def _wait(check: Callable[[], Awaitable[bool]], seconds: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        if loop.time() > deadline:
            raise RuntimeError("the registry nodes did not converge")
        await asyncio.sleep(POLL_SECONDS)


async def propagation(server_url: str, nodes: int = PROPAGATION_NODES) -> Propagation:
    """``nodes`` nodes find each other through opentracker; then URLs are posted, in turn at
    the node that announced first (the tracker named it no other: its block reaches the others
    when they pull from it, every ``SYNC_SECONDS``) and at the one that announced last (it knows
    every other: it pushes its block to them), each timed until every node lists it."""
    databases = [await pg.clone_template(server_url) for _ in range(nodes)]
    try:
        with tempfile.TemporaryDirectory() as folder:
            network = new_network(
                "bench", PROPAGATION_DIFFICULTY, Ed25519PrivateKey.generate(), open_network=True
            )
            async with contextlib.AsyncExitStack() as stack:
                tracker = await stack.enter_async_context(running_opentracker(network.info_hash))
                # the trackers are outside the metainfo's info: the info_hash is the same
                network = dataclasses.replace(network, trackers=((tracker.announce,),))
                key_file = Path(folder) / "network.torrent"
                key_file.write_bytes(network.to_metainfo())
                session = await stack.enter_async_context(aiohttp.ClientSession())
                started = time.perf_counter()
                running = [
                    await stack.enter_async_context(
                        running_provider(
                            url,
                            gisc_name=f"NODE{n}",
                            registry_key_file=key_file,
                            allow_private_fetch=True,
                            # the nodes are on loopback: taken from the tracker only when allowed
                            registry_allow_private_peers=True,
                            registry_fetch_ports=range(1024, 65536),
                            registry_sync_seconds=SYNC_SECONDS,
                            registry_submit_wait_seconds=0,
                        )
                    )
                    for n, url in enumerate(databases)
                ]
                await _wait(lambda: _all_linked(session, running))
                connected = time.perf_counter() - started
                known = [len(await _peers(session, node)) for node in running]
                probe = Announce(network.info_hash, new_peer_id(), 1, "stopped")
                interval = (await announce(session, tracker.announce, probe)).interval
                first, last = running[0], running[-1]
                answered: dict[str, list[float]] = {"first": [], "last": []}
                everywhere: dict[str, list[float]] = {"first": [], "last": []}
                urls = [node.oai for node in running]
                for n in range(min(2 * REPETITIONS, len(urls))):
                    origin, name = (first, "first") if n % 2 == 0 else (last, "last")
                    url = urls[(n + 1) % len(urls)]  # never the origin's own
                    started = time.perf_counter()
                    async with session.post(origin.root + "/urls", data={"baseURL": url}) as r:
                        if r.status != 200:
                            raise RuntimeError(f"POST /urls: {r.status} {await r.text()}")
                    answered[name].append(time.perf_counter() - started)
                    await _wait(_listed_everywhere(session, running, url))
                    everywhere[name].append(time.perf_counter() - started)
                    await asyncio.sleep(0.5)  # the last pushes settle; the next post in between
                return Propagation(
                    interval, connected, sum(known), known[0], known[-1], answered, everywhere
                )
    finally:
        for url in databases:
            await pg.drop_database(server_url, url)


async def _peers(session: aiohttp.ClientSession, node: RunningProvider) -> set[str]:
    async with session.get(node.root + "/registry/peers") as response:
        if response.status != 200:
            raise RuntimeError(f"GET /registry/peers: {response.status}")
        return {peer.text or "" for peer in etree.fromstring(await response.read())}


async def _all_linked(session: aiohttp.ClientSession, nodes: list[RunningProvider]) -> bool:
    """Every pair of nodes linked one way or the other (a node knows those the tracker named
    when it announced: the ones that announced before it)."""
    links = set()
    for node in nodes:
        links |= {frozenset((node.root, peer)) for peer in await _peers(session, node)}
    roots = [node.root for node in nodes]
    return all(frozenset((a, b)) in links for a in roots for b in roots if a < b)


def _listed_everywhere(
    session: aiohttp.ClientSession, nodes: list[RunningProvider], url: str
) -> Callable[[], Awaitable[bool]]:
    """A check: does every node list ``url`` yet? A node seen listing it is not asked again
    (a URL stays), so the polling costs the nodes less as the URL spreads."""
    pending = list(nodes)

    async def listed(node: RunningProvider) -> bool:
        async with session.get(node.root + "/urls") as response:
            root = etree.fromstring(await response.read())
        return url in {element.text for element in root}

    async def check() -> bool:
        found = await asyncio.gather(*(listed(node) for node in pending))
        pending[:] = [node for node, yes in zip(pending, found, strict=True) if not yes]
        return not pending

    return check


def chain_verification(length: int = CHAIN_LENGTH) -> tuple[float, float]:
    """Seconds to mine and sign ``length`` blocks of one URL each, and to verify them back to
    the genesis block (hashes, proofs of work, signatures, links, no URL twice)."""
    key = Ed25519PrivateKey.generate()
    members = frozenset({public_key_text(key.public_key())})
    genesis = make_genesis(CHAIN_DIFFICULTY, key)
    blocks: list[Block] = []
    previous = genesis.hash
    started = time.perf_counter()
    for n in range(length):
        tx = Transaction.new(f"https://repository-{n}.example.org/oai")
        block = mine(previous, [tx], CHAIN_DIFFICULTY, key)
        blocks.append(block)
        previous = block.hash
    minted = time.perf_counter() - started
    started = time.perf_counter()
    verify_chain(genesis, blocks, CHAIN_DIFFICULTY, members)
    return minted, time.perf_counter() - started


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.0f} ms median, {max(seconds) * 1000:.0f} ms max"


async def run(server_url: str) -> list[str]:
    """The registry's section of the benchmark report, as markdown lines."""
    await pg.build_template(server_url)
    load_before = os.getloadavg()[0]
    began = datetime.now(UTC)
    result = await propagation(server_url)
    minted, verified = await asyncio.to_thread(chain_verification)
    load_after = os.getloadavg()[0]
    rows = [
        f"| {label} | {len(result.everywhere[name])} | {_ms(result.answered[name])} "
        f"| **{_ms(result.everywhere[name])}** |"
        for name, label in (
            ("first", f"the node that announced first (it knows {result.first_peers} peers)"),
            ("last", f"the node that announced last (it knows {result.last_peers} peers)"),
        )
    ]
    return [
        "## Registry: propagating a URL, verifying a chain",
        "",
        f"{began:%Y-%m-%d %H:%M} UTC, {machine()}, `python -m bench.run --only registry`; "
        f"load average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the end"
        + (
            f" (over {os.cpu_count()}, the number of cores: other work shared the machine)."
            if max(load_before, load_after) > (os.cpu_count() or 1)
            else "."
        ),
        "",
        f"{PROPAGATION_NODES} registry nodes on loopback, one process, each on its own "
        f"database, in an open network (proof of work {PROPAGATION_DIFFICULTY} bits), with no "
        "static peer: the key file (BitTorrent metainfo) names one tracker, Debian's "
        "opentracker on loopback in its whitelist mode with the network's info_hash in its "
        "access list, and the nodes find each other only through its answers (HTTP announce, "
        "compact peer lists). The nodes start one after the other; each announces at start "
        f"(`event=started`) and learns the nodes that announced before it. opentracker asks "
        f"for the next announce in {result.tracker_interval} s (its `interval`, some 30 minutes, "
        "honoured), so "
        "within a run no node announces again: the node that announced first knew "
        f"{result.first_peers} peers once all were linked, the last "
        f"{result.last_peers}. Every node syncs (asks each of its peers for its "
        f"status, pulls what it lacks) {SYNC_SECONDS:g} s after its last sync ended "
        "(`WISCAT_REGISTRY_SYNC_SECONDS`; the default is 60), and pushes a "
        "block it mints or pulls to its peers. From the first node's start until every pair of "
        f"nodes was linked one way or the other ({result.links} links): "
        f"{result.connect_seconds:.1f} s.",
        "",
        "A URL (another node's OAI-PMH base URL) is posted at one node: `POST /urls` fetches "
        "its Identify and answers, the node mines and signs a block, and the URL is timed "
        "until every node lists it in `GET /urls` (polled every "
        f"{POLL_SECONDS * 1000:.0f} ms). Posts alternate between the two origins.",
        "",
        f"| posted at | URLs | `POST /urls` answered | listed by all {PROPAGATION_NODES} nodes |",
        "|---|---|---|---|",
        *rows,
        "",
        "Posted at the first node, a URL reaches the others when one of them pulls from it "
        f"(each syncs {SYNC_SECONDS:g} s after its last sync ended), then by that node's push "
        "and the others' pulls: "
        "the time follows the sync interval (with the default 60 s, up to about a minute). "
        "Posted at the last node, it is pushed to all at once.",
        "",
        f"A chain of {CHAIN_LENGTH:,} blocks (one URL each, {CHAIN_DIFFICULTY}-bit proof of "
        f"work): verified back to its genesis block (hashes, proofs of work, Ed25519 "
        f"signatures, links, no URL twice) in **{verified:.2f} s** "
        f"({verified / CHAIN_LENGTH * 1e6:.0f} µs a block); minting it took {minted:.1f} s.",
        "",
    ]
