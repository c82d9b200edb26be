"""The registry's blocks, main chain, pool, peers and tracker members (docs/registry.md).

Every block received is stored, whatever its branch; ``registry_chain`` names the main chain, the
branch the fork-choice rule (:func:`wiscat.shared.registry.chain.better_tip`) picks.
:func:`add_block`
does the whole acceptance of one block in one transaction, under an advisory lock, so replicas
and processes sharing the database never interleave two changes of the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import asyncpg

from wiscat.shared.db.errors import StoreRefusal
from wiscat.shared.db.pool import Connection, Pool
from wiscat.shared.db.queries import load
from wiscat.shared.registry.chain import (
    Block,
    InvalidBlock,
    Tip,
    Transaction,
    UnknownParent,
    better_tip,
)

_SQL = load("registry.sql")

Executor = Connection | Pool


class GenesisMismatch(StoreRefusal):
    """The database holds the chain of another network (another genesis block)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    """What storing one block did."""

    known: bool  # the block was stored already: nothing changed
    height: int
    new_tip: bool = False  # the main chain now ends with this block
    entered_main: list[Transaction] = field(default_factory=list)
    returned_to_pool: int = 0


@dataclass(frozen=True, slots=True)
class Peer:
    """A registry node this node talks to, where it was learnt from, and how it answers."""

    url: str
    source: str
    added_at: datetime
    last_ok_at: datetime | None
    last_error: str | None
    failures: int


def _tx(row: asyncpg.Record) -> Transaction:
    return Transaction(row["tx_hash"], row["created_at"], row["base_url"])


async def ensure_genesis(db: Pool, genesis: Block) -> None:
    """Start the chain with the key file's genesis block, or check that it starts with it."""
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(_SQL["lock_chain"])
        stored = await conn.fetchval(_SQL["genesis_hash"])
        if stored is None:
            await _insert(conn, genesis, 0)
            await conn.execute(_SQL["extend_chain"], [0], [genesis.hash])
        elif stored != genesis.hash:
            raise GenesisMismatch(
                "the database holds the chain of another registry network (genesis "
                f"{stored[:16]}..., the key file's is {genesis.hash[:16]}...)"
            )


async def chain_tip(db: Executor) -> Tip | None:
    """The main chain's last block; None before the genesis block is stored."""
    row = await db.fetchrow(_SQL["chain_tip"])
    return Tip(row["height"], row["block_hash"]) if row else None


async def _insert(conn: Connection, block: Block, height: int) -> bool:
    inserted = await conn.fetchval(
        _SQL["insert_block"],
        block.hash,
        block.previous_hash,
        height,
        block.transactions_hash,
        block.nonce,
        block.signer,
        block.signature,
        block.to_xml(),
    )
    if inserted is None:
        return False
    txs = block.transactions
    await conn.execute(
        _SQL["insert_transactions"],
        block.hash,
        list(range(len(txs))),
        [tx.tx_hash for tx in txs],
        [tx.created_at for tx in txs],
        [tx.base_url for tx in txs],
    )
    return True


async def _branch(conn: Connection, hash_: str) -> tuple[list[tuple[str, int]], int]:
    """The blocks from ``hash_`` back to the main chain, off it (oldest first), and the height
    where the branch leaves the main chain."""
    rows = await conn.fetch(_SQL["branch_off_main"], hash_)
    off_main = [(row["hash"], row["height"]) for row in rows if not row["on_main"]]
    on_main = [row["height"] for row in rows if row["on_main"]]
    if not on_main:  # pragma: no cover - every stored block descends from the genesis block
        raise InvalidBlock("the block's branch does not reach the main chain")
    return sorted(off_main, key=lambda item: item[1]), on_main[0]


async def add_block(db: Pool, block: Block, difficulty: int) -> Accepted:
    """Store a block that passed :meth:`Block.check`, and apply the fork-choice rule.

    Raise :class:`UnknownParent` when its previous block is not stored here, and
    :class:`InvalidBlock` when its branch holds one of its URLs already.
    """
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(_SQL["lock_chain"])
        known = await conn.fetchrow(_SQL["block_info"], block.hash)
        if known is not None:
            return Accepted(known=True, height=known["height"])
        parent = await conn.fetchrow(_SQL["block_info"], block.previous_hash)
        if parent is None:
            raise UnknownParent(f"previous-hash {block.previous_hash[:16]}... is not known here")
        height = parent["height"] + 1
        tx_hashes = [tx.tx_hash for tx in block.transactions]
        off_main, fork_height = await _branch(conn, block.previous_hash)
        repeated = {
            row["tx_hash"]
            for row in await conn.fetch(_SQL["main_transactions_among"], tx_hashes, fork_height)
        }
        if off_main:
            repeated |= {
                row["tx_hash"]
                for row in await conn.fetch(
                    _SQL["blocks_transactions_among"], [h for h, _ in off_main], tx_hashes
                )
            }
        if repeated:
            urls = [tx.base_url for tx in block.transactions if tx.tx_hash in repeated]
            raise InvalidBlock(f"the chain holds {urls[0]!r} already")
        await _insert(conn, block, height)
        tip = await chain_tip(conn)
        assert tip is not None
        if not better_tip(Tip(height, block.hash), tip, difficulty):
            return Accepted(known=False, height=height)
        entered, returned = await _switch_to(conn, block.hash)
        return Accepted(
            known=False,
            height=height,
            new_tip=True,
            entered_main=entered,
            returned_to_pool=returned,
        )


