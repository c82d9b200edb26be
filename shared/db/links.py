"""Harvest links, their leases and state, harvest runs and the quarantine."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from wiscat.shared.db.errors import StoreRefusal
from wiscat.shared.db.pool import Connection
from wiscat.shared.db.queries import load
from wiscat.shared.db.records import ensure_set
from wiscat.shared.model import Link, NewLink, PageCounts, RunMode, RunStatus

_SQL = load("links.sql")

Executor = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool


class LinkExists(StoreRefusal):
    """A link of that name exists already."""


class LinkGone(StoreRefusal):
    """The link was removed while it was being changed."""


class LinkHasRecords(StoreRefusal):
    """The link would file its records under another set, and has records in the one it has."""


_LINK_FIELDS = [f.name for f in fields(Link)]


def _link(row: asyncpg.Record) -> Link:
    return Link(**{name: row[name] for name in _LINK_FIELDS})


def link_from_row(row: asyncpg.Record) -> Link:
    """The link of a row of ``links`` (other columns the row has are left)."""
    return _link(row)


async def add_link(db: Executor, link: NewLink, *, set_kind: str = "remote") -> Link:
    """Create a link (and its local set, of ``set_kind``, if new); raise :class:`LinkExists` if
    the name is taken."""
    await ensure_set(db, link.local_set, f"Records of {link.local_set}", set_kind)
    try:
        row = await db.fetchrow(
            _SQL["insert_link"],
            link.name,
            link.base_url,
            link.remote_set,
            link.local_set,
            link.metadata_prefix,
            link.strategy,
            link.every,
            link.full_every,
            link.overlap,
            link.window_slices,
            link.enabled,
            link.recovery,
            link.hints,
        )
    except asyncpg.UniqueViolationError as exc:
        raise LinkExists(f"a link named {link.name!r} exists already") from exc
    assert row is not None
    return _link(row)


async def get_link(db: Executor, name: str) -> Link | None:
    """The link ``name``, or None."""
    row = await db.fetchrow(_SQL["get_link"], name)
    return _link(row) if row else None


async def all_links(db: Executor) -> list[Link]:
    """Every link, by name."""
    return [_link(row) for row in await db.fetch(_SQL["all_links"])]


#: Tries of a link's removal, which PostgreSQL may end to break a deadlock with a run.
REMOVE_TRIES = 3


async def remove_link(db: Executor, name: str) -> bool:
    """Delete the link ``name`` and its runs (its records stay); False if there was none.

    ``db`` is a pool, not a transaction. A run of the link writing a page holds rows that the
    deletion's cascade needs, and may then wait for the link's row, which the deletion holds.
    PostgreSQL breaks that deadlock by ending one of the two; the deletion, ended whole, is
    tried again."""
    for _ in range(REMOVE_TRIES - 1):
        try:
            return await db.fetchval(_SQL["remove_link"], name) is not None
        except asyncpg.DeadlockDetectedError:
            continue
    return await db.fetchval(_SQL["remove_link"], name) is not None


async def update_source(
    db: Executor,
    name: str,
    base_url: str,
    remote_set: str | None,
    metadata_prefix: str | None = None,
    local_set: str | None = None,
) -> Link | None:
    """Point a link at another peer, set or metadataPrefix, and local set (None: the one it
    has); resets its high-water mark (full harvest next)."""
    row = await db.fetchrow(
        _SQL["update_link_source"], name, base_url, remote_set, metadata_prefix, local_set
    )
    return _link(row) if row else None


async def set_schedule(
    db: Executor,
    name: str,
    *,
    every: timedelta,
    full_every: timedelta,
    overlap: timedelta,
    window_slices: int,
) -> Link | None:
    """Change a link's intervals, overlap and window slices; its high-water mark stays."""
    row = await db.fetchrow(
        _SQL["set_link_schedule"], name, every, full_every, overlap, window_slices
    )
    return _link(row) if row else None


