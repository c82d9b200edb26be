"""Scheduled consistency checks (docs/checks.md) and their stored reports."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from wiscat.shared.db.links import Executor
from wiscat.shared.db.queries import load
from wiscat.shared.model import Check

_SQL = load("checks.sql")

# A check lists the whole set at the source and at every peer: an audit is meant to be
# low-impact, so no schedule may run it back to back.
MIN_EVERY = timedelta(minutes=1)
#: The most records a check compares by content: one GetRecord to every node each
MAX_SAMPLE = 10_000


_FIELDS = [f.name for f in fields(Check)]


def _check(row: asyncpg.Record) -> Check:
    return Check(**{name: row[name] for name in _FIELDS})


def _row(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("report"), str):
        out["report"] = json.loads(out["report"])
    return out


async def save_check(
    db: Executor,
    name: str,
    set_spec: str,
    source_url: str,
    peer_urls: list[str],
    *,
    sample: int = 0,
    every: timedelta = timedelta(days=1),
    enabled: bool = True,
) -> Check:
    """Create or replace the check ``name``; it runs at the harvester's next poll."""
    row = await db.fetchrow(
        _SQL["upsert_check"], name, set_spec, source_url, peer_urls, sample, every, enabled
    )
    assert row is not None
    return _check(row)


async def all_checks(db: Executor) -> list[tuple[Check, dict[str, Any]]]:
    """Every check, with its latest report's id, outcome and time (None if it never ran)."""
    rows = await db.fetch(_SQL["all_checks"])
    return [
        (
            _check(row),
            {
                "last_report_id": row["last_report_id"],
                "last_outcome": row["last_outcome"],
                "last_run_at": row["last_run_at"],
            },
        )
        for row in rows
    ]


async def remove_check(db: Executor, name: str) -> bool:
    """Delete the check ``name``; False if there was none (its reports stay)."""
    return await db.fetchval(_SQL["remove_check"], name) is not None


async def lease_due(db: Executor, owner: str, lease: timedelta) -> Check | None:
    """Lease one due check to ``owner`` for ``lease``: no other process runs it meanwhile."""
    row = await db.fetchrow(_SQL["lease_due_check"], owner, lease)
    return _check(row) if row else None


async def release(db: Executor, name: str, owner: str, next_run_at: datetime) -> None:
    """Give back the lease of ``owner`` on the check ``name``; it is next due at ``next_run_at``."""
    await db.execute(_SQL["release_check"], name, owner, next_run_at)


async def store_report(
    db: Executor,
    check_name: str | None,
    report: dict[str, Any],
    started_at: datetime,
    finished_at: datetime,
    *,
    leased_by: str,
) -> int | None:
    """Store a report (as :meth:`CheckReport.as_json` gives it) while worker ``leased_by`` holds
    the check's lease; returns its id, or None (the check was removed, or is another worker's)."""
    stored = await db.fetchval(
        _SQL["insert_report"],
        check_name,
        report["set"],
        report["source"]["url"],
        started_at,
        finished_at,
        report["outcome"],
        json.dumps(report),
        leased_by,
    )
    return None if stored is None else int(stored)


async def renew_lease(db: Executor, name: str, owner: str, lease: timedelta) -> bool:
    """Renew ``owner``'s lease of check ``name``; False if it no longer holds it."""
    return await db.fetchval(_SQL["renew_check_lease"], name, owner, lease) is not None


async def recent_reports(
    db: Executor, name: str | None = None, limit: int = 20
) -> list[dict[str, Any]]:
    """The newest reports, with per-peer counts but without item lists."""
    return [_row(row) for row in await db.fetch(_SQL["recent_reports"], name, limit)]


async def purge_reports(db: Executor, retention: timedelta) -> int:
    """Drop reports older than ``retention`` but each check's latest; return how many."""
    return int(await db.fetchval(_SQL["purge_reports"], retention))


async def get_report(db: Executor, report_id: int) -> dict[str, Any] | None:
    """The whole report ``report_id``, or None."""
    row = await db.fetchrow(_SQL["get_report"], report_id)
    return _row(row) if row else None


async def latest_per_check(db: Executor) -> list[dict[str, Any]]:
    """The latest report of every scheduled check, for the metrics."""
    return [_row(row) for row in await db.fetch(_SQL["latest_per_check"])]


async def request_check(db: Executor, name: str) -> bool | None:
    """Have the harvester run ``name`` at its next poll: True when asked, False when the check
    is disabled (it never runs, so nothing is asked), None if there is no such check."""
    enabled: bool | None = await db.fetchval(_SQL["request_check"], name)
    return enabled