async def _switch_to(conn: Connection, tip_hash: str) -> tuple[list[Transaction], int]:
    """Make the branch ending at ``tip_hash`` the main chain; the transactions of the branch left
    behind that the new one lacks go back to the pool."""
    new_blocks, fork_height = await _branch(conn, tip_hash)
    truncated = await conn.fetch(_SQL["truncate_chain"], fork_height)
    old_hashes = [row["block_hash"] for row in truncated]
    await conn.execute(_SQL["extend_chain"], [h for _, h in new_blocks], [h for h, _ in new_blocks])
    new_txs = [
        _tx(row)
        for row in await conn.fetch(_SQL["blocks_transactions"], [h for h, _ in new_blocks])
    ]
    new_hashes = {tx.tx_hash for tx in new_txs}
    await conn.execute(_SQL["pool_remove"], list(new_hashes))
    returned = []
    if old_hashes:
        returned = [
            tx
            for tx in map(_tx, await conn.fetch(_SQL["blocks_transactions"], old_hashes))
            if tx.tx_hash not in new_hashes
        ]
        await conn.execute(
            _SQL["pool_restore"],
            [tx.tx_hash for tx in returned],
            [tx.created_at for tx in returned],
            [tx.base_url for tx in returned],
        )
    return new_txs, len(returned)


async def url_status(db: Executor, tx_hash: str) -> str | None:
    """``"chain"``, ``"pool"``, or None when the URL is not known here."""
    row = await db.fetchrow(_SQL["url_status"], tx_hash)
    assert row is not None
    if row["in_chain"]:
        return "chain"
    return "pool" if row["in_pool"] else None


async def pool_add(db: Executor, tx: Transaction) -> bool:
    """Put an accepted transaction in the pool; False if its URL waits there already."""
    return await db.fetchval(_SQL["pool_add"], tx.tx_hash, tx.created_at, tx.base_url) is not None


async def pool_add_new(db: Pool, tx: Transaction) -> bool:
    """Put a newly submitted transaction in the pool; False if its URL is in the main chain or
    the pool already. Under the chain's lock, so of two submissions of one URL (at two replicas
    of a node, say) one only gets in, and none while a block that holds it is being stored."""
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(_SQL["lock_chain"])
        if await url_status(conn, tx.tx_hash):
            return False
        return await pool_add(conn, tx)


async def pool_take(db: Executor, limit: int) -> list[Transaction]:
    """The oldest waiting transactions, at most ``limit``, for the next block."""
    return [_tx(row) for row in await db.fetch(_SQL["pool_take"], limit)]


async def pool_remove(db: Executor, tx_hashes: Sequence[str]) -> None:
    """Take the transactions now in the main chain out of the pool."""
    await db.execute(_SQL["pool_remove"], list(tx_hashes))


async def pool_size(db: Executor) -> int:
    """How many transactions wait for a block."""
    return int(await db.fetchval(_SQL["pool_size"]))


async def accepted_urls(db: Executor) -> list[Transaction]:
    """Every URL of the main chain in order of appearance."""
    return [_tx(row) for row in await db.fetch(_SQL["accepted_urls"])]


async def main_height_of(db: Executor, locator: Sequence[str]) -> int | None:
    """The height of the highest of ``locator``'s hashes on the main chain, if any."""
    value = await db.fetchval(_SQL["highest_known"], list(locator))
    return int(value) if value is not None else None


async def main_blocks_after(db: Executor, height: int, limit: int) -> list[bytes]:
    """The XML of the main chain's blocks after ``height``, in order."""
    return [bytes(row["xml"]) for row in await db.fetch(_SQL["main_blocks_after"], height, limit)]


async def locator(db: Executor) -> list[str]:
    """Hashes of the main chain at the tip, tip-1, tip-2, tip-4, ... and the genesis block: a
    peer finds in it the last block both nodes share, however far they diverged."""
    tip = await chain_tip(db)
    if tip is None:
        return []
    heights, step, height = [], 1, tip.height
    while height > 0:
        heights.append(height)
        if len(heights) >= 10:
            step *= 2
        height -= step
    heights.append(0)
    return [row["block_hash"] for row in await db.fetch(_SQL["main_hashes_at"], heights)]


async def add_peer(db: Executor, url: str, source: str) -> bool:
    """Remember a peer; False if it is known already."""
    return await db.fetchval(_SQL["upsert_peer"], url, source) is not None


async def remove_peer(db: Executor, url: str) -> bool:
    """Forget the peer ``url``; False if it was not known."""
    return await db.fetchval(_SQL["remove_peer"], url) is not None


async def all_peers(db: Executor) -> list[Peer]:
    """Every known peer."""
    return [Peer(**dict(row)) for row in await db.fetch(_SQL["all_peers"])]


async def peer_ok(db: Executor, url: str) -> None:
    """Note that the peer ``url`` answered."""
    await db.execute(_SQL["peer_ok"], url)


async def peer_failed(db: Executor, url: str, reason: str) -> None:
    """Note that the peer ``url`` did not answer, or answered nonsense, and why."""
    await db.execute(_SQL["peer_failed"], url, reason[:500])


async def announce(
    db: Executor, network: str, url: str, public_key: str | None, max_age: timedelta
) -> None:
    """Tracker side: remember that ``url`` is a node of ``network``, and forget the nodes of any
    network not heard from within ``max_age`` (anyone may announce anything: the table holds
    only what the tracker still answers)."""
    await db.execute(_SQL["forget_silent_members"], max_age)
    await db.execute(_SQL["announce"], network, url, public_key)


async def forget_member(db: Executor, network: str, url: str) -> None:
    """Tracker side: ``url`` left ``network`` (BitTorrent's ``event=stopped``)."""
    await db.execute(_SQL["forget_member"], network, url)


async def network_members(
    db: Executor, network: str, max_age: timedelta, limit: int = 200
) -> list[str]:
    """Tracker side: the nodes of ``network`` heard from within ``max_age``."""
    return [row["url"] for row in await db.fetch(_SQL["network_members"], network, max_age, limit)]
