"""The record store: writes of whole batches in one statement each, and keyset list pages.

Every function takes a connection (or pool) from its caller and returns plain values. The
oai:datestamp of every row comes from the database clock: migration 0008's triggers stamp each
write with a time taken once its transaction has an id, and :func:`list_horizon` keeps a list
short of every transaction still in progress that has one (invariant 2).
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, get_args

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from wiscat.shared.db.pool import Connection
from wiscat.shared.db.queries import load
from wiscat.shared.model import IncomingRecord, WriteOutcome

_SQL = load("records.sql")

Executor = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool


class StoredRecord(NamedTuple):
    """A record (or tombstone) as the provider lists it; ``xml`` is the document in UTF-8;
    ``xml_mend``, whether it holds characters XML 1.0 does not allow (RELIABILITY P14: only a
    row written by SQL or an older version can; migration 0009 flags it as it is written);
    ``xml_ids``, the XML IDs ``xml`` holds where they are known (migration 0019; None: not
    known, or not read).

    A named tuple, not a frozen dataclass: a list page makes one per row, and a frozen
    dataclass takes about a microsecond to make, a named tuple half that.
    """

    identifier: str
    datestamp: datetime
    deleted: bool
    set_specs: tuple[str, ...]
    xml: bytes | None
    xml_mend: bool
    xml_ids: str | None = None


@dataclass(frozen=True, slots=True)
class SetInfo:
    """A set as ListSets shows it, with its kind (own, remote, shared)."""

    spec: str
    name: str
    kind: str


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Per-identifier outcomes of one batch write, and their counts."""

    outcomes: dict[str, WriteOutcome]

    @property
    def counts(self) -> Counter[WriteOutcome]:
        """How many identifiers had each outcome."""
        return Counter(self.outcomes.values())

    def identifiers(self, outcome: WriteOutcome) -> list[str]:
        """The identifiers that had ``outcome``, sorted."""
        return sorted(i for i, o in self.outcomes.items() if o == outcome)


_OUTCOMES: frozenset[str] = frozenset(get_args(WriteOutcome))


def _outcomes(rows: Sequence[asyncpg.Record]) -> dict[str, WriteOutcome]:
    """The outcome of each identifier of a write's rows; an outcome not of
    :data:`WriteOutcome` (a query that misspelled one) is a bug, and raises."""
    outcomes: dict[str, WriteOutcome] = {}
    for row in rows:
        outcome = row["outcome"]
        if outcome not in _OUTCOMES:
            raise ValueError(f"a write gave {row['identifier']!r} the unknown outcome {outcome!r}")
        outcomes[row["identifier"]] = outcome
    return outcomes


async def ensure_set(db: Executor, spec: str, name: str, kind: str) -> None:
    """Create set ``spec`` unless it exists (kind: own, remote, shared or other)."""
    await db.execute(_SQL["ensure_set"], spec, name, kind)


async def upsert_records(
    conn: Connection,
    set_spec: str,
    records: Sequence[IncomingRecord],
    *,
    protected_set: str | None = None,
    refuse_conflicts: bool = False,
    source: str | None = None,
    deletions_hold: bool = False,
) -> WriteResult:
    """Write live records into ``set_spec`` in one statement; ``source`` is the link writing
    (None: a local write), kept with each copy written.

    Outcomes: ``added`` (new, or revived from a tombstone), ``updated`` (content changed: new
    datestamp), ``joined`` (same content, newly in this set: new datestamp), ``unchanged`` (nothing
    written, datestamp kept), ``refused_older`` (gmd:dateStamp older than the stored copy's,
    or none where the stored copy has one, invariant 5), ``refused_protected`` (the record is
    in ``protected_set`` and this write is not into it, invariant 6), and with
    ``refuse_conflicts`` ``refused_conflict`` (this copy differs in content from the stored one
    but has the same gmd:dateStamp, or neither has one, and the stored copy was written by
    another link, or, where no existing link wrote it, it is in other sets only: the first copy
    stays, so that two peers that disagree on a record do not replace each other's copy, with a
    new datestamp, at every run, whether their links file it under one set or two), and with
    ``deletions_hold`` (a harvest) ``refused_deleted`` (the record is deleted here, and this
    copy's gmd:dateStamp is not newer than the deleted copy's: a deletion is newer than the
    copy it deleted, invariant 5; a local write revives it whatever its date).
    """
    if not records:
        return WriteResult({})
    # a caller passes one copy an identifier (a harvested page keeps its newest); should one
    # come twice, its last occurrence wins
    records = list({r.identifier: r for r in records}.values())
    rows = await _write_checked(
        conn,
        _SQL["upsert_records"],
        set_spec,
        [r.identifier for r in records],
        [r.md_datestamp for r in records],
        [r.content_hash for r in records],
        [r.xml for r in records],
        protected_set,
        refuse_conflicts,
        source,
        deletions_hold,
        [r.xml_ids for r in records],
    )
    return WriteResult(_outcomes(rows))


