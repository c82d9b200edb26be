"""Leases of links tied to the holder's database session (the rule is in ``sql/leases.sql``).

A run holds its link's lease, and a slot of its peer host, on a connection of its own, opened for
the run and closed after it: PostgreSQL releases the session's advisory locks when that session
ends, so a worker killed mid-run (SIGKILL, a crash, its machine gone) frees its link and its host
slot at once, where a lease in a row alone stayed taken until it ran out. The time expiry remains
the backstop for a holder that is alive but stuck.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg

from wiscat.shared.db import links
from wiscat.shared.db.links import link_from_row
from wiscat.shared.db.pool import Pool, connect
from wiscat.shared.db.queries import load
from wiscat.shared.model import Link

_SQL = load("leases.sql")


async def free_due(pool: Pool, limit: int, per_host: int) -> list[tuple[str, str]]:
    """Enabled, due links whose lease is free (never taken, given back, run out, or held by a
    session that is gone): the ``per_host`` due first of each peer host, at most ``limit`` in
    all, the oldest due first; ``(name, base_url)`` each. Nothing is taken:
    :meth:`LeaseSession.take` may still find one taken meanwhile."""
    rows = await pool.fetch(_SQL["free_due_links"], limit, per_host)
    return [(row["name"], row["base_url"]) for row in rows]


class LeaseSession:
    """A database session of its own that holds one link's lease (and a slot of its peer host)
    for a run; :meth:`close` it after the run, whatever happened."""

    def __init__(self, url: str, conn: asyncpg.Connection) -> None:
        self.url = url
        self.conn = conn
        # whether this session holds the link's lock: False for a lease taken by the backstop
        # (its stuck holder's session still holds the lock), until that session lets it go
        self.session_held = False
        self.host: tuple[str, int] | None = None  # (host, slots) once a slot is taken
        # the link's pending hint this run serves (docs/links.md, "Harvest on a hint"): whether
        # there was one, the change it announced, and whether the hint alone made the link due
        self.hinted = False
        self.hinted_until: datetime | None = None
        self.hint_only = False

    @classmethod
    async def open(cls, url: str) -> LeaseSession:
        """A new session on ``url`` (:class:`DatabaseError` if it cannot be opened)."""
        return cls(url, await connect(url))

    async def take_host_slot(self, host: str, slots: int) -> bool:
        """Take one of the ``slots`` slots of peer ``host`` for this session; False when all
        are held (by runs of any harvester process on this database)."""
        for slot in range(slots):
            if await self.conn.fetchval(_SQL["take_host_slot"], host, slot):
                self.host = (host, slots)
                return True
        return False

    async def take(self, name: str, owner: str, lease: timedelta, *, due: bool) -> Link | None:
        """Lease link ``name`` for ``owner`` on this session, if it is free (and, with ``due``,
        enabled and due); None when there is no such link or another worker holds it."""
        row = await self.conn.fetchrow(_SQL["take_lease"], name, owner, lease, due)
        if row is None:
            return None
        self.session_held = bool(row["session_held"])
        self.hinted = bool(row["hinted"])
        self.hinted_until = row["hinted_until"]
        self.hint_only = bool(row["hint_only"])
        return link_from_row(row)

    async def renew(self, name: str, owner: str, lease: timedelta) -> bool:
        """Renew ``owner``'s lease of ``name`` for ``lease`` more; False when another worker
        has taken it over. A session whose connection was lost (the database restarted, say)
        is opened again and takes its locks again where they are free; a lease taken without
        its lock takes it here once its stuck holder has let it go."""
        if self.conn.is_closed():
            self.conn = await connect(self.url)
            self.session_held = False
            if self.host is not None:
                await self.take_host_slot(*self.host)
        if not self.session_held:
            self.session_held = bool(await self.conn.fetchval(_SQL["hold_link_lock"], name))
        return await links.renew_lease(self.conn, name, owner, lease)

    async def give_back(self, name: str, owner: str, next_run_at: datetime, leased: Link) -> None:
        """Give ``leased`` (the link as it was leased) back and schedule its next run at
        ``next_run_at``, unless a run was asked for meanwhile: that one stays due (and after a
        run a hint alone started, the regular time stays). The row and the session's locks are
        freed in one transaction."""
        async with self.conn.transaction():
            await links.release_lease(
                self.conn, name, owner, next_run_at, leased, hint_only=self.hint_only
            )
            await self.conn.execute(_SQL["unlock_session"])

    async def close(self) -> None:
        """End the session (and with it any lock it still holds)."""
        if not self.conn.is_closed():
            try:
                await self.conn.close(timeout=5)
            except Exception:  # a connection that cannot close cleanly is dropped
                self.conn.terminate()
