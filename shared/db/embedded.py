"""An embedded PostgreSQL server for nodes without ``WISCAT_DATABASE_URL``.

The server comes from the ``pgserver`` wheel, lives in ``<data_dir>/postgres`` and listens on a
Unix socket only, so a fresh machine needs no database install and opens no TCP port.

After an unclean stop (a crash, a power cut, a killed container) the server first replays its
write-ahead log, which for a large catalogue takes longer than the 10 seconds ``pgserver`` waits
for it; the server goes on starting all the same. :meth:`EmbeddedPostgres.start` then waits for
it, saying so in the log, up to :attr:`EmbeddedPostgres.start_timeout`.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

from shared.db.errors import EmbeddedServerError

log = logging.getLogger("wiscat.db")

# pg_ctl passes the server its socket folder (the data folder) inside a shell command line,
# unquoted: a space or a shell character there breaks the start (or worse).
_PLAIN_PATH = re.compile(r"[\w/.+,@%=:~-]+")


class _NoTimeoutDump(logging.Filter):
    """Drops the copy of the server's whole log that ``pgserver`` writes when its wait times out:
    the start goes on here, and that log can hold thousands of lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout starting server")


def import_pgserver() -> Any:
    """The ``pgserver`` module, imported on first use: production nodes never load it."""
    try:
        with warnings.catch_warnings():
            # platformdirs notes at import that XDG_RUNTIME_DIR is unset (servers, containers)
            # and uses a folder in /tmp instead: nothing for an operator to do
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pgserver
    except ImportError as exc:  # pragma: no cover - pgserver is a hard dependency
        raise EmbeddedServerError("pgserver is not installed") from exc
    return pgserver


class EmbeddedPostgres:
    """A running embedded server; ``url`` is its libpq URL. ``stop()`` shuts it down."""

    # Room for a whole mesh of nodes on one machine (the demo, the tests, the benchmarks): each
    # node's provider and harvester keep pools of their own. The server's default is 100.
    MAX_CONNECTIONS = 400

    def __init__(self, data_dir: Path, *, start_timeout: float = 600.0) -> None:
        self.path = (data_dir / "postgres").resolve()
        # how long a start may take in all, recovery included
        self.start_timeout = start_timeout
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the server and return a libpq URL for the ``postgres`` database."""
        if not _PLAIN_PATH.fullmatch(str(self.path)):
            raise EmbeddedServerError(
                f"the embedded PostgreSQL cannot run in {str(self.path)!r}: pg_ctl cannot pass "
                "a path with spaces or shell characters to the server; set WISCAT_DATA_DIR to "
                "a plain path (letters, digits, / . _ - +), or WISCAT_DATABASE_URL to a server"
            )
        pgserver = import_pgserver()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.start_timeout
        try:
            self._server = self._attach(pgserver, deadline)
            current = int(str(self._server.psql("show max_connections;")).split()[2])
            if current < self.MAX_CONNECTIONS:
                # a setting read at start only: set it once, then start the server again
                self._server.psql(f"alter system set max_connections = {self.MAX_CONNECTIONS};")
                self._server.cleanup()
                self._server = self._attach(pgserver, deadline)
        except EmbeddedServerError:
            raise
        except Exception as exc:
            raise EmbeddedServerError(f"embedded PostgreSQL failed to start: {exc}") from exc
        log.info("embedded PostgreSQL running in %s", self.path)
        return str(self._server.get_uri())

    def _attach(self, pgserver: Any, deadline: float) -> Any:
        """``pgserver``'s handle on the server, started if need be, once it accepts connections."""
        quiet = _NoTimeoutDump()
        logging.getLogger("pgserver").addFilter(quiet)
        try:
            return pgserver.get_server(self.path, cleanup_mode="stop")
        except (subprocess.TimeoutExpired, AssertionError):
            # Timed out waiting for the server it started, or found one that is not ready yet
            # (started by another process a moment ago): the server may still come up.
            # pgserver keeps the handle it could not finish; a new one attaches once it is up.
            pgserver.PostgresServer._instances.pop(self.path, None)
            self._wait_until_ready(deadline)
            return pgserver.get_server(self.path, cleanup_mode="stop")
        finally:
            logging.getLogger("pgserver").removeFilter(quiet)

    def _status(self) -> str | None:
        """The running server's status (``postmaster.pid``'s last line); None if none runs."""
        try:
            lines = (self.path / "postmaster.pid").read_text().splitlines()
            os.kill(int(lines[0]), 0)
        except (OSError, ValueError, IndexError):
            return None  # no file (stopped), a file being written, or a pid no longer running
        # the status line comes last, written once the server has listened (PostgreSQL 10+)
        return lines[7].strip() if len(lines) > 7 else "starting"

    def _wait_until_ready(self, deadline: float) -> None:
        started = time.monotonic()
        told = started
        log.warning(
            "embedded PostgreSQL in %s is still starting (after an unclean stop it first "
            "replays its write-ahead log); waiting for it",
            self.path,
        )
        while True:
            status = self._status()
            if status is None:
                time.sleep(0.5)  # read again: the server rewrites that file as it goes
                status = self._status()
            if status is None:
                raise EmbeddedServerError(
                    f"embedded PostgreSQL stopped while starting; see its log, {self.path / 'log'}"
                )
            if status == "ready":
                log.info("embedded PostgreSQL ready after %.0f s more", time.monotonic() - started)
                return
            now = time.monotonic()
            if now >= deadline:
                raise EmbeddedServerError(
                    f"embedded PostgreSQL did not become ready within {self.start_timeout:.0f} s "
                    f"(still {status!r}); it goes on starting, see its log, "
                    f"{self.path / 'log'}"
                )
            if now - told >= 15:
                told = now
                log.info(
                    "embedded PostgreSQL still starting (%.0f s): %s",
                    now - started,
                    status,
                )
            time.sleep(0.5)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