async def backup_records(
    conn: Connection,
    set_spec: str,
    records: Sequence[IncomingRecord],
    datestamps: Sequence[datetime],
    *,
    protected_set: str | None = None,
) -> WriteResult:
    """Backup synchronisation : take records that are missing here, or older here
    by both oai:datestamp and gmd:dateStamp, keeping the source's datestamps (``datestamps``).

    Outcomes: ``taken_new``, ``taken``, ``same`` (same content), ``not_newer``, and
    ``refused_protected`` (as for :func:`upsert_records`).
    """
    if not records:
        return WriteResult({})
    # the only writer whose datestamps are not stamped here (migration 0008's triggers)
    async with conn.transaction():
        await conn.execute(_SQL["keep_datestamps"], "on")
        rows = await _write_checked(
            conn,
            _SQL["backup_records"],
            set_spec,
            [r.identifier for r in records],
            [r.md_datestamp for r in records],
            [r.content_hash for r in records],
            [r.xml for r in records],
            list(datestamps),
            protected_set,
            [r.xml_ids for r in records],
        )
        await conn.execute(_SQL["keep_datestamps"], "off")
    return WriteResult(_outcomes(rows))


async def delete_records(
    conn: Connection,
    set_spec: str,
    identifiers: Sequence[str],
    *,
    protected_set: str | None = None,
    remember_unknown: bool = False,
) -> WriteResult:
    """Take records out of ``set_spec`` in one statement (tombstones when it was their last set).

    Outcomes: ``deleted`` (now a tombstone), ``left_set`` (still live in another set),
    ``unchanged`` (already deleted, or not in this set), ``not_found``, ``remembered`` (unknown
    here, kept as a tombstone because ``remember_unknown``), ``refused_protected``.
    """
    unknowable: dict[str, WriteOutcome] = {i: "not_found" for i in identifiers if not _storable(i)}
    identifiers = [i for i in identifiers if _storable(i)]
    if not identifiers:
        return WriteResult(unknowable)
    rows = await conn.fetch(
        _SQL["delete_records"], set_spec, identifiers, protected_set, remember_unknown
    )
    return WriteResult(unknowable | _outcomes(rows))


async def _write_checked(conn: Connection, query: str, *args: object) -> list[asyncpg.Record]:
    """Run ``query``, a write of records whose documents lxml wrote, telling migration 0009's
    trigger so: it then flags none of them without reading them (about 40 µs a record). The
    writes after it in the transaction are checked again."""
    if not conn.is_in_transaction():
        async with conn.transaction():
            return await _write_checked(conn, query, *args)
    await conn.execute(_SQL["xml_checked"], "on")
    rows = await conn.fetch(query, *args)
    await conn.execute(_SQL["xml_checked"], "off")
    return rows


def _storable(identifier: str) -> bool:
    # PostgreSQL's text cannot hold U+0000 (nor can XML carry it), so no stored identifier has
    # one; asked about one (a request's argument, an admin URL), the server answers with an error
    return "\x00" not in identifier


