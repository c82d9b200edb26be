"""BitTorrent's HTTP tracker protocol, both ends (BEP 3, BEP 23 compact peers, BEP 7 peers6)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from wiscat.shared.registry.bencode import encode
from wiscat.shared.registry.tracker import (
    Announce,
    TrackerError,
    TrackerReply,
    announce_url,
    failure_body,
    parse_announce_query,
    parse_reply,
    peer_root,
    reply_body,
)

INFO_HASH = bytes(range(0x20, 0x34))  # a space, '%', '&', '+' among them
PEER_ID = b"-WC0001-0123456789ab"


def test_the_request_escapes_every_byte_and_reads_back() -> None:
    request = Announce(INFO_HASH, PEER_ID, 8080, "started")
    url = announce_url("http://tracker.example.org:6969/announce", request)
    query = urlsplit(url).query
    assert query.startswith("info_hash=%20%21%22%23%24%25%26%27%28%29%2A%2B%2C-.%2F0123&")
    assert query.endswith(
        "&port=8080&uploaded=0&downloaded=0&left=0&compact=1&numwant=50&event=started"
    )
    assert parse_announce_query(query) == request
    # a tracker that keys its users keeps its query
    keyed = announce_url("https://t.example.org/announce?key=abc", request)
    assert keyed.startswith("https://t.example.org/announce?key=abc&info_hash=")


def test_a_compact_answer_of_both_families_is_read() -> None:
    body = reply_body(1800, [("127.0.0.1", 6881), ("2001:db8::1", 443), ("node.example.org", 80)])
    assert body == encode(
        {
            b"interval": 1800,
            b"peers": bytes([127, 0, 0, 1, 0x1A, 0xE1]),
            b"peers6": bytes.fromhex("20010db8000000000000000000000001") + b"\x01\xbb",
        }
    )
    assert parse_reply(body) == TrackerReply(1800, (("127.0.0.1", 6881), ("2001:db8::1", 443)))


def test_the_dictionary_model_and_min_interval_are_read() -> None:
    body = encode(
        {
            b"interval": 5,
            b"min interval": 60,
            b"peers": [{b"ip": b"192.0.2.7", b"peer id": b"x" * 20, b"port": 8443}],
        }
    )
    reply = parse_reply(body)
    assert reply.peers == (("192.0.2.7", 8443),)
    assert reply.wait_seconds == 60  # the larger of the two: the tracker's floor is kept
    assert TrackerReply(0, ()).wait_seconds == 1
    assert TrackerReply(10**9, ()).wait_seconds == 6 * 3600


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (failure_body("not registered"), "the tracker refused: not registered"),
        (b"<html>", "the answer is not bencoded: offset 0: b'<' starts no value"),
        (encode([1]), "the answer is not a dictionary"),
        (encode({b"peers": b""}), "the answer has no interval"),
        (
            encode({b"interval": 1, b"peers": b"12345"}),
            "a compact peer list of 5 bytes, not 6 a peer",
        ),
        (encode({b"interval": 1, b"peers": 3}), "peers is neither a string nor a list"),
        (encode({b"interval": 1, b"peers": [{b"ip": b"x"}]}), "a peer without ip and port"),
    ],
)
def test_what_is_not_an_answer_is_refused(body: bytes, error: str) -> None:
    with pytest.raises(TrackerError) as caught:
        parse_reply(body)
    assert str(caught.value) == error


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("peer_id=-WC0001-0123456789ab&port=1", "info_hash: 20 bytes, %-escaped, are required"),
        ("info_hash=" + "%41" * 20 + "&port=1", "peer_id: 20 bytes, %-escaped, are required"),
        (
            "info_hash=" + "%41" * 20 + "&peer_id=" + "B" * 20 + "&port=0",
            "port: a port number is required",
        ),
        (
            "info_hash=" + "%41" * 20 + "&peer_id=" + "B" * 20 + "&port=1&event=paused",
            "event: one of started, stopped, completed",
        ),
    ],
)
def test_a_tracker_refuses_an_incomplete_announce(query: str, error: str) -> None:
    with pytest.raises(TrackerError) as caught:
        parse_announce_query(query)
    assert str(caught.value) == error


def test_a_peer_is_a_node_root() -> None:
    assert peer_root("192.0.2.1", 8080) == "http://192.0.2.1:8080"
    assert peer_root("2001:db8::1", 443) == "http://[2001:db8::1]:443"
