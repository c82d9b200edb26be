"""The network key file (docs/registry.md: "the key for discovery ... contains information about
how to find other interested nodes" and "also contains the first block").

One XML file a network's members share::

    <registry-network name="wis-registry" difficulty="16">
      <tracker>https://gisc.example.org/registry/announce</tracker>
      <peers>
        <peer>https://other-gisc.example.org</peer>
      </peers>
      <members>
        <member name="OFFENBACH">base64 Ed25519 public key</member>
      </members>
      <genesis><block>...</block></genesis>
    </registry-network>

A peer URL is a node's root (``/urls`` and ``/registry/...`` hang below it); the tracker URL is
any node's ``/registry/announce``. The node's own private key is kept apart from this file
(``WISCAT_REGISTRY_PRIVATE_KEY_FILE``, PEM): the key file is public, the private key is not.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)
from lxml import etree

from wiscat.shared.registry.chain import (
    MAX_DIFFICULTY,
    Block,
    ChainError,
    block_from_element,
    load_public_key,
    make_genesis,
    parse_xml,
    public_key_text,
    url_problem,
    utc_stamp,
)

NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class KeyFileError(ValueError):
    """A key file (or private key file) that cannot be used, with the reason."""


@dataclass(frozen=True)
class Member:
    public_key: str
    name: str = ""


@dataclass(frozen=True)
class Network:
    """What a key file says about a network."""

    name: str
    difficulty: int
    genesis: Block
    tracker: str | None = None
    peers: tuple[str, ...] = ()
    members: tuple[Member, ...] = field(default=())

    @property
    def member_keys(self) -> frozenset[str]:
        return frozenset(member.public_key for member in self.members)

    def with_member(self, public_key: str, name: str = "") -> Network:
        kept = tuple(m for m in self.members if m.public_key != public_key)
        return replace(self, members=(*kept, Member(public_key, name)))

    def to_xml(self) -> bytes:
        root = etree.Element("registry-network", name=self.name, difficulty=str(self.difficulty))
        if self.tracker:
            etree.SubElement(root, "tracker").text = self.tracker
        peers = etree.SubElement(root, "peers")
        for url in self.peers:
            etree.SubElement(peers, "peer").text = url
        members = etree.SubElement(root, "members")
        for member in self.members:
            element = etree.SubElement(members, "member")
            if member.name:
                element.set("name", member.name)
            element.text = member.public_key
        etree.SubElement(root, "genesis").append(self.genesis.element())
        return etree.tostring(root, encoding="utf-8", xml_declaration=True, pretty_print=True)


def _url(value: str, what: str) -> str:
    problem = url_problem(value)
    if problem:
        raise KeyFileError(f"{what} {value!r}: {problem}")
    return value


def parse_network(body: bytes) -> Network:
    """Read and check a key file's content; :class:`KeyFileError` says what is wrong."""
    try:
        root = parse_xml(body)
    except ChainError as exc:
        raise KeyFileError(f"not a key file: {exc}") from exc
    if root.tag != "registry-network":
        raise KeyFileError(f"not a key file: the root is <{root.tag}>, not <registry-network>")
    name = root.get("name") or ""
    if not NETWORK_NAME.fullmatch(name):
        raise KeyFileError(f"network name {name!r}: letters, digits, '.', '_', '-' (at most 64)")
    try:
        difficulty = int(root.get("difficulty") or "")
    except ValueError as exc:
        raise KeyFileError("difficulty is not a number") from exc
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise KeyFileError(f"difficulty must be 0 to {MAX_DIFFICULTY}")
    tracker = root.findtext("tracker")
    peers = tuple(_url(p.text or "", "peer") for p in root.iterfind("peers/peer"))
    members = []
    for element in root.iterfind("members/member"):
        key = (element.text or "").strip()
        try:
            load_public_key(key)
        except ValueError as exc:
            raise KeyFileError(f"member {key!r} is not an Ed25519 public key") from exc
        members.append(Member(key, element.get("name", "")))
    holder = root.find("genesis/block")
    if holder is None:
        raise KeyFileError("the key file has no genesis block")
    try:
        genesis = block_from_element(holder)
        genesis.check(difficulty, frozenset(), genesis=True)
    except ChainError as exc:
        raise KeyFileError(f"the genesis block is not valid: {exc}") from exc
    if genesis.transactions:
        raise KeyFileError("the genesis block holds no transaction")
    return Network(
        name=name,
        difficulty=difficulty,
        genesis=genesis,
        tracker=_url(tracker, "tracker") if tracker else None,
        peers=peers,
        members=tuple(members),
    )


def load_network(path: Path) -> Network:
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read the key file {path}: {exc}") from exc
    try:
        return parse_network(body)
    except KeyFileError as exc:
        raise KeyFileError(f"{path}: {exc}") from exc


def new_network(
    name: str,
    difficulty: int,
    key: Ed25519PrivateKey,
    *,
    tracker: str | None = None,
    peers: tuple[str, ...] = (),
    members: tuple[Member, ...] = (),
) -> Network:
    """A new network: its genesis block mined and signed by ``key``, whose owner is a member."""
    if not NETWORK_NAME.fullmatch(name):
        raise KeyFileError(f"network name {name!r}: letters, digits, '.', '_', '-' (at most 64)")
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise KeyFileError(f"difficulty must be 0 to {MAX_DIFFICULTY}")
    network = Network(
        name=name,
        difficulty=difficulty,
        genesis=make_genesis(difficulty, key, f"{name} {utc_stamp()} {secrets.token_hex(16)}"),
        tracker=_url(tracker, "tracker") if tracker else None,
        peers=tuple(_url(p, "peer") for p in peers),
        members=members,
    )
    return network.with_member(public_key_text(key.public_key()), "founder")


def write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Write ``key`` as unencrypted PKCS#8 PEM, readable by its owner only."""
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyFileError(f"cannot read the private key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is not an Ed25519 private key")
    return key