def _stored(row: asyncpg.Record) -> StoredRecord:
    # the columns of list_all, list_set, list_tree and get_record, in this order (by position:
    # a lookup by name costs as much again, 500 rows a page)
    identifier, datestamp, deleted, set_specs, xml, xml_mend, xml_ids = row
    return StoredRecord(identifier, datestamp, deleted, tuple(set_specs), xml, xml_mend, xml_ids)


class ListScope(NamedTuple):
    """What a list covers: one set and the sets below it (None: the whole catalogue), the
    datestamps ``from_ <= datestamp < until_exclusive`` (None: unbounded), and none after
    ``upper_bound``, the bound frozen when the list began."""

    set_spec: str | None
    from_: datetime | None
    until_exclusive: datetime | None
    upper_bound: datetime


async def _set_kind(db: Executor, set_spec: str) -> str:
    """``_tree`` when sets lie below ``set_spec``: its list holds their records too (OAI-PMH 2.0
    §2.7.2); else ``_set``. Asked at each page: a set made while a list is in progress holds
    only records past the list's bound, so the answer changing midway repeats or skips nothing."""
    below = await db.fetchval(_SQL["set_has_subsets"], set_spec)
    return "_tree" if below else "_set"


async def _list_query(
    db: Executor, name: str, scope: ListScope, after: tuple[datetime, str] | None
) -> tuple[str, list[object]]:
    """Query ``name`` for the whole catalogue, one set, or one set and the sets below it, and
    its first arguments."""
    last_datestamp, last_identifier = after if after else (_MIN, "")
    args: list[object] = [
        last_datestamp,
        last_identifier,
        scope.from_ or _MIN,
        scope.until_exclusive or _MAX,
        scope.upper_bound,
    ]
    if scope.set_spec is None:
        return _SQL[name + "_all"], args
    return _SQL[name + await _set_kind(db, scope.set_spec)], [scope.set_spec, *args]


async def list_page(
    db: Executor,
    scope: ListScope,
    *,
    after: tuple[datetime, str] | None,
    limit: int,
    with_xml: bool,
    through: tuple[datetime, str] | None = None,
) -> list[StoredRecord]:
    """One keyset page of ``scope`` ordered by (datestamp, identifier), strictly after ``after``
    (None: from the start) and up to ``through`` included (None: up to ``limit`` rows)."""
    query, args = await _list_query(db, "list", scope, after)
    end = through or (_MAX, "")
    rows = await db.fetch(query, *args, with_xml, limit, *end)
    return [_stored(row) for row in rows]


async def list_keys(
    db: Executor, scope: ListScope, *, after: tuple[datetime, str] | None, limit: int
) -> list[tuple[datetime, str]]:
    """The (datestamp, identifier) keys alone of the page :func:`list_page` would read."""
    query, args = await _list_query(db, "list_keys", scope, after)
    return [(row[0], row[1]) for row in await db.fetch(query, *args, limit)]


class ListHorizon(NamedTuple):
    """Where a list beginning now must stop (invariant 2): ``at``, the older of the database's
    clock and the start of the oldest write transaction in progress (``oldest_pid``'s, if
    any); ``hidden``, how many write transactions in progress the database role may not see
    (another role's, without ``pg_read_all_stats``): a list cannot know where they began."""

    at: datetime
    hidden: int
    oldest_pid: int | None


async def changed_sets(
    db: Executor, after: datetime, through: datetime, union_set: str
) -> frozenset[str]:
    """The sets in which a record or membership's datestamp lies after ``after`` and at or
    before ``through``, ``union_set`` among them when a record's does (a change hint)."""
    rows = await db.fetch(_SQL["changed_sets"], after, through, union_set)
    return frozenset(row["spec"] for row in rows)


async def list_horizon(db: Executor) -> ListHorizon:
    """The :class:`ListHorizon` of a list beginning now.

    A row is written with a datestamp no earlier than this statement's start, unless its
    transaction already has an id, which the statement then sees with its start: so no row
    that a transaction in progress will commit has a datestamp before ``at``.
    """
    row = await db.fetchrow(_SQL["list_horizon"])
    assert row is not None
    return ListHorizon(row["horizon"], int(row["hidden"]), row["oldest_pid"])


