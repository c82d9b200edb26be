"""``wiscat registry ...``: the registry network's key files, this node's peers, a sync now.

The HTTP client and the registry node are imported by the two commands that use them: every
``wiscat`` command imports this module, and needs neither (``cli/app.py`` says why).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wiscat.cli.arguments import command, group
from wiscat.cli.database import migrated_pool
from wiscat.cli.output import table, when
from wiscat.shared.db import registry as registry_store
from wiscat.shared.registry.chain import load_public_key, public_key_text
from wiscat.shared.registry.keyfile import (
    KeyFileError,
    Member,
    Network,
    is_metainfo,
    load_network,
    load_private_key,
    new_network,
    parse_network,
    write_private_key,
)
from wiscat.shared.settings import Settings
from wiscat.shared.urls import node_root


def add_parsers(sub: Any) -> None:
    registry = group(
        sub,
        "registry",
        help="the distributed registry of OAI-PMH base URLs",
        examples=[
            "wiscat registry keygen --out node.key",
            "wiscat registry init-network wis --key node.key --out wis.torrent",
            "wiscat registry status",
        ],
    )
    p = command(
        registry,
        "keygen",
        help="make this node's Ed25519 key; prints the public key",
        handler=cmd_keygen,
        examples=["wiscat registry keygen --out node.key"],
        exits={0: "the key was written", 1: "the file exists; not overwritten"},
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="PRIVATE_KEY_FILE",
        help="where to write the private key (never overwritten)",
    )
    p = command(
        registry,
        "init-network",
        help="found a network: mine its genesis block, write its key file (a BitTorrent metainfo)",
        handler=cmd_init_network,
        examples=[
            "wiscat registry init-network wis --key node.key --out wis.torrent "
            "--tracker https://gisc.example.org/registry/announce",
            "wiscat registry init-network wis-open --open --key node.key --out wis-open.torrent "
            "--tracker http://tracker.example.org:6969/announce",
        ],
        exits={0: "the key file was written", 2: "a key or public key cannot be used"},
    )
    p.add_argument("name", help="the network's name")
    p.add_argument("--difficulty", type=int, default=16, help="proof-of-work bits (default 16)")
    p.add_argument(
        "--out", type=Path, required=True, metavar="KEYFILE", help="where to write the key file"
    )
    p.add_argument(
        "--key",
        type=Path,
        required=True,
        metavar="PRIVATE_KEY_FILE",
        help="the founder's private key (made if the file does not exist)",
    )
    p.add_argument(
        "--tracker",
        action="append",
        default=[],
        help="an HTTP BitTorrent tracker's announce URL, or any node's /registry/announce "
        "(repeat: one tier each, tried in order, BEP 12)",
    )
    p.add_argument("--peer", action="append", default=[], help="a static peer's root URL")
    p.add_argument("--member", action="append", default=[], help="another member's public key")
    p.add_argument(
        "--open",
        action="store_true",
        help="an open network: no members, any node may make blocks (the proof of work limits "
        "them)",
    )
    p.add_argument("--xml", action="store_true", help="write the XML form of old instead")
    p = command(
        registry,
        "convert",
        help="rewrite a key file in the other form (metainfo <-> XML); the info_hash stays",
        handler=cmd_convert,
        examples=["wiscat registry convert wis.network --out wis.torrent"],
        exits={0: "written", 1: "the output file exists", 2: "the key file cannot be used"},
    )
    p.add_argument("keyfile", type=Path, help="the key file to read (either form)")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="KEYFILE",
        help="where to write the converted file",
    )
    p.add_argument(
        "--to",
        choices=("metainfo", "xml"),
        default=None,
        help="the form to write (default: the other one)",
    )
    p = command(
        registry,
        "add-member",
        help="list another member's public key in a key file",
        handler=cmd_add_member,
        examples=['wiscat registry add-member wis.network "$(cat tokyo.pub)" --name tokyo'],
        exits={0: "the key file was rewritten", 2: "the key file or public key cannot be used"},
    )
    p.add_argument("keyfile", type=Path, help="the network's key file")
    p.add_argument("public_key", help="the member's public key, as keygen prints it")
    p.add_argument("--name", default="", help="the member's name, for people (default: none)")
    p = command(
        registry,
        "peers",
        help="the peers this node knows",
        handler=cmd_peers,
        examples=["wiscat registry peers", "wiscat registry peers --json"],
        exits={0: "listed (none is not an error)"},
    )
    p.add_argument("--json", action="store_true", help="the peers as a JSON list")
    command(
        registry,
        "sync",
        help="announce to the tracker and pull from every peer now",
        handler=cmd_sync,
        examples=["WISCAT_REGISTRY_KEY_FILE=wis.network wiscat registry sync"],
        exits={0: "synchronised", 2: "WISCAT_REGISTRY_KEY_FILE is unset or cannot be used"},
    )
    command(
        registry,
        "announce-self",
        help="submit this node's own BASE_URL to the network, at this node's POST /urls",
        handler=cmd_announce_self,
        examples=["wiscat registry announce-self"],
        exits={0: "accepted, or in the registry already", 1: "refused (the node says why)"},
    )
    command(
        registry,
        "status",
        help="this node's chain: height, tip, URLs, pool",
        handler=cmd_status,
        examples=["wiscat registry status"],
        exits={0: "shown", 1: "no registry chain in this database"},
    )


async def cmd_keygen(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry keygen``: make this node's Ed25519 key; prints the public key."""
    key = Ed25519PrivateKey.generate()
    try:
        write_private_key(args.out, key)
    except FileExistsError:
        print(f"wiscat: {args.out} exists; not overwritten", file=sys.stderr)
        return 1
    print(public_key_text(key.public_key()))
    return 0


