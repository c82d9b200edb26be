"""The network key file (docs/registry.md: "the key for discovery ... contains information about
how to find other interested nodes" and "also contains the first block").

Two forms are read, one network either way:

- the BitTorrent metainfo file (bencoded, BEP 3 and BEP 12), which ``wiscat registry
  init-network`` writes: :meth:`Network.to_metainfo`, :func:`parse_metainfo`. The network's
  identity is its ``info_hash``;
- the XML form below, wiscat's first, still read so that running networks keep working; ``wiscat
  registry convert`` turns one into the other (the info_hash stays the same: it is computed from
  the same ``info`` either way, :meth:`Network.info`).

The XML form::

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

A peer URL is a node's root (``/urls`` and ``/registry/...`` hang below it); a tracker URL is an
HTTP BitTorrent tracker's announce URL, or any wiscat node's ``/registry/announce``. A network
that lists no member is open: any node may make blocks (seed 004: "open for external
contributions by design"); with members, only they may. The node's own private key is kept apart
from this file (``WISCAT_REGISTRY_PRIVATE_KEY_FILE``, PEM): the key file is public, the private
key is not.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)
from lxml import etree

from wiscat.shared.registry.bencode import BencodeError, Value, decode, encode
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
# BEP 3: "piece length ... almost always a power of two"; the one piece is the genesis block's XML
PIECE_LENGTH = 1 << 16
MAX_KEY_FILE_BYTES = 4 * 1024 * 1024


class KeyFileError(ValueError):
    """A key file (or private key file) that cannot be used, with the reason."""


@dataclass(frozen=True)
class Member:
    """A node allowed to mint blocks, by its public key."""

    public_key: str
    name: str = ""


@dataclass(frozen=True)
class Network:
    """What a key file says about a network."""

    name: str
    difficulty: int
    genesis: Block
    trackers: tuple[tuple[str, ...], ...] = ()  # BEP 12 tiers, in order
    peers: tuple[str, ...] = ()
    members: tuple[Member, ...] = field(default=())

    @property
    def member_keys(self) -> frozenset[str]:
        """The public keys of the members."""
        return frozenset(member.public_key for member in self.members)

    @property
    def is_open(self) -> bool:
        """No member listed: any node whose blocks are valid may make them."""
        return not self.members

    @property
    def tracker_urls(self) -> tuple[str, ...]:
        """Every tracker URL, the tiers flattened in order."""
        return tuple(url for tier in self.trackers for url in tier)

    def info(self) -> dict[bytes, Value]:
        """The metainfo's ``info`` dictionary (BEP 3 single-file form, so that BitTorrent tools
        read it: the one "file" is the genesis block's XML), with the network in ``registry``."""
        genesis = self.genesis.to_xml()
        registry: dict[bytes, Value] = {
            b"difficulty": self.difficulty,
            b"genesis": genesis,
            b"members": [
                {b"key": m.public_key.encode("ascii"), b"name": m.name.encode("utf-8")}
                # sorted: one member list has one info_hash, whatever order they were added in
                for m in sorted(self.members, key=lambda m: m.public_key)
            ],
        }
        return {
            b"name": self.name.encode("ascii"),
            b"length": len(genesis),
            b"piece length": PIECE_LENGTH,
            b"pieces": hashlib.sha1(genesis, usedforsecurity=False).digest(),
            b"registry": registry,
        }

    @property
    def info_hash(self) -> bytes:
        """SHA-1 of the bencoded ``info`` (BEP 3): the network's identity, 20 bytes."""
        # BEP 3 fixes SHA-1: a name to meet under at a tracker; what a peer serves is trusted
        # only once its chain verifies back to this genesis block
        return hashlib.sha1(encode(self.info()), usedforsecurity=False).digest()

    def with_member(self, public_key: str, name: str = "") -> Network:
        """The network with ``public_key`` a member (its name replaced if it was one already)."""
        kept = tuple(m for m in self.members if m.public_key != public_key)
        return replace(self, members=(*kept, Member(public_key, name)))

    def to_metainfo(self) -> bytes:
        """The key file as a BitTorrent metainfo file (BEP 3; ``announce-list`` of BEP 12)::

        d
          announce       the first tracker (BEP 3)
          announce-list  the trackers in tiers (BEP 12)
          created by     wiscat
          info           see :meth:`info`; its SHA-1 is the info_hash
          peers          static peers' root URLs (wiscat's; outside ``info``)
        e
        """
        top: dict[bytes, Value] = {b"created by": b"wiscat", b"info": self.info()}
        if self.trackers:
            top[b"announce"] = self.trackers[0][0].encode("utf-8")
            top[b"announce-list"] = [[u.encode("utf-8") for u in tier] for tier in self.trackers]
        if self.peers:
            top[b"peers"] = [url.encode("utf-8") for url in self.peers]
        return encode(top)

    def to_xml(self) -> bytes:
        """The key file as XML."""
        root = etree.Element("registry-network", name=self.name, difficulty=str(self.difficulty))
        for url in self.tracker_urls:
            etree.SubElement(root, "tracker").text = url
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


