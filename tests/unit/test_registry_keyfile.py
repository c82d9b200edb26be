"""The key file's two forms: the BitTorrent metainfo (BEP 3, BEP 12) and the XML of old, one
network (one info_hash) either way; open networks (no members) and closed ones."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wiscat.shared.registry.bencode import decode, encode
from wiscat.shared.registry.chain import InvalidBlock, NotAMember, Transaction, mine
from wiscat.shared.registry.chain import public_key_text as key_text
from wiscat.shared.registry.keyfile import KeyFileError, Member, Network, new_network, parse_network

DIFFICULTY = 4


@pytest.fixture(scope="module")
def founder() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def closed(founder: Ed25519PrivateKey) -> Network:
    return new_network(
        "wis-test",
        DIFFICULTY,
        founder,
        tracker="http://tracker.example.org:6969/announce",
        trackers=(("http://a.example.org/announce", "https://b.example.org/announce?key=1"),),
        peers=("https://peer.example.org",),
    ).with_member(key_text(Ed25519PrivateKey.generate().public_key()), "OTHER")


def test_the_metainfo_is_a_torrent_a_bittorrent_tool_reads(closed: Network) -> None:
    top = decode(closed.to_metainfo())
    assert isinstance(top, dict)
    # BEP 3: announce is the first tracker; BEP 12: announce-list, tiers in order
    assert top[b"announce"] == b"http://tracker.example.org:6969/announce"
    assert top[b"announce-list"] == [
        [b"http://tracker.example.org:6969/announce"],
        [b"http://a.example.org/announce", b"https://b.example.org/announce?key=1"],
    ]
    assert top[b"peers"] == [b"https://peer.example.org"]
    info = top[b"info"]
    assert isinstance(info, dict)
    genesis = closed.genesis.to_xml()
    # BEP 3's single-file info: its one file is the genesis block
    assert info[b"name"] == b"wis-test"
    assert info[b"length"] == len(genesis)
    assert info[b"piece length"] == 65536
    assert info[b"pieces"] == hashlib.sha1(genesis).digest()
    registry = info[b"registry"]
    assert isinstance(registry, dict)
    assert registry[b"difficulty"] == DIFFICULTY
    assert registry[b"genesis"] == genesis
    members = registry[b"members"]
    assert isinstance(members, list)
    assert members == sorted(
        ({b"key": m.public_key.encode(), b"name": m.name.encode()} for m in closed.members),
        key=lambda m: m[b"key"],
    )
    assert closed.info_hash == hashlib.sha1(encode(info)).digest()


def test_both_forms_read_back_as_the_same_network(closed: Network) -> None:
    from_metainfo = parse_network(closed.to_metainfo())
    from_xml = parse_network(closed.to_xml())
    assert set(from_metainfo.members) == set(closed.members)  # in the key's order
    assert dataclasses.replace(from_metainfo, members=closed.members) == closed
    # the XML form has no tiers: each tracker comes back as a tier of its own
    assert from_xml.tracker_urls == closed.tracker_urls
    assert from_xml.info_hash == from_metainfo.info_hash == closed.info_hash
    assert parse_network(from_xml.to_metainfo()).info_hash == closed.info_hash


def test_the_info_hash_changes_with_the_members(closed: Network) -> None:
    other = closed.with_member(key_text(Ed25519PrivateKey.generate().public_key()), "THIRD")
    assert other.info_hash != closed.info_hash
    # the trackers and peers are outside info: the same network
    moved = Network(closed.name, closed.difficulty, closed.genesis, (), (), closed.members)
    assert moved.info_hash == closed.info_hash


def _rewrite(network: Network, change: dict[bytes, object]) -> bytes:
    top = decode(network.to_metainfo())
    assert isinstance(top, dict)
    info = top[b"info"]
    assert isinstance(info, dict)
    info.update(change)  # type: ignore[arg-type]
    return encode(top)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({b"name": b"not a name!"}, "network name 'not a name!': letters, digits"),
        ({b"pieces": b"x" * 20}, "info holds fields or values other than the network's"),
        ({b"length": 1}, "info holds fields or values other than the network's"),
        ({b"private": 1}, "info holds fields or values other than the network's"),
        ({b"registry": {b"difficulty": 4}}, "info.registry has no 'genesis'"),
        ({b"registry": b"x"}, "info: 'registry' is not a dictionary"),
    ],
)
def test_a_metainfo_that_is_not_a_network_is_refused(
    closed: Network, change: dict[bytes, object], error: str
) -> None:
    with pytest.raises(KeyFileError) as caught:
        parse_network(_rewrite(closed, change))
    assert str(caught.value).startswith(error)


def test_non_canonical_or_foreign_metainfo_is_refused(closed: Network) -> None:
    body = closed.to_metainfo()
    with pytest.raises(KeyFileError) as caught:
        parse_network(body + b"x")
    assert str(caught.value) == (
        f"not a key file: not canonical bencoding: offset {len(body)}: data after the value"
    )
    with pytest.raises(KeyFileError) as caught:
        parse_network(b"d4:infod4:name1:xee")
    assert str(caught.value) == "info has no 'registry'"
    top = decode(body)
    assert isinstance(top, dict)
    top[b"announce-list"] = [[b"udp://tracker.example.org:1337/announce"]]
    with pytest.raises(KeyFileError) as caught:
        parse_network(encode(top))
    assert str(caught.value) == (
        "tracker 'udp://tracker.example.org:1337/announce': not an http(s) URL with a host: "
        "only HTTP trackers (BEP 3) are spoken"
    )


def test_an_open_network_takes_blocks_from_any_key(founder: Ed25519PrivateKey) -> None:
    network = new_network("wis-open", DIFFICULTY, founder, open_network=True)
    assert network.is_open and network.members == ()
    again = parse_network(network.to_metainfo())
    assert again.is_open and again.info_hash == network.info_hash
    stranger = Ed25519PrivateKey.generate()
    tx = Transaction.new("https://a.example.org/oai")
    block = mine(network.genesis.hash, [tx], DIFFICULTY, stranger)
    block.check(DIFFICULTY, network.member_keys)  # open: any signer
    closed = new_network("wis-closed", DIFFICULTY, founder)
    with pytest.raises(NotAMember):
        block.check(DIFFICULTY, closed.member_keys)
    # open does not mean unchecked: the proof of work and the signature still count
    other = mine(network.genesis.hash, [tx], DIFFICULTY, Ed25519PrivateKey.generate())
    with pytest.raises(InvalidBlock, match=r"^the signature does not verify$"):
        dataclasses.replace(block, signature=other.signature).check(DIFFICULTY, frozenset())
    with pytest.raises(
        InvalidBlock, match=r"^the hash does not solve the puzzle \(difficulty 60\)$"
    ):
        block.check(60, frozenset())


def test_an_open_network_has_no_members(founder: Ed25519PrivateKey) -> None:
    member = key_text(Ed25519PrivateKey.generate().public_key())
    with pytest.raises(KeyFileError, match=r"^an open network lists no members$"):
        new_network("wis-open", DIFFICULTY, founder, open_network=True, members=(Member(member),))
