"""The WIS 2.0 outbox: records rendered as WCMP2, and the messages that announce them.

:func:`render` reads the records changed since ``wis2_cursor``, up to the bound an OAI-PMH
list would stop at (commit-safe datestamps, invariant 2), a page at a time; each page is one
transaction: the WCMP2 records and revisions, the notes of records that cannot be made valid,
one ``wis2_outbox`` row per record whose content changed, and the cursor moved past the page.
Killed at any moment, a page is all done or not at all. A configuration not rendered with
before (:meth:`Rendering.rendered_with`) starts the cursor again from the beginning. Only
records of the own set whose centre-id this node speaks for are announced; a deletion only
ever names a record this node announced itself (a Global Discovery Catalogue deletes by
``metadata_id``, whoever sends it).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from wiscat.shared.db import records as store
from wiscat.shared.db.queries import load
from wiscat.shared.iso19139 import RecordError
from wiscat.shared.wcmp2 import messages
from wiscat.shared.wcmp2.centres import CentreRule
from wiscat.shared.wcmp2.convert import Conversion, convert
from wiscat.shared.wcmp2.messages import Announcement

_SQL = load("wis2.sql")
_START = datetime(1, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Rendering:
    """What the renderer reads with: the own set, the centre rules, this node's ``/oai`` URL,
    the settle window of lists and the page size."""

    own_set: str
    rules: tuple[CentreRule, ...]
    oai_base_url: str | None
    settle_seconds: float = 0.0
    page_size: int = 200

    def rendered_with(self) -> str:
        """What the WCMP2 records depend on besides the records: the own set, the centre
        rules and the ``/oai`` URL. When it changes, every record is rendered again."""
        rules = ";".join(str(rule) for rule in self.rules)
        return json.dumps([self.own_set, rules, self.oai_base_url])


@dataclass(slots=True)
class Rendered:
    """What :func:`render` did: pages committed and messages queued by relation."""

    pages: int = 0
    records: int = 0
    canonical: int = 0
    update: int = 0
    deletion: int = 0
    invalid: int = 0


async def render(pool: asyncpg.Pool, how: Rendering, *, max_pages: int | None = None) -> Rendered:
    """Render every page changed since the cursor, up to the list bound now."""
    horizon = await store.list_horizon(pool)
    bound = horizon.at - timedelta(seconds=how.settle_seconds)
    done = Rendered()
    async with pool.acquire() as conn, conn.transaction():
        cursor = await conn.fetchrow(_SQL["cursor"])
        assert cursor is not None  # migration 0012 inserts its one row
        if cursor["rendered_with"] != how.rendered_with():
            await conn.execute(_SQL["restart"], how.rendered_with())
    while max_pages is None or done.pages < max_pages:
        if not await _page(pool, how, bound, done):
            break
    return done


async def _page(pool: asyncpg.Pool, how: Rendering, bound: datetime, done: Rendered) -> bool:
    async with pool.acquire() as conn, conn.transaction():
        cursor = await conn.fetchrow(_SQL["cursor"])
        assert cursor is not None  # migration 0012 inserts its one row
        after = (cursor["datestamp"] or _START, cursor["identifier"])
        rows = await conn.fetch(_SQL["changed_records"], *after, bound, how.page_size)
        if not rows:
            return False
        conversions = [_conversion(how, row) for row in rows]
        announced: dict[str, list[asyncpg.Record]] = {row["identifier"]: [] for row in rows}
        takers: dict[str, set[str]] = {}  # a WCMP2 id: the records of the page that convert to it
        for row, conversion in zip(rows, conversions, strict=True):
            if (keep := _kept(conversion)) is not None:
                takers.setdefault(keep, set()).add(row["identifier"])
        for old in await conn.fetch(_SQL["announced_of_page"], list(announced), list(takers)):
            for identifier in {old["identifier"], *takers.get(old["wcmp2_id"], ())}:
                if identifier in announced:
                    announced[identifier].append(old)
        plans = [
            _plan(row, conversion, announced[row["identifier"]])
            for row, conversion in zip(rows, conversions, strict=True)
        ]
        if _disjoint(plans):
            await _write_page(conn, plans)
        else:
            plans = await _write_by_record(conn, rows, conversions)
        await conn.execute(_SQL["move_cursor"], rows[-1]["datestamp"], rows[-1]["identifier"])
    for plan in plans:
        for relation, count in plan.counts.items():
            setattr(done, relation, getattr(done, relation) + count)
    done.pages += 1
    done.records += len(rows)
    return True


async def _write_page(conn: Any, plans: list[_Plan]) -> None:
    """Each statement once for the whole page, its rows sent in a pipeline."""
    for statement in _ORDER:
        rows = [args for plan in plans for name, args in plan.writes if name == statement]
        if rows:
            await conn.executemany(_SQL[statement], rows)


async def _write_by_record(
    conn: Any, rows: list[asyncpg.Record], conversions: list[Conversion | str | None]
) -> list[_Plan]:
    """A WCMP2 id that one record of the page leaves and another takes: record by record, what
    each was announced as read after the writes of those before it."""
    plans = []
    for row, conversion in zip(rows, conversions, strict=True):
        announced = await conn.fetch(_SQL["announced_of"], row["identifier"], _kept(conversion))
        plan = _plan(row, conversion, announced)
        for name, args in plan.writes:
            await conn.execute(_SQL[name], *args)
        plans.append(plan)
    return plans


#: The order a page's statements run in when each runs once for the page.
_ORDER = ("note_invalid", "clear_invalid", "put_revision", "put_record", "delete_record", "queue")


@dataclass(slots=True)
class _Plan:
    """What one record's rendering writes, in order, and the WCMP2 ids those writes touch."""

    writes: list[tuple[str, tuple[Any, ...]]]
    touched: set[str]
    counts: Counter[str]