async def update_link(
    conn: Connection, link: Link, new: NewLink, *, set_kind: str = "remote"
) -> tuple[Link, list[str]]:
    """Write what differs between ``link`` and ``new`` (as
    :func:`wiscat.shared.linkspec.changed_link`
    makes it), in one transaction; return the link as it now is and what changed: ``source``
    (peer, remote set, metadataPrefix or local set: high-water mark reset, full harvest next),
    ``strategy``, ``schedule`` (intervals, overlap, window slices: the mark stays), ``hints``
    (whether it takes its peer's hints).

    A new local set (of ``set_kind``; a link that files records under its remote set's name
    given another remote set) is refused with :class:`LinkHasRecords` while the link has records
    in the old one: they would stay there, kept up to date by no link."""
    changed = []
    async with conn.transaction():
        row: Link | None = link
        if new.local_set != link.local_set:
            held = await conn.fetchval(_SQL["records_of_link_in_set"], link.name, link.local_set)
            if held:
                raise LinkHasRecords(
                    f"link {link.name} files its records under the name of the set it harvests "
                    f"({link.local_set}) and has {held} there; the peer's set {new.remote_set} "
                    "would be filed under another name: add a link for it (wiscat link add) and "
                    "remove this one"
                )
            await ensure_set(conn, new.local_set, new.local_set, set_kind)
        source = (new.base_url, new.remote_set, new.metadata_prefix, new.local_set)
        if source != (link.base_url, link.remote_set, link.metadata_prefix, link.local_set):
            row = await update_source(conn, link.name, *source)
            changed.append("source")
        if new.strategy != link.strategy:
            row = await set_strategy(conn, link.name, new.strategy)
            changed.append("strategy")
        schedule = (new.every, new.full_every, new.overlap, new.window_slices)
        if schedule != (link.every, link.full_every, link.overlap, link.window_slices):
            row = await set_schedule(
                conn,
                link.name,
                every=new.every,
                full_every=new.full_every,
                overlap=new.overlap,
                window_slices=new.window_slices,
            )
            changed.append("schedule")
        if new.hints != link.hints:
            row = await set_hints(conn, link.name, new.hints)
            changed.append("hints")
    if row is None:
        raise LinkGone(f"no link named {link.name!r}")
    return row, changed


async def set_enabled(db: Executor, name: str, enabled: bool) -> Link | None:
    """Enable or disable the link ``name``; None if there is none."""
    row = await db.fetchrow(_SQL["set_link_enabled"], name, enabled)
    return _link(row) if row else None


async def set_hints(db: Executor, name: str, hints: bool) -> Link | None:
    """Subscribe the link ``name`` to its peer's hints, or not; None if there is none."""
    row = await db.fetchrow(_SQL["set_link_hints"], name, hints)
    return _link(row) if row else None


async def hint(db: Executor, name: str, until: datetime | None) -> bool:
    """A hint for link ``name``: its normal run is due now (once, however many hints come
    before it starts); ``until`` is the change's datestamp bound (None: a catch-up). False
    when the link is gone, disabled or takes no hints."""
    return await db.fetchval(_SQL["hint_link"], name, until) is not None


async def set_strategy(db: Executor, name: str, strategy: str) -> Link | None:
    """Harvest ``name`` by ListRecords or by ListIdentifiers + GetRecord; None if there is none."""
    row = await db.fetchrow(_SQL["set_link_strategy"], name, strategy)
    return _link(row) if row else None


async def request_run(db: Executor, name: str, mode: RunMode = "incremental") -> bool | None:
    """Ask the harvester to run ``name`` now: True when asked, False when the link is disabled
    (a disabled link never runs, so nothing is asked), None if there is no such link."""
    enabled: bool | None = await db.fetchval(_SQL["request_run"], name, mode)
    return enabled


async def renew_lease(db: Executor, name: str, owner: str, lease: timedelta) -> bool:
    """Renew ``owner``'s lease of link ``name`` for ``lease`` more; False if it no longer holds
    it (leases are taken with :mod:`wiscat.shared.db.leases`)."""
    return await db.fetchval(_SQL["renew_lease"], name, owner, lease) is not None


async def release_lease(
    db: Executor,
    name: str,
    owner: str,
    next_run_at: datetime,
    leased: Link,
    *,
    hint_only: bool = False,
) -> None:
    """Release ``leased`` (the link as it was leased) and schedule its next run, unless a run
    was requested meanwhile: that one stays due. After a run a hint alone started
    (``hint_only``) the link's regular time stays as it was."""
    await db.execute(_SQL["release_lease"], name, owner, next_run_at, leased.next_run_at, hint_only)


async def close_abandoned_runs(db: Executor, link: str) -> list[int]:
    """Mark the runs a dead worker left as failed; call while holding the link's lease."""
    return [row["id"] for row in await db.fetch(_SQL["close_abandoned_runs"], link)]


async def start_run(
    db: Executor,
    link: str,
    mode: RunMode,
    from_: datetime | None,
    until: datetime | None,
    worker: str | None = None,
) -> int:
    """Record the start of a harvest run of ``link``; its id."""
    return int(await db.fetchval(_SQL["start_run"], link, mode, from_, until, worker))


