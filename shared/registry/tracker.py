"""The HTTP tracker protocol of BitTorrent, both ends, with no I/O (BEP 3 "Trackers", BEP 23
compact peer lists, BEP 7 ``peers6``).

A node announces itself for its network's info_hash to the key file's trackers and learns the
addresses of the other nodes of the network (seed 004: "The tracker service returns IP addresses
of machines who participate in the same network"). Any standard tracker serves (a test runs
Debian's opentracker), and a wiscat node's ``GET /registry/announce`` answers the same protocol.

The request (a GET; BEP 3)::

    ?info_hash=<20 bytes, %-escaped>&peer_id=<20 bytes>&port=N&uploaded=0&downloaded=0
     &left=0&compact=1&numwant=50[&event=started|stopped]

``left=0``: a node holds the whole "torrent" (the genesis block) and seeds it. The answer is a
bencoded dictionary: ``failure reason``, or ``interval`` (seconds until the next regular
announce, honoured), optional ``min interval``, and ``peers``: 6 bytes a peer in the compact
form (BEP 23: 4 of IPv4 address, 2 of port, network order), or a list of dictionaries with
``ip`` and ``port`` (BEP 3); ``peers6`` holds 18 bytes an IPv6 peer (BEP 7).

A peer at ``ip:port`` is the wiscat node whose root is ``http://ip:port`` (a tracker knows no
scheme). What such a peer serves is trusted only after its status names the same info_hash and
its blocks verify back to the key file's genesis block; before any connection, its address is
held to the outbound address rules (:mod:`wiscat.shared.registry.addresses`).
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import quote_from_bytes, unquote_to_bytes

from wiscat.shared.registry.bencode import BencodeError, Value, decode, encode

PEER_ID_PREFIX = b"-WC0001-"  # Azureus-style client id (BEP 20): wiscat, version 0.0.0.1
NUMWANT = 50
EVENTS = ("started", "stopped", "completed")
MAX_REPLY_BYTES = 1024 * 1024
# an interval a tracker gives is held within these bounds: a zero would make a node hammer it,
# a week would make a node that restarts unknown for that long
MIN_INTERVAL_SECONDS = 1
MAX_INTERVAL_SECONDS = 6 * 3600


class TrackerError(Exception):
    """A tracker's answer that gives no peers: its ``failure reason``, or not the protocol."""


def new_peer_id() -> bytes:
    """A peer id for this process: the client prefix and 12 random characters."""
    return PEER_ID_PREFIX + secrets.token_hex(6).encode("ascii")


@dataclass(frozen=True)
class Announce:
    """One announce request."""

    info_hash: bytes
    peer_id: bytes
    port: int
    event: str | None = None
    compact: bool = True
    numwant: int = NUMWANT


def announce_url(tracker: str, announce: Announce) -> str:
    """The tracker's announce URL with the request in its query, every byte %-escaped (BEP 3:
    info_hash is "a 20-byte string ... escaped"); a query the URL holds already is kept."""
    fields: list[tuple[str, bytes]] = [
        ("info_hash", announce.info_hash),
        ("peer_id", announce.peer_id),
        ("port", str(announce.port).encode()),
        ("uploaded", b"0"),
        ("downloaded", b"0"),
        ("left", b"0"),
        ("compact", b"1" if announce.compact else b"0"),
        ("numwant", str(announce.numwant).encode()),
    ]
    if announce.event:
        fields.append(("event", announce.event.encode()))
    query = "&".join(f"{name}={quote_from_bytes(value, safe='')}" for name, value in fields)
    return f"{tracker}{'&' if '?' in tracker else '?'}{query}"


@dataclass(frozen=True)
class TrackerReply:
    """A tracker's answer to an announce: when to come back and which peers it knows."""

    interval: int
    peers: tuple[tuple[str, int], ...]  # (IP address or host name, port)
    min_interval: int | None = None

    @property
    def wait_seconds(self) -> int:
        """How long until the next regular announce, in the bounds this node keeps."""
        wanted = max(self.interval, self.min_interval or 0)
        return min(max(wanted, MIN_INTERVAL_SECONDS), MAX_INTERVAL_SECONDS)