def _disjoint(plans: list[_Plan]) -> bool:
    """No WCMP2 id is written for two records of the page (so the order of their writes does
    not matter, and what each read before the page's writes is still true)."""
    seen: set[str] = set()
    for plan in plans:
        if plan.touched & seen:
            return False
        seen |= plan.touched
    return True


def _conversion(how: Rendering, row: asyncpg.Record) -> Conversion | str | None:
    """The record's conversion, the reason it has none (no ISO 19139 record), or None when it
    is not this node's to announce (deleted, not in the own set, no centre-id of its own)."""
    if row["deleted"] or how.own_set not in row["set_specs"] or row["xml"] is None:
        return None
    try:
        conversion = convert(row["xml"], how.rules, oai_base_url=how.oai_base_url)
    except RecordError as exc:
        return f"no ISO 19139 record: {exc}"
    except Exception as exc:  # a bug of the mapping must not hold every later record back
        return f"the conversion failed: {type(exc).__name__}: {exc}"
    if conversion.record.get("id") is None:
        return None
    return conversion


def _kept(conversion: Conversion | str | None) -> str | None:
    """The WCMP2 id a record is announced as once rendered with ``conversion`` (None: none)."""
    if conversion is None or isinstance(conversion, str) or not conversion.valid:
        return None
    wcmp2_id: str = conversion.record["id"]
    return wcmp2_id


def _plan(
    row: asyncpg.Record, conversion: Conversion | str | None, announced: Sequence[asyncpg.Record]
) -> _Plan:
    """The writes that render one changed record, given what was announced of it, and of the
    WCMP2 id it converts to, which another record may have been announced as: a Global Discovery
    Catalogue that holds that id gets an update of it, not a second canonical message."""
    identifier, datestamp = row["identifier"], row["datestamp"]
    plan = _Plan([], set(), Counter())
    keep = _kept(conversion)
    if isinstance(conversion, str) or (conversion is not None and not conversion.valid):
        # never announced; what was announced of it before is deleted below: a Global
        # Discovery Catalogue must not go on serving a form the record no longer has
        reasons = [conversion] if isinstance(conversion, str) else list(conversion.invalid)
        report = {"invalid": reasons} if isinstance(conversion, str) else conversion.report()
        args = (identifier, json.dumps(reasons), json.dumps(report), datestamp)
        plan.writes.append(("note_invalid", args))
        plan.counts["invalid"] += 1
    else:
        plan.writes.append(("clear_invalid", (identifier,)))
        if conversion is not None:
            _put(plan, conversion, identifier, datestamp, announced)
    for old in announced:
        if old["wcmp2_id"] != keep and not old["deleted"]:
            plan.writes.append(("delete_record", (old["wcmp2_id"], datestamp)))
            _queue(plan, old["wcmp2_id"], old["centre_id"], "deletion", None)
    return plan