async def set_run_from(db: Executor, run_id: int, from_: datetime) -> None:
    """The ``from`` the run asked for, once the peer's Identify has settled it."""
    await db.execute(_SQL["set_run_from"], run_id, from_)


async def hold_run(conn: Connection, run_id: int) -> tuple[str, int] | None:
    """The run's status and how many pages it has written, its row locked for the rest of
    ``conn``'s transaction; None if the run is gone (its link was removed)."""
    row = await conn.fetchrow(_SQL["hold_run"], run_id)
    return None if row is None else (row["status"], int(row["pages"]))


async def hold_link(conn: Connection, name: str) -> None:
    """Lock link ``name``'s row for the rest of ``conn``'s transaction (before its run's)."""
    await conn.execute(_SQL["hold_link"], name)


async def record_page(conn: Connection, run_id: int, counts: PageCounts) -> None:
    """Add a page's counts to its run (held by :func:`hold_run` in the same transaction)."""
    await conn.execute(
        _SQL["record_page"],
        run_id,
        counts.bytes,
        counts.added,
        counts.updated,
        counts.unchanged,
        counts.deleted,
        counts.refused,
        counts.quarantined,
    )


async def finish_run(
    db: Executor,
    run_id: int,
    status: RunStatus,
    *,
    error_kind: str | None = None,
    error: str | None = None,
    deleted: int = 0,
    refused: int = 0,
) -> dict[str, Any] | None:
    """Close a run; None if it is gone (its link was removed while it ran)."""
    row = await db.fetchrow(_SQL["finish_run"], run_id, status, error_kind, error, deleted, refused)
    return dict(row) if row is not None else None


async def complete_list(
    conn: Connection,
    link: Link,
    *,
    high_water_mark: datetime | None,
    full: bool,
    window_index: int,
    run_id: int,
) -> bool:
    """Record a whole list of ``link`` (as it was when the run began) committed; False if the
    link now harvests another source, or is gone, and so was left as it is."""
    row = await conn.fetchval(
        _SQL["complete_list"],
        link.name,
        high_water_mark,
        full,
        window_index,
        run_id,
        link.base_url,
        link.remote_set,
        link.metadata_prefix,
    )
    return row is not None


async def purge_history(db: Executor, retention: timedelta) -> tuple[int, int]:
    """Drop runs (but each link's last) and quarantined records older than ``retention``;
    return how many of each."""
    runs = int(await db.fetchval(_SQL["purge_runs"], retention))
    quarantined = int(await db.fetchval(_SQL["purge_quarantine"], retention))
    return runs, quarantined


async def fail_link(db: Executor, name: str, run_id: int, reason: str) -> None:
    """End the run as failed with ``reason``; the link's high-water mark stays where it was."""
    await db.execute(_SQL["fail_link"], name, run_id, reason)


async def quarantine(
    conn: Connection,
    link: str,
    run_id: int,
    page: int,
    items: Sequence[tuple[str | None, str, bytes]],
) -> None:
    """Keep unusable records: (identifier or None, reason, raw bytes) each."""
    if not items:
        return
    await conn.execute(
        _SQL["quarantine_records"],
        link,
        run_id,
        page,
        [i[0] for i in items],
        [i[1] for i in items],
        [i[2] for i in items],
    )


async def live_in_set(db: Executor, set_spec: str, identifiers: Sequence[str]) -> int:
    """How many of ``identifiers`` are live in the set (for the mass-deletion circuit breaker)."""
    return int(await db.fetchval(_SQL["live_in_set"], set_spec, list(identifiers)))


async def live_count(db: Executor, set_spec: str) -> int:
    """Live records in the set ``set_spec``."""
    return int(await db.fetchval(_SQL["live_count"], set_spec))


async def recent_runs(
    db: Executor, link: str | None = None, limit: int = 20
) -> list[dict[str, Any]]:
    """The latest runs, newest first, of every link or of ``link`` (``refusals``, the refused
    records by reason code, as a dict)."""
    return [
        {**r, "refusals": json.loads(r["refusals"])}
        for r in await db.fetch(_SQL["recent_runs"], link, limit)
    ]


async def recent_quarantine(
    db: Executor, link: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """The latest quarantined records, newest first, without their raw bytes."""
    return [dict(r) for r in await db.fetch(_SQL["recent_quarantine"], link, limit)]


async def quarantined_record(db: Executor, quarantine_id: int) -> dict[str, Any] | None:
    """The quarantined record ``quarantine_id`` with its raw bytes, or None if there is none
    (never was, or purged)."""
    row = await db.fetchrow(_SQL["quarantined_record"], quarantine_id)
    return None if row is None else dict(row)
