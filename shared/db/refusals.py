"""Refused records (:mod:`wiscat.shared.refusals`): kept per link and identifier, the latest
refusal each, and counted by reason on their run."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from wiscat.shared.db.links import Executor
from wiscat.shared.db.pool import Connection
from wiscat.shared.db.queries import load

_SQL = load("refusals.sql")


async def record_refusals(
    conn: Connection,
    link: str,
    run_id: int,
    refused: Sequence[tuple[str, str]],
    stored: Sequence[str],
) -> None:
    """Keep a page's refusals, (identifier, reason code) each, and forget the link's earlier
    refusals of the identifiers ``stored`` on the page: one statement, in the page's
    transaction (after :func:`wiscat.shared.db.links.hold_run`)."""
    by_reason: dict[str, int] = {}
    for _, reason in refused:
        by_reason[reason] = by_reason.get(reason, 0) + 1
    await conn.execute(
        _SQL["record_refusals"],
        link,
        run_id,
        [identifier for identifier, _ in refused],
        [reason for _, reason in refused],
        list(stored),
        json.dumps(by_reason),
    )


async def refused_of_link(db: Executor, link: str, limit: int = 50) -> list[dict[str, Any]]:
    """The latest refusals of ``link``, newest first: identifier, reason, run_id, refused_at."""
    return [dict(r) for r in await db.fetch(_SQL["refused_of_link"], link, limit)]


async def refusals_of(
    db: Executor, identifiers: Sequence[str], base_url: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The kept refusals of ``identifiers`` by the links to ``base_url`` (None: any link), by
    identifier, newest first."""
    found: dict[str, list[dict[str, Any]]] = {}
    for row in await db.fetch(_SQL["refusals_of_identifiers"], list(identifiers), base_url):
        found.setdefault(row["identifier"], []).append(dict(row))
    return found


async def purge_refusals(db: Executor, retention: timedelta) -> int:
    """Drop refusals older than ``retention``; return how many."""
    return int(await db.fetchval(_SQL["purge_refusals"], retention))


def run_refusals(run: Mapping[str, Any]) -> dict[str, int]:
    """A run row's refusals by reason code (stored as JSON)."""
    value = run.get("refusals") or {}
    return dict(json.loads(value) if isinstance(value, str) else value)
