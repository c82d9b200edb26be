"""Finding the other nodes of a network through its key file's BitTorrent trackers.

:class:`Discovery` announces the node to the trackers with the HTTP tracker protocol
(:mod:`wiscat.shared.registry.tracker`): the tiers of ``announce-list`` in order, the trackers of
a tier in order, until one answers (BEP 12); ``event=started`` the first time, then again only
when the tracker's ``interval`` has passed; ``event=stopped`` when the node stops.

Every address a tracker returns is untrusted input (anyone may announce anything to a tracker):

1. it is held to the outbound address rules before any connection: a loopback, private or other
   non-global address is refused unless the operator allows them
   (``WISCAT_REGISTRY_ALLOW_PRIVATE_PEERS``), and so is a port the registry does not fetch from;
2. the node is then asked for its status, which must name the same info_hash and genesis block
   (``verify``, given by the node);
3. only then is it a peer, and every block pulled from it is checked back to a block held here.

A node's status (``GET /registry/status``, :func:`status_xml`) says which network it serves:
name, genesis block, info_hash, its tip, and its peer id (so that a node that reached itself
through its own address knows it).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lxml import etree

from wiscat.shared.registry.addresses import address_refusal
from wiscat.shared.registry.chain import InvalidBlock, Tip, parse_xml
from wiscat.shared.registry.keyfile import Network
from wiscat.shared.registry.safe_fetch import FetchError, SafeFetcher
from wiscat.shared.registry.tracker import (
    Announce,
    TrackerError,
    TrackerReply,
    announce_url,
    new_peer_id,
    parse_reply,
)

log = logging.getLogger("wiscat.registry")

STOPPED_TIMEOUT_SECONDS = 2.0


@dataclass
class _TrackerState:
    next_at: float = 0.0  # loop time of the next regular announce
    started: bool = False  # event=started was answered; event=stopped is owed


@dataclass
class Discovery:
    """The trackers of one network, as one node uses them."""

    network: Network
    fetcher: SafeFetcher
    port: int  # the port this node's root listens on, announced
    allow_private_peers: bool = False
    fetch_ports: Collection[int] = ()
    peer_id: bytes = field(default_factory=new_peer_id)
    _trackers: dict[str, _TrackerState] = field(default_factory=dict)
    _order: dict[int, list[str]] = field(default_factory=dict)  # each tier's, as BEP 12 has it
    # the last answer's addresses: those not yet taken are tried again at each sync until the
    # next announce (a node that was starting when the tracker named it is taken then)
    last_addresses: list[tuple[str, int]] = field(default_factory=list)
    _refused: set[str] = field(default_factory=set)

    def peer_refusal(self, host: str, port: int) -> str | None:
        """Why a tracker's ``host:port`` is not to be contacted, or None. A host name (which
        only wiscat's own tracker of old gives) is checked when it is connected to, by the
        fetcher, for every address it resolves to."""
        if port not in self.fetch_ports:
            return f"port {port} is not one this registry node fetches from"
        if self.allow_private_peers or not _is_address(host):
            return None
        return address_refusal(host)

    async def announce(self, *, force: bool = False) -> list[tuple[str, int]] | None:
        """Announce to the first tracker that answers (BEP 12 order), unless the last answer's
        ``interval`` has not passed (``force``: announce anyway). The addresses it gave, or
        None when no tracker was asked or none answered."""
        loop = asyncio.get_running_loop()
        if not force and any(
            state.started and loop.time() < state.next_at for state in self._trackers.values()
        ):
            return None  # registered at a tracker that asked us to wait
        errors = []
        for n, tier in enumerate(self.network.trackers):
            order = self._order.setdefault(n, list(tier))
            for url in order:
                state = self._trackers.setdefault(url, _TrackerState())
                try:
                    reply = await self._ask(url, None if state.started else "started")
                except (FetchError, TrackerError) as exc:
                    errors.append(f"{url}: {exc}")
                    continue
                state.started = True
                state.next_at = loop.time() + reply.wait_seconds
                order.remove(url)  # BEP 12: the tracker that answered goes first in its tier
                order.insert(0, url)
                self.last_addresses = list(reply.peers)
                return list(reply.peers)
        for error in errors:
            log.warning("tracker %s", error)
        return None

    async def _ask(self, url: str, event: str | None) -> TrackerReply:
        request = Announce(self.network.info_hash, self.peer_id, self.port, event)
        response = await self.fetcher.get(announce_url(url, request), encoded=True)
        if response.status != 200:
            raise TrackerError(f"HTTP {response.status}")
        return parse_reply(response.body)

    async def stop(self) -> None:
        """Tell the trackers announced to that this node leaves (``event=stopped``), briefly."""
        for url, state in self._trackers.items():
            if not state.started:
                continue
            try:
                await asyncio.wait_for(self._ask(url, "stopped"), STOPPED_TIMEOUT_SECONDS)
            except (FetchError, TrackerError, TimeoutError) as exc:
                log.info("tracker %s: event=stopped not delivered: %s", url, exc)
            state.started = False

    async def learn(
        self,
        roots: list[str],
        known: Collection[str],
        own_root: str,
        verify: Callable[[str], Awaitable[object]],
    ) -> list[str]:
        """The node roots a tracker gave that pass the address rules and ``verify`` (same
        network), leaving out those ``known`` already and this node."""
        found = []
        for root in roots:
            if root in known or _same_root(root, own_root):
                continue
            parts = urlsplit(root)
            refusal = self.peer_refusal(
                parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
            )
            if refusal is not None:
                if root not in self._refused:  # once: the same answer is looked at each sync
                    self._refused.add(root)
                    log.warning("peer %s from a tracker refused, not contacted: %s", root, refusal)
                continue
            try:
                await verify(root)
            except Exception as exc:  # any failure: not a node of this network (yet)
                log.info("peer %s from a tracker is not taken: %s", root, exc)
                continue
            found.append(root)
        return found


@dataclass(frozen=True)
class PeerStatus:
    """What a peer's ``/registry/status`` says: its network and the tip of its chain."""

    network: str
    genesis: str
    tip: Tip
    info_hash: str | None = None  # hex; None from a node of a version before the metainfo
    peer_id: str | None = None  # hex: tells a node that it has reached itself


