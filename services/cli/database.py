"""The database a command works on: the configured one or the embedded server, its schema
brought current, for a service (which stops if the embedded server stops under it) or a one-shot
command (quiet about the embedded server: its start and stop are no news to whoever typed
``wiscat link list``). Only a service or ``wiscat migrate`` makes a new embedded database: a
one-shot command run from another folder would otherwise make an empty node there and answer
from it ("no links")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from wiscat.shared.db import migrate as migrations
from wiscat.shared.db import records as records_store
from wiscat.shared.db.errors import DatabaseError
from wiscat.shared.db.pool import Pool, connect, create_pool, database_url
from wiscat.shared.settings import Settings

log = logging.getLogger("wiscat")

# The logger of wiscat.shared.db: the embedded server's start and stop, each migration applied.
DB_LOGGER = "wiscat.db"


class _WarningsOnly(logging.Filter):
    """Lets through what goes wrong (a server still starting after an unclean stop, a stale
    lock file), not the INFO lines of a start that went well."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


@contextlib.contextmanager
def quiet_database() -> Iterator[None]:
    """The database's INFO lines left out while a one-shot command runs (still there at DEBUG:
    a handler-level filter would hide them from WISCAT_LOG_LEVEL=DEBUG too, this one does not)."""
    logger = logging.getLogger(DB_LOGGER)
    quiet = _WarningsOnly()
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def node_exists(settings: Settings) -> bool:
    """Whether a database is configured, or the embedded one exists in ``WISCAT_DATA_DIR``."""
    return settings.database_url is not None or (settings.data_dir / "postgres").exists()


def existing_node(settings: Settings) -> None:
    """Raise :class:`DatabaseError` (exit 2) when no database is configured and the embedded one
    does not exist yet in ``WISCAT_DATA_DIR``: a one-shot command does not make a node."""
    if not node_exists(settings):
        folder = settings.data_dir.resolve()
        raise DatabaseError(
            f"no node database in {folder} (WISCAT_DATA_DIR); run from the node's folder, "
            "or set WISCAT_DATA_DIR or WISCAT_DATABASE_URL"
        )


@contextlib.asynccontextmanager
async def migrated_database(
    settings: Settings, stop: asyncio.Event | None = None
) -> AsyncIterator[str]:
    """The database URL (embedded server started if none is configured), schema brought current.

    A service passes its ``stop``: if the embedded server stops running under it, the service is
    stopped, and the command then fails with the reason (the end of the server's log). Without
    ``stop`` (a one-shot command), the embedded server's INFO lines are left out, and a missing
    embedded database is an error (:func:`existing_node`), not a new node.
    """
    lost: list[str] = []
    on_lost = None
    if stop is not None:

        def on_lost(reason: str) -> None:
            log.error("%s; stopping", reason)
            lost.append(reason)
            stop.set()

    if stop is None:
        existing_node(settings)
    with contextlib.ExitStack() as stack:
        if stop is None:
            stack.enter_context(quiet_database())
        async with database_url(settings.database_url, settings.data_dir, on_lost=on_lost) as url:
            # the migration's lock is held across transactions: never through a pooler
            conn = await connect(settings.session_url(url))
            try:
                applied = await migrations.migrate(conn)
                other = await records_store.other_own_set(conn, settings.own_set)
            finally:
                await conn.close()
            if applied:
                log.info("applied migrations: %s", ", ".join(applied))
            if other is not None:
                # a typo in WISCAT_GISC_NAME, or another node's database: the records of the set
                # this node made its own would lose the own set's protection (invariant 6)
                raise DatabaseError(
                    f"this database belongs to the node whose own set is {other}, and "
                    f"WISCAT_GISC_NAME={settings.gisc_name} names {settings.own_set}: set "
                    f"WISCAT_GISC_NAME={other.removeprefix('WIS-GISC-')}, or point "
                    "WISCAT_DATABASE_URL (or WISCAT_DATA_DIR) at this node's own database"
                )
            yield url
    if lost:
        raise DatabaseError(lost[0])


@contextlib.asynccontextmanager
async def migrated_pool(settings: Settings, *, max_size: int = 4) -> AsyncIterator[Pool]:
    """A pool on :func:`migrated_database`, for a one-shot command; closed on exit."""
    async with migrated_database(settings) as url:
        pool = await create_pool(
            url, max_size=max_size, statement_cache=settings.database_statement_cache
        )
        try:
            yield pool
        finally:
            await pool.close()
