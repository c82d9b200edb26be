"""``wiscat registry ...``: the registry network's key files, this node's peers, a sync now."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from shared.db import registry as registry_store
from shared.registry.chain import load_public_key, public_key_text
from shared.registry.keyfile import (
    KeyFileError,
    Member,
    load_network,
    load_private_key,
    new_network,
    write_private_key,
)
from shared.registry.node import NodeConfig, RegistryNode, node_root
from shared.registry.safe_fetch import SafeFetcher
from shared.settings import Settings


def add_parsers(sub: Any) -> None:
    registry = sub.add_parser(
        "registry", help="the distributed registry of OAI-PMH base URLs (seed 004)"
    ).add_subparsers(dest="registry_command", required=True, metavar="ACTION")
    p = registry.add_parser("keygen", help="make this node's Ed25519 key; prints the public key")
    p.add_argument("--out", type=Path, required=True, metavar="PRIVATE_KEY_FILE")
    p = registry.add_parser(
        "init-network", help="found a network: mine its genesis block, write its key file"
    )
    p.add_argument("name")
    p.add_argument("--difficulty", type=int, default=16, help="proof-of-work bits (default 16)")
    p.add_argument("--out", type=Path, required=True, metavar="KEYFILE")
    p.add_argument(
        "--key",
        type=Path,
        required=True,
        metavar="PRIVATE_KEY_FILE",
        help="the founder's private key (made if the file does not exist)",
    )
    p.add_argument("--tracker", help="a tracker's announce URL (any node's /registry/announce)")
    p.add_argument("--peer", action="append", default=[], help="a static peer's root URL")
    p.add_argument("--member", action="append", default=[], help="another member's public key")
    p = registry.add_parser("add-member", help="list another member's public key in a key file")
    p.add_argument("keyfile", type=Path)
    p.add_argument("public_key")
    p.add_argument("--name", default="")
    p = registry.add_parser("peers", help="the peers this node knows")
    p.add_argument("--json", action="store_true")
    registry.add_parser("sync", help="announce to the tracker and pull from every peer now")
    registry.add_parser("status", help="this node's chain: height, tip, URLs, pool")


async def cmd_keygen(settings: Settings, args: argparse.Namespace) -> int:
    key = Ed25519PrivateKey.generate()
    try:
        write_private_key(args.out, key)
    except FileExistsError:
        print(f"wiscat: {args.out} exists; not overwritten", file=sys.stderr)
        return 1
    print(public_key_text(key.public_key()))
    return 0


async def cmd_init_network(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.key.exists():
            key = load_private_key(args.key)
        else:
            key = Ed25519PrivateKey.generate()
            write_private_key(args.key, key)
        members = []
        for text in args.member:
            load_public_key(text)
            members.append(Member(text))
        network = new_network(
            args.name,
            args.difficulty,
            key,
            tracker=args.tracker,
            peers=tuple(args.peer),
            members=tuple(members),
        )
    except (KeyFileError, ValueError) as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
        return 2
    args.out.write_bytes(network.to_xml())
    print(
        f"network {network.name}: genesis {network.genesis.hash[:16]}..., "
        f"{len(network.members)} member(s); key file {args.out}"
    )
    return 0


async def cmd_add_member(settings: Settings, args: argparse.Namespace) -> int:
    try:
        load_public_key(args.public_key)
        network = load_network(args.keyfile)
    except (KeyFileError, ValueError) as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
        return 2
    args.keyfile.write_bytes(network.with_member(args.public_key, args.name).to_xml())
    print(f"{args.keyfile}: {len(network.with_member(args.public_key).members)} member(s)")
    return 0


async def cmd_peers(settings: Settings, args: argparse.Namespace) -> int:
    from services.cli import migrated_pool

    async with migrated_pool(settings) as pool:
        peers = await registry_store.all_peers(pool)
    if args.json:
        rows = [
            {
                "url": p.url,
                "source": p.source,
                "last_ok_at": p.last_ok_at.isoformat() if p.last_ok_at else None,
                "last_error": p.last_error,
                "failures": p.failures,
            }
            for p in peers
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for p in peers:
        ok = p.last_ok_at.strftime("%Y-%m-%dT%H:%M:%SZ") if p.last_ok_at else "-"
        print(f"{p.url:<40} {p.source:<8} {ok:<20} {p.last_error or ''}")
    return 0


def _network_or_none(settings: Settings) -> Any:
    if settings.registry_key_file is None:
        print("wiscat: set WISCAT_REGISTRY_KEY_FILE to the network's key file", file=sys.stderr)
        return None
    try:
        return load_network(settings.registry_key_file)
    except KeyFileError as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
        return None


async def cmd_sync(settings: Settings, args: argparse.Namespace) -> int:
    from services.cli import migrated_pool

    network = _network_or_none(settings)
    if network is None:
        return 2
    key = (
        load_private_key(settings.registry_private_key_file)
        if settings.registry_private_key_file
        else None
    )
    config = NodeConfig(
        node_url=settings.registry_node_url or node_root(settings.base_url),
        own_base_url=settings.base_url,
        own_set=settings.own_set,
        auto_enable_links=settings.registry_auto_enable_links,
    )
    fetcher = SafeFetcher(
        allow_private=settings.allow_private_fetch,
        timeout=settings.registry_fetch_timeout_seconds,
        ports=settings.registry_fetch_ports,
        ca_file=settings.ca_file,
    )
    async with migrated_pool(settings) as pool, fetcher:
        node = RegistryNode(pool, network, key, fetcher, config)
        await node.prepare()
        accepted = await node.sync_once()
        tip = await registry_store.chain_tip(pool)
    assert tip is not None
    print(f"{accepted} block(s) accepted; the chain is {tip.height} block(s) long")
    return 0


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from services.cli import migrated_pool

    async with migrated_pool(settings) as pool:
        tip = await registry_store.chain_tip(pool)
        urls = await registry_store.accepted_urls(pool)
        waiting = await registry_store.pool_size(pool)
    if tip is None:
        print("no registry chain in this database (the provider starts it from the key file)")
        return 1
    print(f"height {tip.height}, tip {tip.hash[:16]}..., {len(urls)} URL(s), {waiting} waiting")
    return 0


COMMANDS = {
    "registry keygen": cmd_keygen,
    "registry init-network": cmd_init_network,
    "registry add-member": cmd_add_member,
    "registry peers": cmd_peers,
    "registry sync": cmd_sync,
    "registry status": cmd_status,
}
