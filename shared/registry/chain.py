"""Transactions, blocks and the chain of the registry (docs/registry.md), with no I/O.

The XML shapes are the seed's::

    <transaction>
      <tx-hash>SHA-512(baseURL), hex</tx-hash>
      <created-at>2014-05-29T09:30:10Z</created-at>
      <baseURL>http://url.to.repository.com</baseURL>
    </transaction>

    <block>
      <previous-hash>...</previous-hash>
      <hash>SHA-512(previous-hash + transactions-hash + nonce), hex</hash>
      <transactions-hash>SHA-512(<transaction>...</transaction> + ...), hex</transactions-hash>
      <nonce>439</nonce>
      <signer>base64 Ed25519 public key</signer>          (wiscat: who made the block)
      <signature>base64 Ed25519 signature</signature>    (wiscat: over the block's hash)
      <transactions><transaction>...</transaction>...</transactions>
    </block>

Two elements are wiscat's additions: ``signer`` and ``signature``. The signature covers the
block's hash, which covers the previous hash, every transaction and the nonce. In an open network
(a key file that lists no members: seed 004's model, "open for external contributions by
design") any key may sign, and the proof of work is what keeps the network from being flooded;
in a closed network only the members listed in the key file may.

The proof of work: a block's hash, read as a 512-bit number, has at least ``difficulty`` leading
zero bits (``difficulty`` is set per network, in the key file). Every block of a network costs the
same work, so "most work" is "most blocks", and equal work is settled by the lowest tip hash
(:func:`better_tip`): every node applying this one rule to the same blocks ends on the same chain.
The URLs of a block that loses go back to the pool of the node that holds them, and are minted
again on the winning chain.

Exception tree::

    ChainError              a block or chain that cannot be accepted
     +-- InvalidBlock       malformed, altered, bad proof of work, bad signature, duplicate URL
     |    +-- NotAMember    signed by a key the network does not list
     +-- UnknownParent      its previous-hash names a block this node does not have (yet)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from lxml import etree

from wiscat.shared.oaipmh.pages import has_doctype
from wiscat.shared.text import clipped

ZERO_HASH = "0" * 128
MAX_TRANSACTIONS = 500
MAX_DIFFICULTY = 64
# in UTF-8 bytes: a URL is a key of the peer and member tables, whose index entries must fit
# in a third of a page (2048 characters of CJK text, 6 KB, failed the tracker's insert)
MAX_URL_BYTES = 2048
CREATED_AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# Domain separation: a node's key signs registry blocks and nothing else we could confuse them with.
_SIGNING_CONTEXT = b"wiscat-registry-block:"

_HEX_HASH = re.compile(r"[0-9a-f]{128}")
_NONCE = re.compile(r"0|[1-9][0-9]{0,19}")
_CREATED_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


class ChainError(Exception):
    """A block or chain that cannot be accepted."""


class InvalidBlock(ChainError):
    """Malformed, altered, without its proof of work, badly signed, or repeating a URL."""


class NotAMember(InvalidBlock):
    """Signed by a key that the network key file does not list."""


class UnknownParent(ChainError):
    """The block's previous-hash names a block this node does not have."""


def url_hash(url: str) -> str:
    """A transaction's ``tx-hash``: SHA-512 of the URL exactly as submitted, in hex."""
    return hashlib.sha512(url.encode("utf-8")).hexdigest()


def utc_stamp(when: datetime | None = None) -> str:
    """``created-at`` in ISO 8601 (``YYYY-MM-DDThh:mm:ssZ``)."""
    return (when or datetime.now(UTC)).astimezone(UTC).strftime(CREATED_AT_FORMAT)