def tracker_problem(url: str) -> str | None:
    """Why ``url`` cannot be a tracker's announce URL, or None (a query is allowed: trackers
    that key their users put one there)."""
    if not url or any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "empty, or with whitespace or control characters"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL with a host: only HTTP trackers (BEP 3) are spoken"
    return None


def _tracker(value: str) -> str:
    problem = tracker_problem(value)
    if problem:
        raise KeyFileError(f"tracker {value!r}: {problem}")
    return value


def parse_network(body: bytes) -> Network:
    """Read and check a key file's content, either form; :class:`KeyFileError` says what is
    wrong."""
    return parse_metainfo(body) if is_metainfo(body) else parse_xml_network(body)


def is_metainfo(body: bytes) -> bool:
    """Whether a key file's content is the metainfo form (a bencoded dictionary starts with
    ``d``; an XML document never does)."""
    return body[:1] == b"d"


def check_network(
    name: str,
    difficulty: int,
    genesis_element: etree._Element | None,
    members: list[tuple[str, str]],
) -> tuple[Block, tuple[Member, ...]]:
    """The checks both forms share: name, difficulty, members' keys, the genesis block."""
    if not NETWORK_NAME.fullmatch(name):
        raise KeyFileError(f"network name {name!r}: letters, digits, '.', '_', '-' (at most 64)")
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise KeyFileError(f"difficulty must be 0 to {MAX_DIFFICULTY}")
    checked = []
    for key, member_name in members:
        try:
            load_public_key(key)
        except ValueError as exc:
            raise KeyFileError(f"member {key!r} is not an Ed25519 public key") from exc
        checked.append(Member(key, member_name))
    if genesis_element is None:
        raise KeyFileError("the key file has no genesis block")
    try:
        genesis = block_from_element(genesis_element)
        genesis.check(difficulty, frozenset(), genesis=True)
    except ChainError as exc:
        raise KeyFileError(f"the genesis block is not valid: {exc}") from exc
    if genesis.transactions:
        raise KeyFileError("the genesis block holds no transaction")
    return genesis, tuple(checked)


def _field(table: dict[bytes, Value], key: str, kind: type, where: str) -> Value:
    if key.encode() not in table:
        raise KeyFileError(f"{where} has no {key!r}")
    value = table[key.encode()]
    if not isinstance(value, kind):
        raise KeyFileError(f"{where}: {key!r} is not a{'n' if kind is int else ''} {_KINDS[kind]}")
    return value


_KINDS = {int: "integer", bytes: "string", list: "list", dict: "dictionary"}


