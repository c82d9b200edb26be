"""The registry's pure logic: hashes, proof of work, signatures, XML shapes, chains, fork choice."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lxml import etree

from wiscat.shared.registry.addresses import address_allowed
from wiscat.shared.registry.chain import (
    ZERO_HASH,
    Block,
    InvalidBlock,
    NotAMember,
    Tip,
    Transaction,
    better_tip,
    block_hash,
    blocks_from_xml,
    blocks_to_xml,
    make_genesis,
    meets_difficulty,
    mine,
    public_key_text,
    transactions_hash,
    url_problem,
    verify_chain,
)
from wiscat.shared.registry.keyfile import KeyFileError, new_network, parse_network

DIFFICULTY = 6


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def members(key: Ed25519PrivateKey) -> frozenset[str]:
    return frozenset({public_key_text(key.public_key())})


def chain_of(key: Ed25519PrivateKey, count: int) -> tuple[Block, list[Block]]:
    genesis = make_genesis(DIFFICULTY, key)
    blocks, previous = [], genesis.hash
    for n in range(count):
        block = mine(previous, [Transaction.new(f"https://r{n}.example.org/oai")], DIFFICULTY, key)
        blocks.append(block)
        previous = block.hash
    return genesis, blocks


def test_a_transaction_hashes_its_url_exactly() -> None:
    tx = Transaction.new("http://url.to.repository.com")
    assert tx.tx_hash == hashlib.sha512(b"http://url.to.repository.com").hexdigest()
    assert tx.canonical().startswith(b"<transaction><tx-hash>")
    assert b"<baseURL>http://url.to.repository.com</baseURL>" in tx.canonical()


def test_a_mined_block_follows_the_seed(key: Ed25519PrivateKey, members: frozenset[str]) -> None:
    txs = [Transaction.new("https://a.example.org/oai"), Transaction.new("https://b.example/oai")]
    block = mine(ZERO_HASH, txs, DIFFICULTY, key)
    assert (
        block.transactions_hash == hashlib.sha512(b"".join(t.canonical() for t in txs)).hexdigest()
    )
    assert (
        block.hash
        == hashlib.sha512(
            (block.previous_hash + block.transactions_hash + block.nonce).encode()
        ).hexdigest()
    )
    assert meets_difficulty(block.hash, DIFFICULTY)
    block.check(DIFFICULTY, members)
    element = etree.fromstring(block.to_xml())
    assert [child.tag for child in element] == [
        "previous-hash",
        "hash",
        "transactions-hash",
        "nonce",
        "signer",
        "signature",
        "transactions",
    ]
    assert [c.tag for c in element.find("transactions/transaction")] == [  # type: ignore[union-attr]
        "tx-hash",
        "created-at",
        "baseURL",
    ]
    assert blocks_from_xml(blocks_to_xml([block])) == [block]


def test_altered_blocks_are_refused(key: Ed25519PrivateKey, members: frozenset[str]) -> None:
    block = mine(ZERO_HASH, [Transaction.new("https://a.example.org/oai")], DIFFICULTY, key)
    other = Transaction.new("https://evil.example.org/oai")
    altered = [
        dataclasses.replace(block, transactions=(other,)),
        dataclasses.replace(block, nonce=str(int(block.nonce) + 1)),
        dataclasses.replace(block, previous_hash="f" * 128),
        dataclasses.replace(
            block, transactions=(dataclasses.replace(block.transactions[0], created_at="x"),)
        ),
    ]
    for bad in altered:
        with pytest.raises(InvalidBlock):
            bad.check(DIFFICULTY, members)
    # re-hashed consistently but not re-signed: the signature gives it away
    txh = transactions_hash((other,))
    forged = dataclasses.replace(
        block,
        transactions=(other,),
        transactions_hash=txh,
        nonce="0",
        hash=block_hash(block.previous_hash, txh, "0"),
    )
    with pytest.raises(InvalidBlock):
        forged.check(0, members)


def test_a_block_of_a_non_member_is_refused(members: frozenset[str]) -> None:
    stranger = Ed25519PrivateKey.generate()
    block = mine(ZERO_HASH, [Transaction.new("https://a.example.org/oai")], DIFFICULTY, stranger)
    block.check(DIFFICULTY, frozenset({public_key_text(stranger.public_key())}))
    with pytest.raises(NotAMember):
        block.check(DIFFICULTY, members)


def test_verify_chain_back_to_genesis(key: Ed25519PrivateKey, members: frozenset[str]) -> None:
    genesis, blocks = chain_of(key, 5)
    assert verify_chain(genesis, blocks, DIFFICULTY, members) == Tip(5, blocks[-1].hash)
    with pytest.raises(InvalidBlock, match="link"):
        verify_chain(genesis, blocks[1:], DIFFICULTY, members)
    other_genesis = make_genesis(DIFFICULTY, key)
    with pytest.raises(InvalidBlock):
        verify_chain(other_genesis, blocks, DIFFICULTY, members)
    again = mine(blocks[-1].hash, blocks[0].transactions, DIFFICULTY, key)
    with pytest.raises(InvalidBlock, match="twice"):
        verify_chain(genesis, [*blocks, again], DIFFICULTY, members)


def test_fork_choice_is_most_work_then_lowest_hash() -> None:
    low, high = "0" + "a" * 127, "0" + "b" * 127
    assert better_tip(Tip(3, high), Tip(2, low), DIFFICULTY)
    assert not better_tip(Tip(2, low), Tip(3, high), DIFFICULTY)
    assert better_tip(Tip(2, low), Tip(2, high), DIFFICULTY)
    assert not better_tip(Tip(2, high), Tip(2, low), DIFFICULTY)
    assert not better_tip(Tip(2, low), Tip(2, low), DIFFICULTY)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://r.example.org/oai", None),
        ("http://r.example.org:8080/cgi/oai2", None),
        ("ftp://r.example.org/oai", "http"),
        ("https://r.example.org/oai?verb=Identify", "query"),
        ("https://r.example.org/oai#x", "query"),
        ("https://r.example.org/o ai", "whitespace"),
        ("https://user:pw@r.example.org/oai", "credentials"),
        ("https:///oai", "host"),
        ("", "empty"),
    ],
)
def test_url_problems(url: str, problem: str | None) -> None:
    """S06: another scheme, credentials, a query or no host make a URL unusable."""
    found = url_problem(url)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:8.8.8.8", True),
        ("not an address", False),
    ],
)
def test_only_global_addresses_are_allowed(address: str, allowed: bool) -> None:
    assert address_allowed(address) is allowed


def test_key_file_round_trip(key: Ed25519PrivateKey) -> None:
    other = public_key_text(Ed25519PrivateKey.generate().public_key())
    network = new_network(
        "wis-test",
        DIFFICULTY,
        key,
        tracker="http://tracker.example.org/registry/announce",
        peers=("http://peer.example.org",),
    ).with_member(other, "OTHER")
    again = parse_network(network.to_xml())
    assert again == network
    assert again.member_keys == {public_key_text(key.public_key()), other}
    nonce = f"<nonce>{network.genesis.nonce}</nonce>".encode()
    tampered = network.to_xml().replace(nonce, b"<nonce>12345678901</nonce>", 1)
    with pytest.raises(KeyFileError, match="genesis"):
        parse_network(tampered)
    with pytest.raises(KeyFileError):
        parse_network(b"<!DOCTYPE x [<!ENTITY a 'b'>]><registry-network/>")


def test_a_created_at_of_other_digits_is_refused() -> None:
    # strptime takes any Unicode digit; the block format's YYYY-MM-DDThh:mm:ssZ does not
    tx = Transaction.new("https://a.example.org/oai")
    for created_at in ("\uff12\uff10\uff12\uff16-11-25T10:00:00Z", "2026-11-25T10:00:0\u0661Z"):
        with pytest.raises(InvalidBlock, match="is not YYYY-MM-DDThh:mm:ssZ"):
            dataclasses.replace(tx, created_at=created_at).check()