@dataclass(frozen=True, slots=True)
class Transaction:
    """One accepted base URL."""

    tx_hash: str
    created_at: str
    base_url: str

    @classmethod
    def new(cls, base_url: str, when: datetime | None = None) -> Transaction:
        """The transaction of ``base_url``, dated ``when`` (now by default)."""
        return cls(url_hash(base_url), utc_stamp(when), base_url)

    def element(self) -> etree._Element:
        """The transaction as the XML a block carries."""
        tx = etree.Element("transaction")
        etree.SubElement(tx, "tx-hash").text = self.tx_hash
        etree.SubElement(tx, "created-at").text = self.created_at
        etree.SubElement(tx, "baseURL").text = self.base_url
        return tx

    def canonical(self) -> bytes:
        """The bytes that enter ``transactions-hash``: the element, compact, in UTF-8."""
        return etree.tostring(self.element(), encoding="utf-8", xml_declaration=False)

    def check(self) -> None:
        """Raise :class:`InvalidBlock` unless the transaction is well formed."""
        if self.tx_hash != url_hash(self.base_url):
            raise InvalidBlock(f"tx-hash of {self.base_url!r} is not the SHA-512 of its URL")
        if not _CREATED_AT.fullmatch(self.created_at):
            raise InvalidBlock(f"created-at {self.created_at!r} is not YYYY-MM-DDThh:mm:ssZ")
        try:
            datetime.strptime(self.created_at, CREATED_AT_FORMAT)
        except ValueError as exc:
            raise InvalidBlock(f"created-at {self.created_at!r} is not a date") from exc
        problem = url_problem(self.base_url)
        if problem:
            raise InvalidBlock(f"baseURL {self.base_url!r}: {problem}")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a registry entry on its face (before any fetch), or None."""
    if not url:
        return "empty"
    if len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        return f"longer than {MAX_URL_BYTES} bytes"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is not a number
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL with a host"
    if parts.username or parts.password:
        return "carries credentials"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        # OAI-PMH 2.0 §3.1.1: the base URL is extended with the request's arguments
        return "a base URL has no query or fragment (OAI-PMH 2.0 §3.1.1)"
    return None


def transactions_hash(transactions: Iterable[Transaction]) -> str:
    """SHA-512 of the transactions' canonical XML, concatenated in block order."""
    digest = hashlib.sha512()
    for tx in transactions:
        digest.update(tx.canonical())
    return digest.hexdigest()


def block_hash(previous_hash: str, transactions_hash_: str, nonce: str) -> str:
    """SHA512(previous-hash + transactions-hash + nonce), the strings concatenated."""
    return hashlib.sha512((previous_hash + transactions_hash_ + nonce).encode("ascii")).hexdigest()


def meets_difficulty(hash_hex: str, difficulty: int) -> bool:
    """Whether the hash has ``difficulty`` leading zero bits."""
    return int(hash_hex, 16) >> (512 - difficulty) == 0


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as the key file and blocks carry it: base64 of the 32 raw bytes."""
    return base64.b64encode(key.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode("ascii")


def load_public_key(text: str) -> Ed25519PublicKey:
    """The inverse of :func:`public_key_text`; ValueError if it is not one."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raw = b""
    if len(raw) != 32:
        raise ValueError(
            f"{clipped(text, 60)!r} is not a public key: an Ed25519 key's 32 bytes in base64, "
            "as `wiscat registry keygen` prints it"
        )
    return Ed25519PublicKey.from_public_bytes(raw)