def _text(value: Value, what: str) -> str:
    if not isinstance(value, bytes):
        raise KeyFileError(f"{what} is not a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyFileError(f"{what} is not UTF-8") from exc


def parse_metainfo(body: bytes) -> Network:
    """Read and check a key file of the metainfo form (see :meth:`Network.to_metainfo`)."""
    try:
        top = decode(body, max_bytes=MAX_KEY_FILE_BYTES)
    except BencodeError as exc:
        raise KeyFileError(f"not a key file: not canonical bencoding: {exc}") from exc
    if not isinstance(top, dict):
        raise KeyFileError("not a key file: the metainfo is not a dictionary")
    info = _field(top, "info", dict, "the metainfo")
    assert isinstance(info, dict)
    registry = _field(info, "registry", dict, "info")
    assert isinstance(registry, dict)
    difficulty = _field(registry, "difficulty", int, "info.registry")
    assert isinstance(difficulty, int)
    genesis_xml = _field(registry, "genesis", bytes, "info.registry")
    assert isinstance(genesis_xml, bytes)
    members = []
    listed_members = _field(registry, "members", list, "info.registry")
    assert isinstance(listed_members, list)
    for n, entry in enumerate(listed_members):
        if not isinstance(entry, dict):
            raise KeyFileError(f"info.registry.members[{n}] is not a dictionary")
        key = _text(_field(entry, "key", bytes, f"member {n}"), f"member {n}'s key")
        members.append((key, _text(entry.get(b"name", b""), f"member {n}'s name")))
    try:
        genesis_element = parse_xml(genesis_xml)
    except ChainError as exc:
        raise KeyFileError(f"the genesis block is not valid: {exc}") from exc
    name = _text(_field(info, "name", bytes, "info"), "info.name")
    genesis, checked = check_network(name, difficulty, genesis_element, members)
    tiers: list[tuple[str, ...]] = []
    if b"announce-list" in top:
        listed = _field(top, "announce-list", list, "the metainfo")
        assert isinstance(listed, list)
        for n, tier in enumerate(listed):
            if not isinstance(tier, list) or not tier:
                raise KeyFileError(f"announce-list tier {n} is not a list of URLs (BEP 12)")
            tiers.append(tuple(_tracker(_text(url, "a tracker URL")) for url in tier))
    elif b"announce" in top:  # BEP 12: announce-list, when present, supersedes announce
        tiers.append((_tracker(_text(top[b"announce"], "announce")),))
    peers = tuple(_url(_text(p, "a peer URL"), "peer") for p in _list(top.get(b"peers", [])))
    network = Network(name, difficulty, genesis, tuple(tiers), peers, checked)
    if encode(network.info()) != encode(info):
        # a BitTorrent tool reads "pieces" and "length"; they must describe this genesis block,
        # and nothing unknown may hide in info (it would change the info_hash unseen)
        raise KeyFileError("info holds fields or values other than the network's (see the docs)")
    return network


def _list(value: Value) -> list[Value]:
    if not isinstance(value, list):
        raise KeyFileError("peers is not a list of URLs")
    return value


def parse_xml_network(body: bytes) -> Network:
    """Read and check a key file of the XML form."""
    try:
        root = parse_xml(body)
    except ChainError as exc:
        raise KeyFileError(f"not a key file: {exc}") from exc
    if root.tag != "registry-network":
        raise KeyFileError(f"not a key file: the root is <{root.tag}>, not <registry-network>")
    name = root.get("name") or ""
    try:
        difficulty = int(root.get("difficulty") or "")
    except ValueError as exc:
        raise KeyFileError("difficulty is not a number") from exc
    trackers = tuple((_tracker(t.text or ""),) for t in root.iterfind("tracker"))
    peers = tuple(_url(p.text or "", "peer") for p in root.iterfind("peers/peer"))
    genesis, members = check_network(
        name,
        difficulty,
        root.find("genesis/block"),
        [((e.text or "").strip(), e.get("name", "")) for e in root.iterfind("members/member")],
    )
    return Network(name, difficulty, genesis, trackers, peers, members)


def load_network(path: Path) -> Network:
    """The network of the key file at ``path``; KeyFileError if it cannot be read or parsed."""
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
    trackers: tuple[tuple[str, ...], ...] = (),
    peers: tuple[str, ...] = (),
    members: tuple[Member, ...] = (),
    open_network: bool = False,
) -> Network:
    """A new network: its genesis block mined and signed by ``key``, whose owner is a member
    unless the network is open (no members at all)."""
    if not NETWORK_NAME.fullmatch(name):
        raise KeyFileError(f"network name {name!r}: letters, digits, '.', '_', '-' (at most 64)")
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise KeyFileError(f"difficulty must be 0 to {MAX_DIFFICULTY}")
    network = Network(
        name=name,
        difficulty=difficulty,
        genesis=make_genesis(difficulty, key, f"{name} {utc_stamp()} {secrets.token_hex(16)}"),
        trackers=tuple(
            tuple(_tracker(url) for url in tier)
            for tier in (((tracker,),) if tracker else ()) + trackers
        ),
        peers=tuple(_url(p, "peer") for p in peers),
        members=members,
    )
    if open_network:
        if members:
            raise KeyFileError("an open network lists no members")
        return network
    return network.with_member(public_key_text(key.public_key()), "founder")


def write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Write ``key`` as unencrypted PKCS#8 PEM, readable by its owner only."""
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at ``path``; KeyFileError otherwise."""
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyFileError(f"cannot read the private key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is not an Ed25519 private key")
    return key
