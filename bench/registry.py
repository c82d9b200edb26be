"""The registry (issue 6): how fast a new URL reaches every node, and what verifying a
long chain costs.

    lines = await registry.run(server_url)   # markdown lines for docs/benchmarks.md

Nodes are real providers on loopback, each on its own database of the one PostgreSQL server, all
in this process; they find each other through a tracker (one more node) as a real network would.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lxml import etree

from tests import pg
from tests.servers import running_provider
from wiscat.shared.registry.chain import (
    Block,
    Transaction,
    make_genesis,
    mine,
    public_key_text,
    verify_chain,
)
from wiscat.shared.registry.keyfile import new_network, write_private_key

PROPAGATION_DIFFICULTY = 12
CHAIN_DIFFICULTY = 8
CHAIN_LENGTH = 10_000


async def _wait(check: object, seconds: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():  # type: ignore[operator]
        if loop.time() > deadline:
            raise RuntimeError("the registry nodes did not converge")
        await asyncio.sleep(0.02)


async def propagation(server_url: str, nodes: int) -> tuple[float, float]:
    """Seconds from ``POST /urls`` at one node until (a) it answers 200, (b) every node lists
    the URL."""
    databases = [await pg.clone_template(server_url) for _ in range(nodes + 1)]
    try:
        with tempfile.TemporaryDirectory() as folder:
            async with contextlib.AsyncExitStack() as stack:
                tracker = await stack.enter_async_context(
                    running_provider(databases[0], gisc_name="TRACKER")
                )
                keys = [Ed25519PrivateKey.generate() for _ in range(nodes)]
                network = new_network(
                    "bench",
                    PROPAGATION_DIFFICULTY,
                    keys[0],
                    tracker=tracker.root + "/registry/announce",
                )
                for key in keys[1:]:
                    network = network.with_member(public_key_text(key.public_key()))
                key_file = Path(folder) / "network.xml"
                key_file.write_bytes(network.to_xml())
                running = []
                for n, (key, url) in enumerate(zip(keys, databases[1:], strict=True)):
                    private = Path(folder) / f"node{n}.pem"
                    write_private_key(private, key)
                    running.append(
                        await stack.enter_async_context(
                            running_provider(
                                url,
                                gisc_name=f"NODE{n}",
                                registry_key_file=key_file,
                                registry_private_key_file=private,
                                allow_private_fetch=True,
                                registry_fetch_ports=range(1024, 65536),
                                registry_sync_seconds=1.0,
                                registry_submit_wait_seconds=0,
                            )
                        )
                    )
                session = await stack.enter_async_context(aiohttp.ClientSession())

                async def peer_count(root: str) -> int:
                    async with session.get(root + "/registry/peers") as response:
                        return len(etree.fromstring(await response.read()))

                async def all_connected() -> bool:
                    counts = [await peer_count(node.root) for node in running]
                    return all(count == nodes - 1 for count in counts)

                await _wait(all_connected)
                submitted = running[-1].oai

                async def everywhere() -> bool:
                    for node in running:
                        async with session.get(node.root + "/urls") as response:
                            if submitted.encode() not in await response.read():
                                return False
                    return True

                started = time.perf_counter()
                async with session.post(
                    running[0].root + "/urls", data={"baseURL": submitted}
                ) as response:
                    assert response.status == 200, await response.text()
                answered = time.perf_counter() - started
                await _wait(everywhere)
                return answered, time.perf_counter() - started
    finally:
        for url in databases:
            await pg.drop_database(server_url, url)


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


async def run(server_url: str) -> list[str]:
    """The registry's section of the benchmark report, as markdown lines."""
    await pg.build_template(server_url)
    rows = []
    for nodes in (3, 10):
        answered, everywhere = await propagation(server_url, nodes)
        rows.append(f"| {nodes} | {answered * 1000:.0f} ms | {everywhere * 1000:.0f} ms |")
    minted, verified = await asyncio.to_thread(chain_verification)
    return [
        "## Registry: propagating a URL, verifying a chain",
        "",
        f"Registry nodes on loopback (proof of work {PROPAGATION_DIFFICULTY} bits), found through "
        "a tracker; a URL is posted at one node (its Identify is fetched, the block mined, "
        "signed and pushed to the peers).",
        "",
        "| nodes | `POST /urls` answered | listed by every node |",
        "|---|---|---|",
        *rows,
        "",
        f"A chain of {CHAIN_LENGTH:,} blocks (one URL each, {CHAIN_DIFFICULTY}-bit proof of "
        f"work): verified back to its genesis block (hashes, proofs of work, Ed25519 "
        f"signatures, links, no URL twice) in **{verified:.2f} s** "
        f"({verified / CHAIN_LENGTH * 1e6:.0f} µs a block); minting it took {minted:.1f} s.",
        "",
    ]