async def count_list(db: Executor, scope: ListScope) -> int:
    """The size of the list :func:`list_page` pages through."""
    bounds = (scope.from_ or _MIN, scope.until_exclusive or _MAX, scope.upper_bound)
    if scope.set_spec is None:
        value = await db.fetchval(_SQL["count_all"], *bounds)
    else:
        query = _SQL["count" + await _set_kind(db, scope.set_spec)]
        value = await db.fetchval(query, scope.set_spec, *bounds)
    return int(value)


async def get_record(db: Executor, identifier: str) -> StoredRecord | None:
    """One record or tombstone, or None when the identifier is unknown."""
    if not _storable(identifier):
        return None
    row = await db.fetchrow(_SQL["get_record"], identifier)
    return _stored(row) if row else None


async def record_exists(db: Executor, identifier: str) -> bool:
    """Whether ``identifier`` is known here, live or deleted."""
    if not _storable(identifier):
        return False
    return bool(await db.fetchval(_SQL["record_exists"], identifier))


async def list_sets(db: Executor) -> list[SetInfo]:
    """Every set the node has."""
    return [SetInfo(r["spec"], r["name"], r["kind"]) for r in await db.fetch(_SQL["list_sets"])]


async def earliest_datestamp(db: Executor) -> datetime | None:
    """The oldest datestamp any list can serve (Identify's earliestDatestamp, OAI-PMH 2.0
    §4.2): records', tombstones' and set memberships'; None for an empty catalogue."""
    value: datetime | None = await db.fetchval(_SQL["earliest_datestamp"])
    return value


async def purge_tombstones(db: Executor, retention: timedelta) -> int:
    """Drop tombstones and deleted memberships older than ``retention``; return records purged."""
    purged = int(await db.fetchval(_SQL["purge_deleted_records"], retention))
    await db.fetchval(_SQL["purge_deleted_memberships"], retention)
    return purged


@dataclass(frozen=True, slots=True)
class SetCount:
    """Live and deleted records of one set, and its last change."""

    spec: str
    live: int
    deleted: int
    last_change: datetime | None


async def other_own_set(db: Executor, own_set: str) -> str | None:
    """The database's own set, if it is another than ``own_set``."""
    other: str | None = await db.fetchval(_SQL["other_own_set"], own_set)
    return other


async def set_counts(db: Executor) -> list[SetCount]:
    """Live and deleted records per set."""
    rows = await db.fetch(_SQL["set_counts"])
    return [SetCount(r["set_spec"], r["live"], r["deleted"], r["last_change"]) for r in rows]


async def catalogue_counts(db: Executor) -> SetCount:
    """Live and deleted records in the whole catalogue (spec ``*``)."""
    row = await db.fetchrow(_SQL["catalogue_counts"])
    assert row is not None
    return SetCount("*", row["live"], row["deleted"], row["last_change"])


@dataclass(frozen=True, slots=True)
class DailyChanges:
    """The day's figures of the catalogue: live records, and those changed and deleted."""

    live: int
    inserted_modified: int
    deleted: int


async def changes_since(db: Executor, since: datetime) -> DailyChanges:
    """Live records, and records inserted or modified and deleted since ``since``."""
    row = await db.fetchrow(_SQL["changes_since"], since)
    assert row is not None
    return DailyChanges(row["live"], row["inserted_modified"], row["deleted"])


async def node_secret(db: Executor, name: str, *, size: int = 32) -> bytes:
    """A random secret shared by every process on this database, made on first use."""
    value = await db.fetchval(_SQL["get_secret"], name)
    if value is None:
        value = await db.fetchval(_SQL["put_secret_if_absent"], name, secrets.token_bytes(size))
    if value is None:  # another process stored it after the statement's snapshot was taken
        value = await db.fetchval(_SQL["get_secret"], name)
    return bytes(value)


# Open ends of a datestamp range; PostgreSQL timestamptz covers them.
_MIN = datetime(1, 1, 1, tzinfo=UTC)
_MAX = datetime(9999, 12, 31, tzinfo=UTC)
