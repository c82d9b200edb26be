"""asyncpg behind wiscat's own errors: the one place where the driver's exceptions are translated.

Every pool and connection :mod:`wiscat.shared.db.pool` opens is of the classes below, so
whatever runs a statement (this package's queries, a transaction's BEGIN and COMMIT, a pool's
connection reset) or takes a connection from a pool raises :mod:`wiscat.shared.db.errors`'
classes for the failures a caller acts on. :data:`TRANSLATED` is the table, most specific
first (as HTTPX's ``HTTPCORE_EXC_MAP``); an error it does not name (a query's error, which is a
bug, or one this package handles itself, such as a unique violation) goes up as it is.
"""

# ruff: noqa: ASYNC109 (the methods keep asyncpg's signatures, ``timeout`` among them)

from __future__ import annotations

from typing import Any, NoReturn

import asyncpg
import asyncpg.transaction
from asyncpg.pool import PoolConnectionProxy

from wiscat.shared.db.errors import (
    DatabaseError,
    DatabaseUnavailable,
    OutOfResources,
    UnstorableText,
)

TRANSLATED: tuple[tuple[type[BaseException], type[DatabaseError]], ...] = (
    (asyncpg.CharacterNotInRepertoireError, UnstorableText),  # U+0000 in text
    (asyncpg.UntranslatableCharacterError, UnstorableText),  # \u0000 in jsonb
    (asyncpg.InsufficientResourcesError, OutOfResources),  # disk, memory, connections
    (asyncpg.PostgresConnectionError, DatabaseUnavailable),  # the connection failed or is gone
    # starting up, shutting down, crashed, a query cancelled (statement_timeout among them)
    (asyncpg.OperatorInterventionError, DatabaseUnavailable),
    # a connection closed under a query or a transaction, a pool closing
    (asyncpg.InterfaceError, DatabaseUnavailable),
    # no server of a URL with several hosts takes writes (target_session_attrs=read-write):
    # the primary gone, its standby not yet promoted
    (asyncpg.TargetServerAttributeNotMatched, DatabaseUnavailable),
    # a statement begun on a session the server has ended (its FATAL error read) but not yet
    # closed: the driver's protocol is stuck in that error ("cannot switch to state ...") and the
    # session is of no further use, as a server shutting down or a backend terminated leaves it
    (asyncpg.InternalClientError, DatabaseUnavailable),
    (OSError, DatabaseUnavailable),  # refused, no such socket, reset; the command timeout
)

#: Every error :data:`TRANSLATED` names, for ``except`` clauses.
DRIVER_ERRORS: tuple[type[BaseException], ...] = tuple(cause for cause, _ in TRANSLATED)


def translation(exc: BaseException) -> DatabaseError:
    """wiscat's error for the driver's (or the system's) ``exc``, which :data:`TRANSLATED`
    names: its message, and its class's name as the ``kind``."""
    for cause, ours in TRANSLATED:
        if isinstance(exc, cause):
            return ours(str(exc), kind=type(exc).__name__)
    raise TypeError(f"no translation for {type(exc).__name__}") from exc


def _raise(exc: BaseException) -> NoReturn:
    raise translation(exc) from exc


class Transaction(asyncpg.transaction.Transaction):
    """A transaction whose start and end raise wiscat's errors: its BEGIN, COMMIT and ROLLBACK
    run through :meth:`Connection.execute`, but it first checks its connection itself, and
    that check raises the driver's error for a connection closed under it."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        try:
            await super().__aenter__()
        except DatabaseError:
            raise
        except DRIVER_ERRORS as exc:
            _raise(exc)

    async def __aexit__(self, extype: object, ex: object, tb: object) -> None:
        try:
            await super().__aexit__(extype, ex, tb)
        except DatabaseError:
            raise
        except DRIVER_ERRORS as exc:
            _raise(exc)


class Connection(asyncpg.Connection):
    """An asyncpg connection whose statements raise wiscat's errors (a transaction's BEGIN,
    COMMIT and ROLLBACK, and a pool's reset of a connection, are ``execute`` calls too)."""

    def transaction(
        self,
        *,
        isolation: asyncpg.transaction._IsolationLevels | None = None,
        readonly: bool = False,
        deferrable: bool = False,
    ) -> Transaction:
        """asyncpg's transaction; a closed connection raises DatabaseUnavailable here already."""
        if self.is_closed():  # as asyncpg's own transaction() checks, in its words
            raise DatabaseUnavailable("connection is closed", kind="InterfaceError")
        return Transaction(self, isolation, readonly, deferrable)

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        """asyncpg's execute, its errors raised as wiscat's."""
        try:
            return await super().execute(query, *args, timeout=timeout)
        except DRIVER_ERRORS as exc:
            _raise(exc)

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> None:
        """asyncpg's executemany, its errors raised as wiscat's."""
        try:
            await super().executemany(command, args, timeout=timeout)
        except DRIVER_ERRORS as exc:
            _raise(exc)

    async def fetch(
        self, query: str, *args: Any, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """asyncpg's fetch, its errors raised as wiscat's."""
        try:
            return await super().fetch(query, *args, timeout=timeout, **kwargs)
        except DRIVER_ERRORS as exc:
            _raise(exc)

    async def fetchrow(
        self, query: str, *args: Any, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """asyncpg's fetchrow, its errors raised as wiscat's."""
        try:
            return await super().fetchrow(query, *args, timeout=timeout, **kwargs)
        except DRIVER_ERRORS as exc:
            _raise(exc)

    async def fetchval(
        self, query: str, *args: Any, column: int = 0, timeout: float | None = None
    ) -> Any:
        """asyncpg's fetchval, its errors raised as wiscat's."""
        try:
            return await super().fetchval(query, *args, column=column, timeout=timeout)
        except DRIVER_ERRORS as exc:
            _raise(exc)


class Pool(asyncpg.Pool):
    """An asyncpg pool of :class:`Connection`; taking a connection from it raises wiscat's
    errors too (the server refusing a new connection, a pool closing)."""

    # Both ways of taking a connection (``async with pool.acquire()`` and ``await
    # pool.acquire()``) and the pool's own fetch/execute go through this method.
    async def _acquire(self, timeout: float | None) -> PoolConnectionProxy:
        try:
            return await super()._acquire(timeout)  # type: ignore[misc, no-any-return]
        except DatabaseError:
            raise
        except DRIVER_ERRORS as exc:
            _raise(exc)