@dataclass(frozen=True, slots=True)
class Block:
    """A block of the chain (see the module docstring for its XML)."""

    previous_hash: str
    hash: str
    transactions_hash: str
    nonce: str
    signer: str
    signature: str
    transactions: tuple[Transaction, ...]

    def element(self) -> etree._Element:
        """The block as XML, its transactions inside."""
        block = etree.Element("block")
        etree.SubElement(block, "previous-hash").text = self.previous_hash
        etree.SubElement(block, "hash").text = self.hash
        etree.SubElement(block, "transactions-hash").text = self.transactions_hash
        etree.SubElement(block, "nonce").text = self.nonce
        etree.SubElement(block, "signer").text = self.signer
        etree.SubElement(block, "signature").text = self.signature
        txs = etree.SubElement(block, "transactions")
        for tx in self.transactions:
            txs.append(tx.element())
        return block

    def to_xml(self) -> bytes:
        """The block's XML as bytes, as nodes exchange it."""
        return etree.tostring(self.element(), encoding="utf-8", xml_declaration=False)

    def check(self, difficulty: int, members: frozenset[str], *, genesis: bool = False) -> None:
        """Check everything a block says about itself: hashes, proof of work, signature, members
        (``members`` empty: an open network, any signer).

        Raise :class:`NotAMember` for a signer a closed network does not list, :class:`InvalidBlock`
        for anything else. Links to other blocks are the caller's business.
        """
        for name, value in (
            ("previous-hash", self.previous_hash),
            ("hash", self.hash),
            ("transactions-hash", self.transactions_hash),
        ):
            if not _HEX_HASH.fullmatch(value):
                raise InvalidBlock(f"{name} is not 128 lowercase hex digits")
        if not _NONCE.fullmatch(self.nonce):
            raise InvalidBlock("nonce is not a decimal number")
        if not genesis and not self.transactions:
            raise InvalidBlock("a block holds at least one transaction")
        if len(self.transactions) > MAX_TRANSACTIONS:
            raise InvalidBlock(f"a block holds at most {MAX_TRANSACTIONS} transactions")
        seen: set[str] = set()
        for tx in self.transactions:
            tx.check()
            if tx.tx_hash in seen:
                raise InvalidBlock(f"{tx.base_url!r} appears twice in the block")
            seen.add(tx.tx_hash)
        if transactions_hash(self.transactions) != self.transactions_hash:
            raise InvalidBlock("transactions-hash does not match the transactions")
        if block_hash(self.previous_hash, self.transactions_hash, self.nonce) != self.hash:
            raise InvalidBlock("hash is not SHA-512(previous-hash + transactions-hash + nonce)")
        if not meets_difficulty(self.hash, difficulty):
            raise InvalidBlock(f"the hash does not solve the puzzle (difficulty {difficulty})")
        if not genesis and members and self.signer not in members:
            raise NotAMember("the block is not signed by a member of the network")
        try:
            key = load_public_key(self.signer)
            key.verify(base64.b64decode(self.signature, validate=True), _signed(self.hash))
        except (ValueError, InvalidSignature) as exc:
            raise InvalidBlock("the signature does not verify") from exc


def _signed(hash_hex: str) -> bytes:
    return _SIGNING_CONTEXT + hash_hex.encode("ascii")


def solve(prefix: str, difficulty: int, start: int = 0) -> tuple[str, str]:
    """The first nonce from ``start`` whose block hash meets ``difficulty``: (nonce, hash)."""
    base = hashlib.sha512(prefix.encode("ascii"))
    shift = 512 - difficulty
    nonce = start
    while True:
        digest = base.copy()
        text = str(nonce)
        digest.update(text.encode("ascii"))
        value = digest.digest()
        if int.from_bytes(value, "big") >> shift == 0:
            return text, value.hex()
        nonce += 1


def mine(
    previous_hash: str,
    transactions: Sequence[Transaction],
    difficulty: int,
    key: Ed25519PrivateKey,
) -> Block:
    """Make a signed block of ``transactions`` on ``previous_hash`` (CPU-bound: run it in a
    thread)."""
    tx_hash = transactions_hash(transactions)
    nonce, hash_hex = solve(previous_hash + tx_hash, difficulty)
    return Block(
        previous_hash=previous_hash,
        hash=hash_hex,
        transactions_hash=tx_hash,
        nonce=nonce,
        signer=public_key_text(key.public_key()),
        signature=base64.b64encode(key.sign(_signed(hash_hex))).decode("ascii"),
        transactions=tuple(transactions),
    )


def make_genesis(difficulty: int, key: Ed25519PrivateKey, seed: str | None = None) -> Block:
    """The first block of a new network: no transactions; its previous-hash is the SHA-512 of
    ``seed`` (random by default), so two networks never share a genesis block."""
    seed = seed if seed is not None else secrets.token_hex(32)
    return mine(hashlib.sha512(seed.encode("utf-8")).hexdigest(), (), difficulty, key)


