"""Opening the database: the asyncpg pool, and the embedded server when no URL is configured."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from wiscat.shared.db import driver
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.db.errors import DatabaseError, DatabaseFailed, NoAnswer
from wiscat.shared.tasks import abandon

log = logging.getLogger("wiscat.db")

T = TypeVar("T")


# what connecting fails with: the server refuses, or (a URL naming several hosts with
# target_session_attrs) none of them is what the URL asks for, a primary between two
_CANNOT_CONNECT = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.TargetServerAttributeNotMatched,
    DatabaseFailed,
)

# Datestamps are UTC throughout. Sent when the session starts, so that it holds behind a
# transaction pooler too: PgBouncer passes the time zone on to every server connection it lends
# the session (a SET there would hold only on the one it ran on).
_SESSION = {"timezone": "UTC"}

# prepared statements asyncpg keeps per connection (its own default)
STATEMENT_CACHE = 100


async def _init_connection(conn: asyncpg.Connection) -> None:
    # JIT only slows the short queries of this workload. Not a start-up parameter, which
    # PgBouncer refuses ("unsupported startup parameter: jit"): behind a transaction pooler
    # this holds only on the server connection it ran on (a speed matter alone; ALTER ROLE
    # ... SET jit = off makes it hold everywhere).
    await conn.execute("set jit to off")


async def _reset_connection(conn: asyncpg.Connection) -> None:
    # What asyncpg does to a connection going back to its pool, less its RESET ALL: that
    # undid _init_connection after the connection's first use, and behind a transaction pooler
    # it reset the server connection's time zone, which PgBouncer then took for the session's.
    # Nothing here sets a session variable for one use only (set_config(..., true) ends with
    # its transaction).
    await conn.execute("close all; select pg_advisory_unlock_all()")


async def limit_statements(conn: Connection, seconds: float) -> None:
    """Cancel any statement of the rest of ``conn``'s transaction that runs longer than
    ``seconds`` (``SET LOCAL statement_timeout``)."""
    await conn.execute(
        "select set_config('statement_timeout', $1, true)", f"{int(seconds * 1000)}ms"
    )


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, statement_cache: int = STATEMENT_CACHE
) -> asyncpg.Pool:
    """A pool on ``url`` whose sessions use UTC, and whose failures are wiscat's errors
    (:mod:`wiscat.shared.db.driver`).

    ``statement_cache``: prepared statements kept per connection (Settings.
    database_statement_cache); 0 behind a transaction pooler that cannot keep them (PgBouncer
    before 1.21): each statement is then prepared unnamed, within the transaction that runs it.
    """
    try:
        # asyncpg.create_pool's own defaults, with the translating pool and connection classes
        pool = await driver.Pool(
            url,
            connection_class=driver.Connection,
            record_class=asyncpg.Record,
            min_size=min_size,
            max_size=max_size,
            max_queries=50000,
            max_inactive_connection_lifetime=300.0,
            init=_init_connection,
            reset=_reset_connection,
            loop=None,
            command_timeout=300,
            statement_cache_size=statement_cache,
            server_settings=_SESSION,
        )
    except _CANNOT_CONNECT as exc:
        raise _cannot_connect(exc) from exc
    return pool


def _cannot_connect(exc: BaseException) -> DatabaseError:
    """wiscat's error for a pool that could not connect, the reason in its message: of the
    translated class (:data:`wiscat.shared.db.driver.TRANSLATED`) when it has one (a refused
    connection is :class:`DatabaseUnavailable`: retry later), :class:`DatabaseError` when the
    server turns the connection away for good (a wrong password, no such database)."""
    message = f"cannot connect to the database: {exc}"
    if isinstance(exc, DatabaseError):  # translated already, by a statement of the set-up
        return type(exc)(message, kind=exc.kind)
    if isinstance(exc, driver.DRIVER_ERRORS):
        return type(driver.translation(exc))(message, kind=type(exc).__name__)
    return DatabaseError(message, kind=type(exc).__name__)


async def answered(work: Awaitable[T], seconds: float) -> T:
    """``work``'s result, or :class:`NoAnswer` once it has taken ``seconds``.

    A database that hangs (wedged, its host or network gone silent), rather than refusing or
    dropping connections, would hold a request until asyncpg's five-minute command timeout,
    and with it a pooled connection that every later request waits for. Past the deadline
    ``work`` is cancelled but not waited for: asyncpg cancels a query by asking the server,
    and a connection whose query is being cancelled goes back to its pool only once the server
    has answered, whenever that is. The caller answers at once; the pool stays at most full.
    """
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task not in done:
        abandon(task)
        raise NoAnswer(f"the database did not answer within {seconds:g} s")
    return task.result()


# How often a service looks whether its embedded server still runs.
WATCH_SECONDS = 2.0


@contextlib.asynccontextmanager
async def database_url(
    configured: str | None, data_dir: Path, *, on_lost: Callable[[str], None] | None = None
) -> AsyncIterator[str]:
    """Yield the database URL to use: the configured one, or an embedded server's (started here,
    stopped on exit).

    ``on_lost`` is for services, which run for months: it is called, once, with the reason when
    the embedded server they started stops running. Nothing here would start it again, so the
    service had better stop, saying why, than answer "unavailable" for ever.
    """
    if configured:
        yield configured
        return
    server = EmbeddedPostgres(data_dir)
    url = server.start()
    watch = asyncio.create_task(_watch(server, on_lost)) if on_lost else None
    try:
        yield url
    finally:
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        server.stop()


async def _watch(server: EmbeddedPostgres, on_lost: Callable[[str], None]) -> None:
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        reason = await asyncio.to_thread(server.lost)
        if reason is not None:
            on_lost(reason)
            return


async def connect(url: str) -> asyncpg.Connection:
    """One connection (for migrations and one-shot commands)."""
    try:
        conn = await asyncpg.connect(
            url, connection_class=driver.Connection, server_settings=_SESSION
        )
    except _CANNOT_CONNECT as exc:
        raise DatabaseError(f"cannot connect to the database: {exc}") from exc
    await _init_connection(conn)
    return conn


# Types for annotations beyond this package (which never imports asyncpg itself): a pool, a
# connection as either asyncpg.connect() or pool.acquire() gives it.
Pool = asyncpg.Pool
Connection = asyncpg.Connection | PoolConnectionProxy
