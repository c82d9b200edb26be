"""Database failures, and the stores' refusals, as the rest of wiscat sees them.

Exception tree::

    DatabaseError              any failure talking to PostgreSQL, or a change refused
     +-- DatabaseFailed        the database failed under the work: a command ends, a run fails
     |    +-- DatabaseUnavailable  cannot be reached, went away or did not answer: retry later
     |    |    +-- NoAnswer    no answer within a service's deadline
     |    |    +-- StandbyBehind  a standby has not replayed what a list needs
     |    +-- OutOfResources   disk full, out of memory, too many connections
     +-- UnstorableText        text PostgreSQL cannot hold (U+0000): the client's error
     +-- SchemaNotCurrent      the database lacks migrations this code needs
     +-- EmbeddedServerError   the embedded PostgreSQL could not be started
     +-- StoreRefusal          a store refused a change, as the data stand: the caller says why
          +-- links.LinkExists       a link of that name exists already
          +-- links.LinkGone         the link was removed while it was being changed
          +-- links.LinkHasRecords   the link would file its records under another set
          +-- registry.GenesisMismatch  the database holds another registry network's chain

A refusal is not a failure: the database did its work, and the data stand against the change.
Each refusal is defined beside the store that raises it (:mod:`wiscat.shared.db.links`,
:mod:`wiscat.shared.db.registry`).

The driver's errors (and the system's, from its sockets) are translated into these once, at the
edge of this package (:mod:`wiscat.shared.db.driver`), so no code outside it names the driver.
Each translated error keeps the driver's message as its own and the driver's class name as its
``kind`` (for logs and stored reasons), the driver's exception as its ``__cause__``. An error
in a query, which is a bug, is not translated: it goes up with its traceback.
"""

from __future__ import annotations


class DatabaseError(Exception):
    """A failure talking to PostgreSQL, or a change a store refused (:class:`StoreRefusal`)."""

    def __init__(self, message: str = "", *, kind: str | None = None) -> None:
        super().__init__(message)
        #: what failed, for a log line or a stored reason: the driver's or the system's error
        #: class name for a translated error, this class's name otherwise
        self.kind = kind or type(self).__name__


def kind_of(exc: BaseException) -> str:
    """What failed, for a log line or a stored reason: a database error's ``kind`` (the driver's
    class name), any other exception's class name."""
    return exc.kind if isinstance(exc, DatabaseError) else type(exc).__name__


class DatabaseFailed(DatabaseError):
    """The database failed under the work: what ends a command or fails a run. Not an error in a
    query, which is a bug."""


class DatabaseUnavailable(DatabaseFailed):
    """The server cannot be reached or went away: connecting (refused, no socket, the server
    starting or shutting down), a connection lost mid-query, a query the server cancelled (a
    statement timeout among them), a pool closing. A service answers it as "try again later"."""


class NoAnswer(DatabaseUnavailable):
    """The database did not answer within a service's deadline
    (:func:`wiscat.shared.db.pool.answered`): a server that hangs (wedged, its host or network
    gone silent) or a lock held for long."""


class StandbyBehind(DatabaseUnavailable):
    """The standby a provider reads from has not replayed, within
    ``Settings.read_replay_wait_seconds``, what a list needs: the primary's writes reach it
    late (replication lag, or replay paused). The client is asked to come back."""


class OutOfResources(DatabaseFailed):
    """The server is out of a resource: disk full, out of memory, too many connections."""


class UnstorableText(DatabaseError):
    """Text PostgreSQL cannot hold (U+0000, which a URL, a form or JSON can carry as ``%00`` or
    ``\\u0000``): a request that brings such text is the client's error, and the services answer
    it as one."""


class SchemaNotCurrent(DatabaseError):
    """The database schema is older (or newer) than this code's migrations."""


class EmbeddedServerError(DatabaseError):
    """The embedded PostgreSQL server could not be started."""


class StoreRefusal(DatabaseError):
    """A store refused a change because of the data it holds (a name taken, a row gone, another
    network's chain): not a failure of the database, and no retry helps. The caller explains it
    to whoever asked for the change."""
