"""Reading from a hot standby: what the primary's horizon is and how far a standby has replayed.

A list read from a standby must stop where one read from the primary would (invariant 2: short
of every write transaction in progress there), and besides short of what the standby has not yet
replayed. The standby cannot see the primary's transactions in progress; the primary can. So
the primary gives its horizon with its write-ahead log's end at that moment
(:func:`primary_horizon`), and a list on the standby may stop at that horizon once the standby
has replayed past that position (:func:`replayed_position`). Why that suffices: every row dated
before the horizon belongs to a transaction that had committed when the horizon was read, and
so has its commit record before the position.
"""

from __future__ import annotations

from typing import NamedTuple

from wiscat.shared.db.queries import load
from wiscat.shared.db.records import Executor, ListHorizon

_SQL = load("replication.sql")


class PrimaryHorizon(NamedTuple):
    """The primary's :class:`ListHorizon`, and ``wal_position``, its write-ahead log's end (in
    bytes) when the horizon was read."""

    horizon: ListHorizon
    wal_position: int


async def primary_horizon(db: Executor) -> PrimaryHorizon:
    """The :class:`PrimaryHorizon` of a list beginning now; ``db``, the primary."""
    row = await db.fetchrow(_SQL["primary_horizon"])
    assert row is not None
    horizon = ListHorizon(row["horizon"], int(row["hidden"]), row["oldest_pid"])
    return PrimaryHorizon(horizon, int(row["wal_position"]))


async def replayed_position(db: Executor) -> int | None:
    """How far (in bytes of write-ahead log) the standby ``db`` has replayed; None when ``db``
    is not in recovery (a primary, or a standby promoted since)."""
    value = await db.fetchval(_SQL["replayed_position"])
    return None if value is None else int(value)