def status_xml(
    network: Network, tip: Tip, public_key: str | None, peer_id: bytes | None = None
) -> bytes:
    """This node's ``/registry/status`` document."""
    root = etree.Element(
        "registry",
        network=network.name,
        genesis=network.genesis.hash,
        difficulty=str(network.difficulty),
        height=str(tip.height),
        tip=tip.hash,
    )
    root.set("info-hash", network.info_hash.hex())
    root.set("open", "true" if network.is_open else "false")
    if public_key:
        root.set("public-key", public_key)
    if peer_id:
        root.set("peer-id", peer_id.hex())
    return etree.tostring(root, encoding="utf-8", xml_declaration=True)


def parse_status(body: bytes) -> PeerStatus:
    """A peer's ``/registry/status`` document; InvalidBlock if it is something else."""
    root = parse_xml(body)
    if root.tag != "registry":
        raise InvalidBlock(f"not a registry status: <{root.tag}>")
    try:
        return PeerStatus(
            root.get("network", ""),
            root.get("genesis", ""),
            Tip(int(root.get("height", "")), root.get("tip", "")),
            root.get("info-hash"),
            root.get("peer-id"),
        )
    except ValueError as exc:
        raise InvalidBlock("the status has no height") from exc


def peers_xml(network: str, urls: Sequence[str]) -> bytes:
    """The ``/registry/peers`` document: the peers this node knows of ``network``."""
    root = etree.Element("peers", network=network)
    for url in urls:
        etree.SubElement(root, "peer").text = url
    return etree.tostring(root, encoding="utf-8", xml_declaration=True)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _same_root(one: str, other: str) -> bool:
    a, b = urlsplit(one), urlsplit(other.rstrip("/"))
    return (a.hostname, a.port) == (b.hostname, b.port or (443 if b.scheme == "https" else 80))
