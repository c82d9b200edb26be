"""Database failures as the rest of wiscat sees them.

Exception tree::

    DatabaseError           any failure talking to PostgreSQL, translated once at this edge
     +-- SchemaNotCurrent   the database lacks migrations this code needs
     +-- EmbeddedServerError  the embedded PostgreSQL could not be started
    StandbyBehind           a standby has not replayed what a list needs (an OSError)

``UNAVAILABLE`` are asyncpg's errors (and the system's) when the server cannot be reached or went
away: connecting (refused, no socket, the server starting or shutting down), a connection lost
mid-query, a query the server cancelled, and :class:`NoAnswer` (a server that does not answer
in time). A service answers them as "try again later".

``UNSTORABLE_TEXT`` are asyncpg's own errors for text PostgreSQL cannot hold (U+0000, which a
URL, a form or JSON can carry as ``%00`` or ``\\u0000``): a request that brings such text is the
client's error, and the services answer it as one.
"""

from __future__ import annotations

import asyncpg

UNAVAILABLE: tuple[type[Exception], ...] = (
    OSError,  # refused, no such socket, reset; and NoAnswer, a TimeoutError
    asyncpg.PostgresConnectionError,  # the connection failed or is gone
    asyncpg.OperatorInterventionError,  # starting up, shutting down, crashed, query cancelled
    asyncpg.InterfaceError,  # a connection closed under a query, a pool closing
    # no server of a DSN with several hosts takes writes (target_session_attrs=read-write):
    # the primary gone, its standby not yet promoted
    asyncpg.TargetServerAttributeNotMatched,
)

FAILED: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InterfaceError,
    asyncpg.InsufficientResourcesError,  # disk full, out of memory, too many connections
    asyncpg.TargetServerAttributeNotMatched,  # as in UNAVAILABLE: between primaries
)
"""What ends a command when the database fails under it: ``UNAVAILABLE`` but the system's own
errors (a command's file errors are those too), and the server out of a resource. Not an error
in a query, which is a bug, with a traceback."""

UNSTORABLE_TEXT: tuple[type[Exception], ...] = (
    asyncpg.CharacterNotInRepertoireError,  # U+0000 in text
    asyncpg.UntranslatableCharacterError,  # \u0000 in jsonb
)


class DatabaseError(Exception):
    """A failure talking to PostgreSQL."""


class SchemaNotCurrent(DatabaseError):
    """The database schema is older (or newer) than this code's migrations."""


class EmbeddedServerError(DatabaseError):
    """The embedded PostgreSQL server could not be started."""


class StandbyBehind(TimeoutError):
    """The standby a provider reads from has not replayed, within
    ``Settings.read_replay_wait_seconds``, what a list needs: the primary's writes reach it
    late (replication lag, or replay paused). A ``TimeoutError``, and so one of ``UNAVAILABLE``:
    the client is asked to come back."""


class NoAnswer(TimeoutError):
    """The database did not answer within a service's deadline
    (:func:`wiscat.shared.db.pool.answered`):
    a server that hangs (wedged, its host or network gone silent) or a lock held for long. A
    ``TimeoutError``, and so an ``OSError``: one of ``UNAVAILABLE``."""
