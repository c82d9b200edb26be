"""Apply the plain SQL files of ``migrations/`` in order, one transaction each, recorded in a
table."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from wiscat.shared.db.errors import (
    DatabaseError,
    DatabaseUnavailable,
    NoAnswer,
    SchemaNotCurrent,
    kind_of,
)
from wiscat.shared.db.pool import Connection, Pool, answered

log = logging.getLogger("wiscat.db")

MIGRATIONS_DIR = Path(str(resources.files("wiscat.migrations")))
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

_CREATE_TABLE = """
create table if not exists schema_migrations (
    version     integer primary key,
    name        text not null,
    applied_at  timestamptz not null default now()
)
"""


@dataclass(frozen=True)
class Migration:
    """One file of ``migrations/``: its number and name."""

    version: int
    name: str
    path: Path


def available(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files, in version order."""
    if not directory.is_dir():
        raise FileNotFoundError(f"no migrations folder at {directory}")
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise ValueError(f"{path.name}: migrations are named NNNN_description.sql")
        found.append(Migration(int(match.group(1)), path.name, path))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError("two migrations share a version number")
    return found


async def applied_versions(conn: Connection | Pool) -> set[int]:
    """The migrations already applied to the database; none on an empty one."""
    exists = await conn.fetchval("select to_regclass('schema_migrations') is not null")
    if not exists:
        return set()
    return {row["version"] for row in await conn.fetch("select version from schema_migrations")}


async def migrate(conn: Connection, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply every migration not yet applied; return the names applied. Idempotent."""
    # One advisory lock so two processes starting together do not race each other.
    await conn.execute("select pg_advisory_lock(7213901)")
    try:
        await conn.execute(_CREATE_TABLE)
        done = await applied_versions(conn)
        unknown = done - {m.version for m in available(directory)}
        if unknown:
            raise SchemaNotCurrent(await _newer_schema(conn, unknown))
        applied = []
        for migration in available(directory):
            if migration.version in done:
                continue
            async with conn.transaction():
                await conn.execute(migration.path.read_text(encoding="utf-8"))
                await conn.execute(
                    "insert into schema_migrations (version, name) values ($1, $2)",
                    migration.version,
                    migration.name,
                )
            log.info("applied migration %s", migration.name)
            applied.append(migration.name)
        return applied
    finally:
        await conn.execute("select pg_advisory_unlock(7213901)")


async def check_current(conn: Connection | Pool, directory: Path = MIGRATIONS_DIR) -> None:
    """Raise :class:`SchemaNotCurrent` unless every migration is applied (and no unknown one)."""
    wanted = {m.version for m in available(directory)}
    have = await applied_versions(conn)
    if have - wanted:
        raise SchemaNotCurrent(await _newer_schema(conn, have - wanted))
    if have != wanted:
        raise SchemaNotCurrent(
            f"schema not current: missing migrations {sorted(wanted - have)}; run `wiscat migrate`"
        )


async def not_ready(pool: Pool, seconds: float) -> str | None:
    """Why a service is not ready (its /readyz): its database does not answer within
    ``seconds``, cannot be reached, or lacks migrations; None when it is ready."""
    try:
        await answered(check_current(pool), seconds)
    except NoAnswer as exc:
        return str(exc)  # how long it waited
    except DatabaseUnavailable as exc:
        return f"the database cannot be reached ({exc.kind}: {exc})"
    except DatabaseError as exc:
        return str(exc)  # what is wrong with the schema
    except Exception as exc:  # the system's, outside a statement
        return f"the database cannot be reached ({kind_of(exc)}: {exc})"
    return None


async def _newer_schema(conn: Connection | Pool, unknown: set[int]) -> str:
    names = await conn.fetch(
        "select name from schema_migrations where version = any($1::int[]) order by version",
        sorted(unknown),
    )
    return (
        f"the database was migrated by a newer wiscat ({', '.join(r['name'] for r in names)} "
        "unknown here); run that version or a later one: a schema is never migrated back"
    )
