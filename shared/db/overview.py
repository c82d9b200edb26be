"""Read-only queries behind the operator's dashboard."""

from __future__ import annotations

from typing import Any

from wiscat.shared.db.links import Executor
from wiscat.shared.db.queries import load

_SQL = load("overview.sql")


async def sets_overview(db: Executor) -> list[dict[str, Any]]:
    return [dict(row) for row in await db.fetch(_SQL["sets_overview"])]


async def links_overview(db: Executor) -> list[dict[str, Any]]:
    return [dict(row) for row in await db.fetch(_SQL["links_overview"])]


async def arrivals_per_day(db: Executor, days: int = 30) -> list[dict[str, Any]]:
    return [dict(row) for row in await db.fetch(_SQL["arrivals_per_day"], days)]


async def run_history(db: Executor, days: int = 7) -> list[dict[str, Any]]:
    return [dict(row) for row in await db.fetch(_SQL["run_history"], days)]
