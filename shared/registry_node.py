"""One registry node: validates submitted URLs, mints blocks, accepts and relays blocks,
learns its peers (key file, tracker) and pulls what it misses.

Exception tree (what :meth:`RegistryNode.submit` raises, each with the reason)::

    SubmitError            the URL was not accepted; ``status`` is the HTTP status to answer
     +-- UrlRefused        400: malformed, unreachable, refused address, not OAI-PMH 2.0
     +-- UrlExists         409: in the chain or waiting in the pool already
     +-- NotMinting        503: this node has no key a closed network lists, so it cannot make
                           blocks
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lxml import etree

from wiscat.shared.db import links as link_store
from wiscat.shared.db import registry as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.linkspec import REGISTRY_LINK_PREFIX, LinkSpecError, build_link, set_kind
from wiscat.shared.oaipmh.errors import OAIError
from wiscat.shared.oaipmh.pages import ResponseError, has_doctype, read_identify
from wiscat.shared.registry.chain import (
    MAX_TRANSACTIONS,
    Block,
    ChainError,
    InvalidBlock,
    Transaction,
    UnknownParent,
    better_tip,
    blocks_from_xml,
    blocks_to_xml,
    mine,
    public_key_text,
    url_hash,
    url_problem,
)
from wiscat.shared.registry.discovery import (
    Discovery,
    PeerStatus,
    parse_status,
)
from wiscat.shared.registry.keyfile import Network
from wiscat.shared.registry.safe_fetch import (
    FetchError,
    ForbiddenAddress,
    ForbiddenPort,
    SafeFetcher,
)
from wiscat.shared.registry.tracker import peer_root
from wiscat.shared.tasks import wait_for_event
from wiscat.shared.text import clipped
from wiscat.shared.urls import safe_url

log = logging.getLogger("wiscat.registry")

BLOCKS_PER_PAGE = 500
# a tracker answers the nodes that announced themselves within this time
TRACKER_MEMBER_TTL = timedelta(hours=1)
MAX_PULL_BLOCKS = 1_000_000
MAX_BLOCKS_PAGE_BYTES = 64 * 1024 * 1024
FORGET_AFTER_FAILURES = 20
# What a submitter is told whenever the fetch gives no HTTP answer: a refused address, a closed or
# filtered port, no answer in time, a name that does not resolve, a TLS or protocol failure. One
# text for all, so that POST /urls cannot tell them apart and serve as a scanner (RELIABILITY
# S11); the node's log keeps the detail.
UNREACHABLE = "the repository cannot be reached from this registry node (its log says why)"
NOT_IDENTIFY = (
    "the answer to Identify is not an OAI-PMH 2.0 Identify response (this node's log says why)"
)


class SubmitError(Exception):
    """The URL was not accepted."""

    status = 500


class UrlRefused(SubmitError):
    """Malformed, unreachable, at a refused address, or not a conforming OAI-PMH 2.0
    repository."""

    status = 400


class UrlExists(SubmitError):
    """The URL is in the chain, or waits in the pool, already."""

    status = 409


class NotMinting(SubmitError):
    """This node holds no key that the (closed) network lists, so it cannot make blocks."""

    status = 503


@dataclass(frozen=True)
class NodeConfig:
    """How a registry node runs: its own addresses and set, and what it may do on its own."""

    node_url: str  # this node's root, announced to the tracker
    own_base_url: str  # this node's /oai: never a candidate link (it would harvest itself)
    own_set: str
    sync_seconds: float = 60.0
    auto_enable_links: bool = False
    allow_private_peers: bool = False  # addresses from a tracker (discovery.py)
    register_self: bool = False  # submit own_base_url at start (seed 004, "Future Work")


class RegistryNode:
    """A node of one registry network, with its database pool and outbound fetcher."""

    def __init__(
        self,
        pool: Pool,
        network: Network,
        key: Ed25519PrivateKey | None,
        fetcher: SafeFetcher,
        config: NodeConfig,
    ) -> None:
        self.pool = pool
        self.network = network
        self.fetcher = fetcher
        self.config = config
        if key is None and network.is_open:
            # an open network takes a block of any key: one made for this process will do
            # (WISCAT_REGISTRY_PRIVATE_KEY_FILE keeps a node's blocks under one key across starts)
            key = Ed25519PrivateKey.generate()
            log.info("open network %s: this node signs its blocks with a new key", network.name)
        self.key = key
        self.public_key = public_key_text(key.public_key()) if key else None
        self.candidate_set = f"REGISTRY-{network.name}"
        parts = urlsplit(config.node_url)
        self.discovery = Discovery(
            network,
            fetcher,
            port=parts.port or (443 if parts.scheme == "https" else 80),
            allow_private_peers=config.allow_private_peers,
            fetch_ports=fetcher.ports,
        )
        self._mint_wanted = asyncio.Event()
        self._sync_wanted = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        if self.public_key and not network.is_open and self.public_key not in network.member_keys:
            log.warning(
                "this node's key is not a member of network %s: it relays but cannot mint",
                network.name,
            )

    @property
    def can_mint(self) -> bool:
        """Whether this node has a key the network takes blocks from."""
        if self.key is None:
            return False
        return self.network.is_open or self.public_key in self.network.member_keys

    # -- life ------------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Start the chain with the genesis block (or check it) and record the key file's peers."""
        await store.ensure_genesis(self.pool, self.network.genesis)
        for url in self.network.peers:
            if url.rstrip("/") != self.config.node_url.rstrip("/"):
                await store.add_peer(self.pool, url, "keyfile")

    async def start(self) -> None:
        """:meth:`prepare`, then the sync and minting loops in the background."""
        await self.prepare()
        self._loops = [
            asyncio.create_task(self._sync_loop(), name="registry-sync"),
            asyncio.create_task(self._mint_loop(), name="registry-mint"),
        ]
        if self.config.register_self:
            self._loops.append(asyncio.create_task(self._register_self(), name="registry-self"))
        self._mint_wanted.set()

    async def stop(self) -> None:
        """Cancel the background loops and tasks, and wait for them to end."""
        for task in [*self._loops, *self._tasks]:
            task.cancel()
        await self.discovery.stop()
        for task in [*self._loops, *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._loops, self._tasks = [], set()

    def wake_sync(self) -> None:
        """Have the sync loop run now rather than at its next interval."""
        self._sync_wanted.set()

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- submitted URLs --------------------------------------------------------------------------

    async def validate(self, url: str) -> None:
        """Call the URL's Identify; :class:`UrlRefused` unless it is a conforming OAI-PMH 2.0
        repository whose Identify gives exactly this base URL."""
        problem = url_problem(url)
        if problem:
            raise UrlRefused(f"{url!r} is malformed: {problem}")
        try:
            response = await self.fetcher.get(url, {"verb": "Identify"})
        except ForbiddenPort as exc:  # told from the URL (or a redirect's): never connected to
            raise UrlRefused(str(exc)) from exc
        except ForbiddenAddress as exc:
            log.warning("submitted URL %s refused: %s", safe_url(url), exc)
            raise UrlRefused(UNREACHABLE) from exc
        except FetchError as exc:
            log.info("submitted URL %s cannot be reached: %s", safe_url(url), exc)
            raise UrlRefused(UNREACHABLE) from exc
        # The refusals below are fixed texts that repeat nothing of the answer, so that POST
        # /urls cannot be used to read what a server says (RELIABILITY S08); the log has it.
        if response.status != 200:
            raise UrlRefused(f"Identify answered HTTP {response.status}, not 200")
        if has_doctype(response.body):
            raise UrlRefused("the Identify response declares a DOCTYPE (refused)")
        try:
            info = read_identify(response.body)
        except (ResponseError, OAIError, etree.XMLSyntaxError) as exc:
            log.info("submitted URL %s does not answer Identify: %s", safe_url(url), exc)
            raise UrlRefused(NOT_IDENTIFY) from exc
        if info.protocol_version != "2.0":
            log.info(
                "submitted URL %s gives protocolVersion %r",
                safe_url(url),
                clipped(info.protocol_version, 200),
            )
            raise UrlRefused("the Identify response's protocolVersion is not 2.0")
        if info.base_url != url:
            log.info(
                "submitted URL %s gives the baseURL %r", safe_url(url), clipped(info.base_url, 200)
            )
            raise UrlRefused(
                "the Identify response's baseURL is not the submitted URL, character for character"
            )

    async def submit(self, url: str) -> Transaction:
        """Validate ``url`` and put its transaction in the pool; the minting loop puts it in a
        block. The URL is kept exactly as given."""
        if not self.can_mint:
            raise NotMinting("this node holds no member key of the network: submit elsewhere")
        problem = url_problem(url)
        if problem:
            raise UrlRefused(f"{url!r} is malformed: {problem}")
        if await store.url_status(self.pool, url_hash(url)):
            raise UrlExists(f"{url} is in the registry already")
        await self.validate(url)
        tx = Transaction.new(url)
        if not await store.pool_add_new(self.pool, tx):
            raise UrlExists(f"{url} is in the registry already")
        log.info("accepted %s into the pool", url)
        self._mint_wanted.set()
        return tx

    async def _register_self(self) -> None:
        """Submit this node's own base URL (seed 004, "Automated Registration"), again every
        sync interval while it fails: at start-up the node does not listen yet, so its own
        Identify cannot answer the first try."""
        url = self.config.own_base_url
        while True:
            try:
                await self.submit(url)
            except UrlExists:
                return
            except NotMinting as exc:
                log.warning("this node's base URL is not registered: %s", exc)
                return
            except SubmitError as exc:
                log.info("this node's base URL %s is not registered yet: %s", url, exc)
            else:
                log.info("registered this node's base URL %s", url)
                return
            await asyncio.sleep(self.config.sync_seconds)

    async def wait_in_chain(self, tx: Transaction, seconds: float) -> bool:
        """Wait until ``tx`` is in the main chain (True) or ``seconds`` pass (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            if await store.url_status(self.pool, tx.tx_hash) == "chain":
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)

    # -- blocks ----------------------------------------------------------------------------------

    async def accept(self, block: Block, *, relay: bool = True) -> store.Accepted:
        """Check a block and store it (fork choice included); raise :class:`InvalidBlock`,
        :class:`NotAMember` or :class:`UnknownParent`."""
        block.check(self.network.difficulty, self.network.member_keys)
        accepted = await store.add_block(self.pool, block, self.network.difficulty)
        if accepted.known:
            return accepted
        log.info(
            "block %s... at height %d with %d URL(s)%s",
            block.hash[:12],
            accepted.height,
            len(block.transactions),
            " is the new tip" if accepted.new_tip else " (side branch)",
        )
        if accepted.entered_main:
            await self._candidate_links(accepted.entered_main)
        if accepted.new_tip:
            self._mint_wanted.set()
        if relay:
            self._background(self.push(block))
        return accepted

    async def receive(self, body: bytes) -> list[store.Accepted]:
        """Blocks sent by a peer (``POST /registry/blocks``); an orphan asks for a sync."""
        blocks = blocks_from_xml(body)
        results = []
        for block in blocks:
            try:
                results.append(await self.accept(block))
            except UnknownParent:
                self.wake_sync()
                raise
        return results

    async def blocks_after(self, locator: Sequence[str], limit: int) -> bytes | None:
        """The main chain after the highest block of ``locator`` it holds, or None."""
        height = await store.main_height_of(self.pool, locator)
        if height is None:
            return None
        limit = max(1, min(limit, BLOCKS_PER_PAGE))
        return blocks_to_xml(await store.main_blocks_after(self.pool, height, limit))

    async def mint_once(self) -> Block | None:
        """Put the pool's oldest transactions in a block on the tip; None if the pool is empty."""
        if not self.can_mint:
            return None
        assert self.key is not None
        waiting = await store.pool_take(self.pool, MAX_TRANSACTIONS)
        if not waiting:
            return None
        tip = await store.chain_tip(self.pool)
        assert tip is not None
        block = await asyncio.to_thread(mine, tip.hash, waiting, self.network.difficulty, self.key)
        try:
            await self.accept(block)
        except InvalidBlock as exc:
            # a peer's block put one of these URLs in the chain while we mined
            log.info("minted block dropped (%s); pool cleaned", exc)
            done = [tx.tx_hash for tx in waiting if await store.url_status(self.pool, tx.tx_hash)]
            await store.pool_remove(self.pool, [h for h in done if h])
        return block

    async def _mint_loop(self) -> None:
        while True:
            await self._mint_wanted.wait()
            self._mint_wanted.clear()
            try:
                while await self.mint_once() is not None:
                    pass
            except Exception:  # the loop outlives any one failure; retried shortly
                log.exception("minting failed")
                await asyncio.sleep(1)
                self._mint_wanted.set()

    async def _candidate_links(self, transactions: Sequence[Transaction]) -> None:
        """Newly accepted URLs become candidate links: disabled (unless configured otherwise),
        harvesting the whole catalogue into the set ``REGISTRY-<network>``."""
        for tx in transactions:
            if tx.base_url == self.config.own_base_url:
                continue
            try:
                new = build_link(
                    name=f"{REGISTRY_LINK_PREFIX}{tx.tx_hash[:16]}",
                    url=tx.base_url,
                    remote_set=None,
                    into=self.candidate_set,
                    own_set=self.config.own_set,
                    enabled=self.config.auto_enable_links,
                    by_registry=True,
                )
                await link_store.add_link(
                    self.pool, new, set_kind=set_kind(new.local_set, self.config.own_set)
                )
            except link_store.LinkExists:
                continue
            except LinkSpecError as exc:
                log.warning("no candidate link for %s: %s", tx.base_url, exc)

    # -- peers -----------------------------------------------------------------------------------

    async def push(self, block: Block) -> None:
        """Send a block to every peer (a block is "sent on until every member ... has received
        it"); a peer that lacks its parent pulls by itself."""
        body = blocks_to_xml([block])
        peers = await store.all_peers(self.pool)
        await asyncio.gather(
            *(self._send(peer.url, body) for peer in peers if not self._is_self(peer.url))
        )

    async def _send(self, url: str, body: bytes) -> None:
        try:
            response = await self.fetcher.post(
                url.rstrip("/") + "/registry/blocks", data=body, content_type="application/xml"
            )
        except FetchError as exc:
            await store.peer_failed(self.pool, url, str(exc))
            return
        if response.status in (200, 409):
            await store.peer_ok(self.pool, url)
        else:
            reason = response.body[:200].decode("utf-8", "replace")
            await store.peer_failed(self.pool, url, f"push: HTTP {response.status} {reason}")

    async def _send_missing(self, url: str, their_tip: str) -> None:
        """Send a peer on a worse chain the main-chain blocks after the last one both hold (a
        page a round). Pushes reach only the peers a node knows, and a node pulls only from
        its own: the first node of an open network to announce knows none, so a block minted
        before the others knew it would never reach it, and a tie at one height would stand."""
        response = await self.fetcher.request(
            "GET",
            url.rstrip("/") + "/registry/blocks",
            params=[("after", h) for h in await store.locator(self.pool)] + [("limit", "1")],
            max_bytes=MAX_BLOCKS_PAGE_BYTES,
        )
        if response.status != 200:
            raise FetchError(f"blocks: HTTP {response.status}")
        theirs = blocks_from_xml(response.body)
        shared = theirs[0].previous_hash if theirs else their_tip
        height = await store.main_height_of(self.pool, [shared])
        if height is None:
            return
        missing = await store.main_blocks_after(self.pool, height, BLOCKS_PER_PAGE)
        if missing:
            log.info("sending %d block(s) to %s, whose chain is behind", len(missing), url)
            await self._send(url, blocks_to_xml(missing))

    def _is_self(self, url: str) -> bool:
        return url.rstrip("/") == self.config.node_url.rstrip("/")

    async def announce(self, *, force: bool = False) -> list[str]:
        """Announce this node to the network's trackers (BitTorrent's HTTP protocol, when their
        interval has passed or ``force``) and keep as peers the nodes they name that serve this
        network (:mod:`wiscat.shared.registry.discovery`); the peers learnt."""
        own_tracker = self.config.node_url.rstrip("/") + "/registry/announce"
        if own_tracker in self.network.tracker_urls:
            # this node is the network's tracker: its members are in this database already (an
            # HTTP call to itself would also fail while the node starts, before it listens)
            name = self.network.info_hash.hex()
            await store.announce(self.pool, name, self.config.node_url, None, TRACKER_MEMBER_TTL)
            answered = await store.network_members(self.pool, name, TRACKER_MEMBER_TTL)
        else:
            addresses = await self.discovery.announce(force=force)
            if addresses is None:  # not due, or no tracker answered
                addresses = self.discovery.last_addresses
            answered = [peer_root(host, port) for host, port in addresses]
        known = {peer.url for peer in await store.all_peers(self.pool)}
        learnt = await self.discovery.learn(answered, known, self.config.node_url, self.peer_status)
        for url in learnt:
            if await store.add_peer(self.pool, url, "tracker"):
                log.info("learnt peer %s from the tracker", url)
        return learnt

    async def peer_status(self, url: str) -> PeerStatus:
        """The peer's status; InvalidBlock if it is of another network, or this node itself."""
        response = await self.fetcher.get(url.rstrip("/") + "/registry/status")
        if response.status != 200:
            raise FetchError(f"status: HTTP {response.status}")
        status = parse_status(response.body)
        if (
            status.network != self.network.name
            or status.genesis != self.network.genesis.hash
            or status.info_hash not in (None, self.network.info_hash.hex())
        ):
            raise InvalidBlock(f"{url} is not a node of network {self.network.name}")
        if status.peer_id == self.discovery.peer_id.hex():
            raise InvalidBlock(f"{url} is this node")
        return status

    async def pull_from(self, url: str) -> int:
        """Fetch and accept the blocks a peer holds on a better chain, or send a peer on a worse
        one what it lacks; the number accepted.

        Every page is checked before it is stored: each block links to the one before it, back
        to a block stored here (for a node that joins, the key file's genesis block), carries its
        proof of work and a member's signature, and repeats no URL.
        """
        status = await self.peer_status(url)
        ours = await store.chain_tip(self.pool)
        assert ours is not None
        if not better_tip(status.tip, ours, self.network.difficulty):
            if status.tip.hash != ours.hash:
                await self._send_missing(url, status.tip.hash)
            return 0
        locator = await store.locator(self.pool)
        accepted = 0
        last: Block | None = None
        while accepted < MAX_PULL_BLOCKS:
            params = [("after", h) for h in locator] + [("limit", str(BLOCKS_PER_PAGE))]
            response = await self.fetcher.request(
                "GET",
                url.rstrip("/") + "/registry/blocks",
                params=params,
                max_bytes=MAX_BLOCKS_PAGE_BYTES,
            )
            if response.status != 200:
                raise FetchError(f"blocks: HTTP {response.status}")
            blocks = blocks_from_xml(response.body)
            if not blocks:
                break
            self._check_segment(blocks)
            for block in blocks:
                result = await self.accept(block, relay=False)
                accepted += 0 if result.known else 1
            last = blocks[-1]
            locator = [last.hash]
            if len(blocks) < BLOCKS_PER_PAGE:
                break
        if last is not None and accepted:
            self._background(self.push(last))
        return accepted

    def _check_segment(self, blocks: Sequence[Block]) -> None:
        seen: set[str] = set()
        for previous, block in zip([None, *blocks[:-1]], blocks, strict=True):
            if previous is not None and block.previous_hash != previous.hash:
                raise InvalidBlock("the blocks sent do not form a chain")
            block.check(self.network.difficulty, self.network.member_keys)
            for tx in block.transactions:
                if tx.tx_hash in seen:
                    raise InvalidBlock(f"{tx.base_url!r} is in the chain twice")
                seen.add(tx.tx_hash)

    async def sync_once(self) -> int:
        """Announce, then pull from every peer; the number of blocks accepted."""
        try:
            await self.announce()
        except (FetchError, ChainError) as exc:
            log.warning("announce: %s", exc)
        total = 0
        for peer in await store.all_peers(self.pool):
            if self._is_self(peer.url):
                continue
            try:
                total += await self.pull_from(peer.url)
            except (FetchError, ChainError) as exc:
                log.warning("sync with %s failed: %s", peer.url, exc)
                if peer.source == "tracker" and peer.failures + 1 >= FORGET_AFTER_FAILURES:
                    # anyone can announce anything to a tracker: a dead or foreign URL goes
                    # (the tracker hands it back while it is announced, so a live one returns)
                    await store.remove_peer(self.pool, peer.url)
                else:
                    await store.peer_failed(self.pool, peer.url, str(exc))
            else:
                await store.peer_ok(self.pool, peer.url)
        return total

    async def _sync_loop(self) -> None:
        while True:
            try:
                await self.sync_once()
            except Exception:  # the loop outlives any one failure; retried next round
                log.exception("registry sync failed")
            await wait_for_event(self._sync_wanted, self.config.sync_seconds)
            self._sync_wanted.clear()
