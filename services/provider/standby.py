"""Lists read from a hot standby (``Settings.database_read_url``): where they may stop.

A list read from a standby must stop where one read from the primary would (invariant 2: short
of what a write transaction in progress there will commit), and short of what the standby has
not yet replayed. The primary knows the first, the standby the second: a list beginning on the
standby takes the primary's horizon with its write-ahead log's end at that moment
(:func:`wiscat.shared.db.replication.primary_horizon`) and stops at that horizon once the
standby has replayed past that position. Should the standby lag longer than
``read_replay_wait_seconds``, the list stops at an older horizon the standby has replayed, if
this process took one; else it is refused (503), as is a list continued from a token whose
bound the standby has not yet replayed (begun on another provider, on a standby further ahead or
on the primary): a harvester comes back, nothing is passed.

Why a replayed horizon ``H`` covers a bound ``B <= H``: a row dated before ``H`` belongs to a
transaction that had committed when ``H`` was read (one in progress then started after ``H``,
and a later one stamps its rows later still), and so has its commit record before the position
read with ``H``.

The standby is one server: how far it has replayed only grows, so a horizon known replayed stays
replayed. Once it has been promoted it is a primary, and lists take its own horizon.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from datetime import datetime

from wiscat.shared.db import records as store
from wiscat.shared.db.errors import StandbyBehind
from wiscat.shared.db.pool import Pool
from wiscat.shared.db.replication import PrimaryHorizon, primary_horizon, replayed_position

log = logging.getLogger("wiscat.provider")

# horizons of the primary kept for lists begun while the standby lags
KEPT_HORIZONS = 64
# how often a list waiting for the standby asks how far it has replayed
POLL_SECONDS = 0.05
# a standby lagging past the wait is logged at most once a minute
LAG_WARN_EVERY = 60.0


class Standby:
    """The standby that lists are read from, and the primary's horizons taken for them."""

    def __init__(self, primary: Pool, standby: Pool, wait_seconds: float) -> None:
        self.primary = primary
        self.standby = standby
        self.wait_seconds = wait_seconds
        # horizons taken that the standby had not replayed yet when last asked
        self.pending: deque[PrimaryHorizon] = deque(maxlen=KEPT_HORIZONS)
        # the latest horizon the standby is known to have replayed past
        self.replayed: PrimaryHorizon | None = None
        self.warned = -LAG_WARN_EVERY  # (time.monotonic) when the lag was last logged

    async def horizon(self) -> store.ListHorizon:
        """The horizon of a list beginning now on the standby."""
        taken = await self._take()
        position = await self._replayed(taken.wal_position)
        if position is None:  # promoted: the read server is a primary now
            return await store.list_horizon(self.standby)
        self._note(position)
        if self.replayed is None:
            raise StandbyBehind(
                f"the standby has not replayed the primary's writes within "
                f"{self.wait_seconds:g} s, and no older list horizon is known replayed"
            )
        if taken in self.pending and time.monotonic() - self.warned >= LAG_WARN_EVERY:
            self.warned = time.monotonic()
            log.warning(
                "the standby lags the primary by more than %g s: lists begun now stop at %s, "
                "a horizon it has replayed",
                self.wait_seconds,
                self.replayed.horizon.at.isoformat(),
            )
        return self.replayed.horizon

    async def ensure_replayed(self, bound: datetime) -> None:
        """Return once the standby holds every row a list bound at ``bound`` lists (a list
        continued from a token); :class:`StandbyBehind` past the wait."""
        if self._covers(bound):
            return
        position = await replayed_position(self.standby)
        if position is None:
            return
        self._note(position)
        if self._covers(bound):
            return
        taken = await self._take()
        position = await self._replayed(taken.wal_position)
        if position is None:
            return
        self._note(position)
        if not self._covers(bound):
            raise StandbyBehind(
                f"the standby has not replayed, within {self.wait_seconds:g} s, the writes "
                f"this list goes up to ({bound.isoformat()})"
            )

    async def _take(self) -> PrimaryHorizon:
        taken = await primary_horizon(self.primary)
        self.pending.append(taken)
        return taken

    def _covers(self, bound: datetime) -> bool:
        return self.replayed is not None and self.replayed.horizon.at >= bound

    def _note(self, position: int) -> None:
        """Keep the latest horizon taken that the standby has replayed past ``position``."""
        for taken in [t for t in self.pending if t.wal_position <= position]:
            self.pending.remove(taken)
            if self.replayed is None or taken.horizon.at > self.replayed.horizon.at:
                self.replayed = taken

    async def _replayed(self, position: int) -> int | None:
        """How far the standby has replayed, once that is past ``position`` or the wait is
        over; None once it is not in recovery."""
        deadline = time.monotonic() + self.wait_seconds
        while True:
            replayed = await replayed_position(self.standby)
            if replayed is None or replayed >= position or time.monotonic() >= deadline:
                return replayed
            await asyncio.sleep(POLL_SECONDS)
