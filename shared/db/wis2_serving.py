"""The WCMP2 records as the provider serves them (``wis2_records``, ``wis2_revisions``:
migration 0012, filled by the WIS2 renderer), and the counts its dashboard shows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wiscat.shared.db.links import Executor
from wiscat.shared.db.queries import load

_SQL = load("wis2_serving.sql")


@dataclass(frozen=True, slots=True)
class Item:
    """A record's current form: ``content`` None when it is deleted."""

    revision: str
    content: bytes | None
    deleted: bool


@dataclass(frozen=True, slots=True)
class ItemsPage:
    """One page of the records not deleted: their stored bytes, and how many there are in all."""

    matched: int
    contents: list[bytes]


@dataclass(frozen=True, slots=True)
class Counts:
    """Records served, records that cannot be made valid, and outbox messages not yet sent
    (``pending``), ``failed`` of them at least once."""

    served: int
    invalid: int
    pending: int
    failed: int


def _storable(text: str) -> bool:
    # PostgreSQL's text cannot hold U+0000, so no stored id has one, and asked for one the
    # server answers with an error
    return "\x00" not in text


async def item(db: Executor, wcmp2_id: str) -> Item | None:
    """The record ``wcmp2_id`` as it is now; None when it is unknown."""
    if not _storable(wcmp2_id):
        return None
    row = await db.fetchrow(_SQL["wis2_item"], wcmp2_id)
    return None if row is None else Item(row["revision"], row["content"], row["deleted"])


async def revision(db: Executor, wcmp2_id: str, revision: str) -> bytes | None:
    """The bytes of ``revision`` of the record ``wcmp2_id``; None when it is not kept."""
    if not (_storable(wcmp2_id) and _storable(revision)):
        return None
    content: bytes | None = await db.fetchval(_SQL["wis2_revision"], wcmp2_id, revision)
    return content


async def items_page(db: Executor, limit: int, offset: int) -> ItemsPage:
    """``limit`` records not deleted from the ``offset``-th on, by id."""
    row = await db.fetchrow(_SQL["wis2_items_page"], limit, offset)
    assert row is not None  # an aggregate answers one row
    return ItemsPage(row["matched"], list(row["contents"]))


async def counts(db: Executor) -> Counts:
    """What the dashboard's WIS 2.0 section counts."""
    row = await db.fetchrow(_SQL["wis2_counts"])
    assert row is not None
    return Counts(row["served"], row["invalid"], row["pending"], row["failed"])


async def invalid_records(db: Executor, limit: int) -> list[dict[str, Any]]:
    """The records that cannot be made valid, newest first: identifier, reasons, report,
    source_datestamp, noted_at."""
    return [
        {
            "identifier": r["identifier"],
            "reasons": json.loads(r["reasons"]),
            "report": json.loads(r["report"]),
            "source_datestamp": r["source_datestamp"],
            "noted_at": r["noted_at"],
        }
        for r in await db.fetch(_SQL["wis2_invalid"], limit)
    ]