def _put(
    plan: _Plan,
    conversion: Conversion,
    identifier: str,
    datestamp: datetime,
    announced: Sequence[asyncpg.Record],
) -> None:
    wcmp2_id: str = conversion.record["id"]
    plan.touched.add(wcmp2_id)
    centre_id = wcmp2_id.removeprefix("urn:wmo:md:").partition(":")[0]
    content = conversion.content()
    revision = messages.revision(content)
    before = next((old for old in announced if old["wcmp2_id"] == wcmp2_id), None)
    if before is None or before["deleted"]:
        relation = "canonical"
    elif before["revision"] != revision:
        relation = "update"
    else:
        relation = None
    plan.writes.append(("put_revision", (wcmp2_id, revision, content)))
    plan.writes.append(
        (
            "put_record",
            (wcmp2_id, identifier, centre_id, revision, content, datestamp, relation is not None),
        )
    )
    if relation is not None:
        _queue(plan, wcmp2_id, centre_id, relation, content)


def _queue(
    plan: _Plan, wcmp2_id: str, centre_id: str, relation: str, content: bytes | None
) -> None:
    plan.writes.append(("queue", _message(wcmp2_id, centre_id, relation, content)))
    plan.touched.add(wcmp2_id)
    plan.counts[relation] += 1


def _message(
    wcmp2_id: str, centre_id: str, relation: str, content: bytes | None
) -> tuple[Any, ...]:
    """The arguments of a ``queue`` statement: a new message id, and the revision's hashes."""
    return (
        uuid.uuid4(),
        wcmp2_id,
        centre_id,
        relation,
        None if content is None else messages.revision(content),
        None if content is None else len(content),
        None if content is None else messages.integrity(content),
    )


async def pending(db: Any, limit: int) -> list[Announcement]:
    """Unsent messages due now, oldest first, at most one per record."""
    rows = await db.fetch(_SQL["pending"], limit)
    return [
        Announcement(
            r["message_id"],
            r["wcmp2_id"],
            r["centre_id"],
            r["relation"],
            r["revision"],
            r["length"],
            r["sha512"],
            None if r["content"] is None else bytes(r["content"]),
        )
        for r in rows
    ]


async def mark_sent(db: Any, message_ids: Sequence[str]) -> None:
    """The messages the broker acknowledged."""
    if message_ids:
        await db.execute(_SQL["mark_sent"], list(message_ids))


async def mark_failed(db: Any, message_id: str, error: str) -> None:
    """A message not sent: its error, retried later with the same id."""
    await db.execute(_SQL["mark_failed"], message_id, error[:1000])


async def queue_updates(
    pool: asyncpg.Pool, *, daily: bool, limit: int, only: Sequence[str] | None = None
) -> int:
    """Queue an ``update`` of records announced: those due for the daily re-announcement
    (``daily``, at most ``limit``), or every live one (``only``: those identifiers or ids)."""
    async with pool.acquire() as conn, conn.transaction():
        if daily:
            rows = await conn.fetch(_SQL["due_daily"], limit)
        else:
            rows = await conn.fetch(_SQL["live_records"], list(only) if only else None)
        messages_ = [
            _message(r["wcmp2_id"], r["centre_id"], "update", bytes(r["content"])) for r in rows
        ]
        if messages_:
            await conn.executemany(_SQL["queue"], messages_)
        await conn.execute(_SQL["touch"], [r["wcmp2_id"] for r in rows])
    return len(rows)


async def backlog(db: Any) -> tuple[int, float]:
    """Messages not yet sent, and the age in seconds of the oldest (0: none)."""
    row = await db.fetchrow(_SQL["backlog"])
    return int(row["pending"]), float(row["oldest"] or 0)


async def status(db: Any, limit: int = 20) -> dict[str, Any]:
    """Counts, the failing messages and the invalid records, for ``wiscat wis2 status``."""
    counts = dict(await db.fetchrow(_SQL["status"]))
    failing = [dict(r) for r in await db.fetch(_SQL["failing"], limit)]
    invalid = [
        {**dict(r), "reasons": json.loads(r["reasons"])}
        for r in await db.fetch(_SQL["invalid"], limit)
    ]
    return {**counts, "failing_messages": failing, "invalid_records": invalid}
