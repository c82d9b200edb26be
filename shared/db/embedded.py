"""An embedded PostgreSQL server for nodes without ``WISCAT_DATABASE_URL``.

The server comes from the ``pgserver`` wheel, lives in ``<data_dir>/postgres`` and listens on a
Unix socket only, so a fresh machine needs no database install and opens no TCP port.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from shared.db.errors import EmbeddedServerError

log = logging.getLogger("wiscat.db")


class EmbeddedPostgres:
    """A running embedded server; ``url`` is its libpq URL. ``stop()`` shuts it down."""

    # Room for a whole mesh of nodes on one machine (the demo, the tests, the benchmarks): each
    # node's provider and harvester keep pools of their own. The server's default is 100.
    MAX_CONNECTIONS = 400

    def __init__(self, data_dir: Path) -> None:
        self.path = (data_dir / "postgres").resolve()
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the server and return a libpq URL for the ``postgres`` database."""
        try:
            import pgserver  # imported lazily: production nodes never load it
        except ImportError as exc:  # pragma: no cover - pgserver is a hard dependency
            raise EmbeddedServerError("pgserver is not installed") from exc
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._server = pgserver.get_server(  # type: ignore[attr-defined]
                self.path, cleanup_mode="stop"
            )
            current = int(str(self._server.psql("show max_connections;")).split()[2])
            if current < self.MAX_CONNECTIONS:
                # a setting read at start only: set it once, then start the server again
                self._server.psql(f"alter system set max_connections = {self.MAX_CONNECTIONS};")
                self._server.cleanup()
                self._server = pgserver.get_server(  # type: ignore[attr-defined]
                    self.path, cleanup_mode="stop"
                )
        except Exception as exc:
            raise EmbeddedServerError(f"embedded PostgreSQL failed to start: {exc}") from exc
        log.info("embedded PostgreSQL running in %s", self.path)
        return str(self._server.get_uri())

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
