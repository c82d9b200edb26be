"""Database failures as the rest of wiscat sees them.

Exception tree::

    DatabaseError           any failure talking to PostgreSQL, translated once at this edge
     +-- SchemaNotCurrent   the database lacks migrations this code needs
     +-- EmbeddedServerError  the embedded PostgreSQL could not be started
"""


class DatabaseError(Exception):
    """A failure talking to PostgreSQL."""


class SchemaNotCurrent(DatabaseError):
    """The database schema is older (or newer) than this code's migrations."""


class EmbeddedServerError(DatabaseError):
    """The embedded PostgreSQL server could not be started."""