def parse_reply(body: bytes) -> TrackerReply:
    """A tracker's answer; :class:`TrackerError` with its failure reason or what is wrong."""
    try:
        reply = decode(body, max_bytes=MAX_REPLY_BYTES)
    except BencodeError as exc:
        raise TrackerError(f"the answer is not bencoded: {exc}") from exc
    if not isinstance(reply, dict):
        raise TrackerError("the answer is not a dictionary")
    if b"failure reason" in reply:
        reason = reply[b"failure reason"]
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else repr(reason)
        raise TrackerError(f"the tracker refused: {text[:300]}")
    interval = reply.get(b"interval")
    if not isinstance(interval, int) or interval < 0:
        raise TrackerError("the answer has no interval")
    min_interval = reply.get(b"min interval")
    peers = [*_peers(reply.get(b"peers", b""), 4), *_peers(reply.get(b"peers6", b""), 16)]
    return TrackerReply(
        interval,
        tuple(peers),
        min_interval if isinstance(min_interval, int) and min_interval >= 0 else None,
    )


def _peers(value: Value, width: int) -> list[tuple[str, int]]:
    if isinstance(value, bytes):  # BEP 23 (and BEP 7 for IPv6)
        step = width + 2
        if len(value) % step:
            raise TrackerError(f"a compact peer list of {len(value)} bytes, not {step} a peer")
        return [
            (
                str(ipaddress.ip_address(value[at : at + width])),
                int.from_bytes(value[at + width : at + step], "big"),
            )
            for at in range(0, len(value), step)
        ]
    if isinstance(value, list):  # BEP 3's dictionary model
        found = []
        for entry in value:
            if not isinstance(entry, dict):
                raise TrackerError("a peer is not a dictionary")
            ip, port = entry.get(b"ip"), entry.get(b"port")
            if not isinstance(ip, bytes) or not isinstance(port, int):
                raise TrackerError("a peer without ip and port")
            found.append((ip.decode("ascii", "replace"), port))
        return found
    raise TrackerError("peers is neither a string nor a list")


# -- the tracker's side ---------------------------------------------------------------------------


def parse_announce_query(query: str) -> Announce:
    """An announce request from the raw query string of the URL (info_hash and peer_id are
    bytes, which a decoded query string cannot hold); :class:`TrackerError` says what is
    missing."""
    fields: dict[str, bytes] = {}
    for part in query.split("&"):
        name, _, value = part.partition("=")
        fields.setdefault(name, unquote_to_bytes(value.replace("+", " ")))
    info_hash, peer_id = fields.get("info_hash", b""), fields.get("peer_id", b"")
    if len(info_hash) != 20:
        raise TrackerError("info_hash: 20 bytes, %-escaped, are required")
    if len(peer_id) != 20:
        raise TrackerError("peer_id: 20 bytes, %-escaped, are required")
    port_text = fields.get("port", b"")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise TrackerError("port: a port number is required")
    event = fields.get("event", b"").decode("ascii", "replace") or None
    if event is not None and event not in EVENTS:
        raise TrackerError(f"event: one of {', '.join(EVENTS)}")
    numwant = fields.get("numwant", b"")
    return Announce(
        info_hash,
        peer_id,
        int(port_text),
        event,
        compact=fields.get("compact", b"1") != b"0",
        numwant=min(int(numwant), 200) if numwant.isdigit() else NUMWANT,
    )


def reply_body(interval: int, peers: list[tuple[str, int]]) -> bytes:
    """A tracker's answer in the compact form (BEP 23; ``peers6``, BEP 7, for IPv6 peers), given
    whatever the request's ``compact`` (as opentracker does: it answers compact only). Peers
    known by a host name have no compact form and are left out."""
    v4, v6 = bytearray(), bytearray()
    for host, port in peers:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            continue
        (v4 if address.version == 4 else v6).extend(address.packed + port.to_bytes(2, "big"))
    answer: dict[bytes, Value] = {b"interval": interval, b"peers": bytes(v4)}
    if v6:
        answer[b"peers6"] = bytes(v6)
    return encode(answer)


def failure_body(reason: str) -> bytes:
    """A tracker's refusal (BEP 3: "failure reason ... a human readable string")."""
    return encode({b"failure reason": reason.encode("utf-8")})


def peer_root(host: str, port: int) -> str:
    """The root URL of the node a tracker names: ``http://ip:port`` (brackets for IPv6)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"
