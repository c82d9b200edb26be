"""A registry network on loopback for the tests: key files, member nodes (real providers, each on
its own fresh database) and the HTTP calls a user makes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lxml import etree

from tests.support import pg
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.registry.chain import public_key_text
from wiscat.shared.registry.keyfile import Network, new_network, write_private_key

DIFFICULTY = 4
SYNC_SECONDS = 0.3
# the nodes and peers of a test listen on ports the system picks: the registry of a test node
# fetches from any unprivileged one (a node's default is 80, 443, 8080 and 8443)
TEST_FETCH_PORTS = tuple(range(1024, 65536))


@dataclass
class NetworkFiles:
    network: Network
    key_file: Path
    keys: list[Ed25519PrivateKey]
    key_files: list[Path]


# RELIABILITY S02: the literal ways of writing a loopback, private or otherwise local address
S02_HOSTS = (
    "localhost",
    "[::1]",
    "0.0.0.0",
    "127.1",
    "0x7f.1",
    "0177.0.0.1",
    "2130706433",
    "[::ffff:127.0.0.1]",
    "[::127.0.0.1]",
    "[64:ff9b::7f00:1]",
    "[2002:7f00:1::1]",
    "169.254.169.254",
    "100.64.0.1",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.0.1",
    "[fc00::1]",
    "[fe80::1]",
    "224.0.0.1",
)


def make_network(
    folder: Path,
    members: int,
    *,
    tracker: str | None = None,
    peers: tuple[str, ...] = (),
    open_network: bool = False,
) -> NetworkFiles:
    """A network of ``members`` member keys (the first founds it), written under ``folder`` as a
    metainfo key file; ``open_network``: the keys are made, but the key file lists none."""
    keys = [Ed25519PrivateKey.generate() for _ in range(members)]
    network = new_network(
        "wis-test", DIFFICULTY, keys[0], tracker=tracker, peers=peers, open_network=open_network
    )
    for n, key in enumerate([] if open_network else keys[1:], start=2):
        network = network.with_member(public_key_text(key.public_key()), f"NODE{n}")
    key_file = folder / "network.torrent"
    key_file.write_bytes(network.to_metainfo())
    key_files = []
    for n, key in enumerate(keys, start=1):
        path = folder / f"node{n}.pem"
        write_private_key(path, key)
        key_files.append(path)
    return NetworkFiles(network, key_file, keys, key_files)


@contextlib.asynccontextmanager
async def fresh_databases(server_url: str, count: int) -> AsyncIterator[list[str]]:
    urls = [await pg.clone_template(server_url) for _ in range(count)]
    try:
        yield urls
    finally:
        for url in urls:
            await pg.drop_database(server_url, url)


def node_overrides(net: NetworkFiles, member: int | None, **extra: object) -> dict[str, object]:
    values: dict[str, object] = {
        "registry_key_file": net.key_file,
        "registry_private_key_file": net.key_files[member] if member is not None else None,
        "allow_private_fetch": True,
        # the nodes of a test are all on loopback: taken from a tracker only when allowed
        "registry_allow_private_peers": True,
        "registry_fetch_ports": TEST_FETCH_PORTS,
        "registry_sync_seconds": SYNC_SECONDS,
        "registry_submit_wait_seconds": 5.0,
        "registry_fetch_timeout_seconds": 5.0,
    }
    values.update(extra)
    return values


@contextlib.asynccontextmanager
async def member_nodes(
    net: NetworkFiles, database_urls: list[str], **extra: object
) -> AsyncIterator[list[RunningProvider]]:
    """One provider per database, node ``n`` holding member key ``n``."""
    async with contextlib.AsyncExitStack() as stack:
        nodes = [
            await stack.enter_async_context(
                running_provider(url, gisc_name=f"NODE{n + 1}", **node_overrides(net, n, **extra))
            )
            for n, url in enumerate(database_urls)
        ]
        yield nodes


async def urls_of(session: aiohttp.ClientSession, node: RunningProvider) -> list[str]:
    async with session.get(node.root + "/urls") as response:
        assert response.status == 200, await response.text()
        root = etree.fromstring(await response.read())
    assert root.tag == "BaseURLs"
    return [element.text or "" for element in root]


async def status_of(session: aiohttp.ClientSession, node: RunningProvider) -> tuple[int, str]:
    async with session.get(node.root + "/registry/status") as response:
        assert response.status == 200
        root = etree.fromstring(await response.read())
    return int(root.get("height", "")), root.get("tip", "")


async def post_url(
    session: aiohttp.ClientSession, node: RunningProvider, url: str
) -> tuple[int, str]:
    async with session.post(node.root + "/urls", data={"baseURL": url}) as response:
        return response.status, await response.text()


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 30.0) -> None:
    """Wait until ``check()`` is true (the nodes sync in the background)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        if loop.time() > deadline:
            raise AssertionError("the nodes did not converge in time")
        await asyncio.sleep(0.1)


@dataclass
class Canary:
    """Listens on one port of a loopback address (127.0.0.1 and ::1 where there is IPv6, or
    another), counting the connections it accepts and closes."""

    port: int = 0
    connections: int = 0
    servers: list[asyncio.Server] = field(default_factory=list)


@contextlib.asynccontextmanager
async def canary(port: int = 0, host: str = "127.0.0.1") -> AsyncIterator[Canary]:
    """A :class:`Canary` on ``port`` (0: one the system picks) of ``host``; on 127.0.0.1, on
    ::1 too. (For a parser that blocks the event loop, tests/support/canary.py counts in a
    thread.)"""
    found = Canary()

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.connections += 1
        writer.close()

    first = await asyncio.start_server(count, host, port)
    found.servers.append(first)
    found.port = first.sockets[0].getsockname()[1]
    if host == "127.0.0.1":
        with contextlib.suppress(OSError):  # no IPv6 loopback here, or the port is taken on it
            found.servers.append(await asyncio.start_server(count, "::1", found.port))
    try:
        yield found
    finally:
        for server in found.servers:
            server.close()
            await server.wait_closed()


class CountingResolver(AbstractResolver):
    """Maps names to addresses as told, counting the queries it is asked."""

    def __init__(self, names: dict[str, str] | None = None) -> None:
        self.names = names or {}
        self.queries: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.queries.append(host)
        if host not in self.names:
            raise OSError(socket.EAI_NONAME, f"{host}: Name or service not known")
        address = self.names[host]
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        pass
