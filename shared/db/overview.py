"""Read-only queries behind the operator's dashboard."""

from __future__ import annotations

from typing import Any

from wiscat.shared.db.links import Executor
from wiscat.shared.db.queries import load

_SQL = load("overview.sql")


async def sets_overview(db: Executor) -> list[dict[str, Any]]:
    """Each set with its live and deleted records and its last change, for the dashboard."""
    return [dict(row) for row in await db.fetch(_SQL["sets_overview"])]


async def links_overview(db: Executor) -> list[dict[str, Any]]:
    """Each link with its last run, for the dashboard."""
    return [dict(row) for row in await db.fetch(_SQL["links_overview"])]


async def arrivals_per_day(db: Executor, days: int = 30) -> list[dict[str, Any]]:
    """Records and deletions per day over the last ``days``, for the dashboard's plot."""
    return [dict(row) for row in await db.fetch(_SQL["arrivals_per_day"], days)]


async def run_history(db: Executor, days: int = 7) -> list[dict[str, Any]]:
    """Finished runs of the last ``days``, oldest first, for the dashboard's plot."""
    return [dict(row) for row in await db.fetch(_SQL["run_history"], days)]