# -- XML ------------------------------------------------------------------------------------------

_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=True
)


def parse_xml(body: bytes) -> etree._Element:
    """Parse registry XML; InvalidBlock when it is not well formed or declares a DOCTYPE."""
    if has_doctype(body):
        raise InvalidBlock("a DOCTYPE is not accepted")
    try:
        return etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as exc:
        raise InvalidBlock(f"not well-formed XML: {exc.msg}") from exc


def _child_text(element: etree._Element, tag: str) -> str:
    found = element.find(tag)
    if found is None:
        raise InvalidBlock(f"<{element.tag}> has no <{tag}>")
    return found.text or ""


def block_from_element(element: etree._Element) -> Block:
    """A :class:`Block` from its ``<block>`` element (nothing checked but the shape)."""
    if element.tag != "block":
        raise InvalidBlock(f"expected <block>, found <{element.tag}>")
    holder = element.find("transactions")
    if holder is None:
        raise InvalidBlock("<block> has no <transactions>")
    transactions = []
    for tx in holder:
        if tx.tag != "transaction":
            raise InvalidBlock(f"unexpected <{tx.tag}> in <transactions>")
        transactions.append(
            Transaction(
                _child_text(tx, "tx-hash"),
                _child_text(tx, "created-at"),
                _child_text(tx, "baseURL"),
            )
        )
    return Block(
        previous_hash=_child_text(element, "previous-hash"),
        hash=_child_text(element, "hash"),
        transactions_hash=_child_text(element, "transactions-hash"),
        nonce=_child_text(element, "nonce"),
        signer=_child_text(element, "signer"),
        signature=_child_text(element, "signature"),
        transactions=tuple(transactions),
    )


def blocks_from_xml(body: bytes) -> list[Block]:
    """The blocks of a ``<blocks>`` document (or of a single ``<block>``), in order."""
    root = parse_xml(body)
    if root.tag == "block":
        return [block_from_element(root)]
    if root.tag != "blocks":
        raise InvalidBlock(f"expected <blocks> or <block>, found <{root.tag}>")
    return [block_from_element(child) for child in root]


def blocks_to_xml(blocks: Iterable[Block | bytes]) -> bytes:
    """A ``<blocks>`` document; stored blocks may be given as their XML bytes."""
    parts = [b"<blocks>"]
    for block in blocks:
        parts.append(block if isinstance(block, bytes) else block.to_xml())
    parts.append(b"</blocks>")
    return b"".join(parts)


# -- chains ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=False)
class Tip:
    """The end of a chain: its height (genesis is 0) and its block's hash."""

    height: int
    hash: str


def chain_work(height: int, difficulty: int) -> int:
    """Expected hashes spent on a chain of ``height`` blocks after genesis."""
    return height << difficulty


def better_tip(candidate: Tip, current: Tip, difficulty: int) -> bool:
    """The fork-choice rule: most work, then the lowest hash. Deterministic on every node."""
    work, current_work = (
        chain_work(candidate.height, difficulty),
        chain_work(current.height, difficulty),
    )
    if work != current_work:
        return work > current_work
    return candidate.hash < current.hash


def verify_chain(
    genesis: Block, blocks: Sequence[Block], difficulty: int, members: frozenset[str]
) -> Tip:
    """Verify ``blocks`` as the chain that follows ``genesis``, back to it: links, hashes, proofs
    of work, signatures by members, and no URL twice. Return the chain's tip."""
    seen: set[str] = set()
    previous = genesis.hash
    for height, block in enumerate(blocks, start=1):
        if block.previous_hash != previous:
            raise InvalidBlock(f"block {height} does not link to the block before it")
        block.check(difficulty, members)
        for tx in block.transactions:
            if tx.tx_hash in seen:
                raise InvalidBlock(f"{tx.base_url!r} is in the chain twice (block {height})")
            seen.add(tx.tx_hash)
        previous = block.hash
    return Tip(len(blocks), previous)