async def cmd_init_network(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry init-network``: found a network: mine its genesis block, write its key file
    (a BitTorrent metainfo)."""
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
            trackers=tuple((url,) for url in args.tracker),
            peers=tuple(args.peer),
            members=tuple(members),
            open_network=args.open,
        )
    except (KeyFileError, ValueError) as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
        return 2
    args.out.write_bytes(network.to_xml() if args.xml else network.to_metainfo())
    print(f"network {network.name}: {_describe(network)}; key file {args.out}")
    return 0


def _describe(network: Network) -> str:
    kind = "open" if network.is_open else f"closed, {len(network.members)} member(s)"
    return f"info_hash {network.info_hash.hex()}, genesis {network.genesis.hash[:16]}..., {kind}"


async def cmd_convert(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry convert``: rewrite a key file in the other form (metainfo <-> XML); the
    info_hash stays."""
    try:
        body = args.keyfile.read_bytes()
        network = parse_network(body)
    except OSError as exc:
        print(f"wiscat: cannot read {args.keyfile}: {exc}", file=sys.stderr)
        return 2
    except KeyFileError as exc:
        print(f"wiscat: {args.keyfile}: {exc}", file=sys.stderr)
        return 2
    to = args.to or ("xml" if is_metainfo(body) else "metainfo")
    try:
        with args.out.open("xb") as out:
            out.write(network.to_xml() if to == "xml" else network.to_metainfo())
    except FileExistsError:
        print(f"wiscat: {args.out} exists; not overwritten", file=sys.stderr)
        return 1
    print(f"{args.out}: the {to} form of network {network.name}, {_describe(network)}")
    return 0


async def cmd_add_member(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry add-member``: list another member's public key in a key file."""
    try:
        load_public_key(args.public_key)
        network = load_network(args.keyfile)
    except (KeyFileError, ValueError) as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
        return 2
    if network.is_open:
        print(
            f"wiscat: {args.keyfile} is an open network: listing a member would close it "
            "(found a closed network instead)",
            file=sys.stderr,
        )
        return 2
    changed = network.with_member(args.public_key, args.name)
    metainfo = is_metainfo(args.keyfile.read_bytes())
    args.keyfile.write_bytes(changed.to_metainfo() if metainfo else changed.to_xml())
    print(
        f"{args.keyfile}: {len(changed.members)} member(s); the new info_hash is "
        f"{changed.info_hash.hex()}: give every node the new key file"
    )
    return 0


async def cmd_peers(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry peers``: the peers this node knows."""
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
    if not peers:
        print("no peers")
        return 0
    lines = table(
        ["URL", "SOURCE", "LAST OK", "LAST ERROR"],
        [[p.url, p.source, when(p.last_ok_at), p.last_error or ""] for p in peers],
    )
    print("\n".join(lines))
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
    """``wiscat registry sync``: announce to the tracker and pull from every peer now."""
    from wiscat.shared.registry.safe_fetch import SafeFetcher
    from wiscat.shared.registry_node import NodeConfig, RegistryNode

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


async def cmd_announce_self(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry announce-self``: submit this node's own BASE_URL to the network, at this
    node's POST /urls."""
    import aiohttp

    root = settings.registry_node_url or node_root(settings.base_url)
    timeout = aiohttp.ClientTimeout(total=settings.registry_fetch_timeout_seconds + 30)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(root.rstrip("/") + "/urls", data={"baseURL": settings.base_url}) as reply,
        ):
            answer = (await reply.text()).strip()
    except (aiohttp.ClientError, TimeoutError) as exc:
        print(f"wiscat: this node's {root}/urls cannot be reached: {exc}", file=sys.stderr)
        return 1
    if reply.status == 409:
        print(f"{settings.base_url} is in the registry already")
        return 0
    if reply.status != 200:
        print(
            f"wiscat: {settings.base_url} refused (HTTP {reply.status}): {answer}", file=sys.stderr
        )
        return 1
    print(answer)
    return 0


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat registry status``: this node's chain: height, tip, URLs, pool."""
    async with migrated_pool(settings) as pool:
        tip = await registry_store.chain_tip(pool)
        urls = await registry_store.accepted_urls(pool)
        waiting = await registry_store.pool_size(pool)
    if settings.registry_key_file is not None:
        try:
            network = load_network(settings.registry_key_file)
        except KeyFileError as exc:
            print(f"wiscat: {exc}", file=sys.stderr)
        else:
            print(f"network {network.name}: {_describe(network)}")
    if tip is None:
        print("no registry chain in this database (the provider starts it from the key file)")
        return 1
    print(f"height {tip.height}, tip {tip.hash[:16]}..., {len(urls)} URL(s), {waiting} waiting")
    return 0
