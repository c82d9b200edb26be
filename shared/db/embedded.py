"""An embedded PostgreSQL server for nodes without ``WISCAT_DATABASE_URL``.

The server comes from the ``pgserver`` wheel, lives in ``<data_dir>/postgres`` and listens on a
Unix socket only, so a fresh machine needs no database install and opens no TCP port.

After an unclean stop (a crash, a power cut, a killed container) the server first replays its
write-ahead log, which for a large catalogue takes longer than the 10 seconds ``pgserver`` waits
for it; the server goes on starting all the same. :meth:`EmbeddedPostgres.start` then waits for
it, saying so in the log, up to :attr:`EmbeddedPostgres.start_timeout`.

An unclean stop also leaves ``postmaster.pid`` behind, naming a process id that, after a restart,
another process may hold (in a container, very likely). ``pgserver`` trusts any live process of
that id: it would attach to a server that does not run, and at exit stop "it" with SIGTERM, then
SIGKILL. :meth:`EmbeddedPostgres.start` first checks that the process is this folder's server,
and removes the file when it is not, as PostgreSQL itself does with a lock file whose process is
gone. It also forgets the processes that no longer run from ``pgserver``'s list of those using
the server: a process killed with SIGKILL stays in it, and the server, which is stopped when its
last user exits, would then never be stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

from wiscat.shared.db.errors import EmbeddedServerError

log = logging.getLogger("wiscat.db")

# pg_ctl passes the server its socket folder (the data folder) inside a shell command line,
# unquoted: a space or a shell character there breaks the start (or worse).
_PLAIN_PATH = re.compile(r"[\w/.+,@%=:~-]+")

# A line of the server's log: its time and process, then the level and the message.
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+ \w+ \[\d+\] ")
# A line that says why a server stopped: an error that ended a process of it, not a connection
# refused while it was starting or stopping ("the database system is shutting down").
_CAUSE = re.compile(r"^(PANIC|FATAL):\s+(?!\s|the database system is )")


def _last_words(lines: list[str]) -> str:
    """What a stopped server's log says of its end: the last error that ended a process of it
    (the cause: "FATAL: could not write to file ...: No space left on device"), if any among its
    last lines, then its last line, each without its time and process."""
    recent = [_LOG_LINE.sub("", line).strip() for line in lines[-50:]]
    recent = [line for line in recent if line]
    causes = [line for line in recent if _CAUSE.match(line)]
    return " | ".join(causes[-1:] + recent[-1:])


class _NoLogDump(logging.Filter):
    """Drops the copies of the server's whole log, and of a failed command's output, that
    ``pgserver`` writes when a start times out or fails: the start goes on here, or fails with
    the cause taken from that log (:func:`_last_words`), and that log can hold thousands of
    lines."""

    DUMPS = ("Timeout starting server", "Failed to start server", "Failed postgres command")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.DUMPS)


def import_pgserver() -> Any:
    """The ``pgserver`` module, imported on first use: production nodes never load it."""
    try:
        with warnings.catch_warnings():
            # platformdirs notes at import that XDG_RUNTIME_DIR is unset (servers, containers)
            # and uses a folder in /tmp instead: nothing for an operator to do
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pgserver
    except ImportError as exc:
        raise EmbeddedServerError(
            "the embedded PostgreSQL is not installed: set WISCAT_DATABASE_URL to a PostgreSQL "
            "server, or install wiscat with it (pip install 'wiscat[embedded]')"
        ) from exc
    return pgserver


def _attached(lines: list[str]) -> bool:
    """Whether processes are still attached to the shared memory that ``postmaster.pid``
    (``lines``) names: the killed server's own, still ending. PostgreSQL refuses to start then,
    and so the file is kept. True when that cannot be read (no ``/proc/sysvipc``)."""
    try:
        shmid = lines[6].split()[1]
        table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except (OSError, IndexError):
        return True
    return any(row.split()[1] == shmid and row.split()[6] != "0" for row in table)


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
        self._forget_the_gone()
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
            # the server's log says why ("database files are incompatible with server"); the
            # exception names only the command that failed
            words = _last_words(self._log_lines())
            raise EmbeddedServerError(
                f"embedded PostgreSQL failed to start in {self.path}: {words or exc}"
            ) from exc
        log.info("embedded PostgreSQL running in %s", self.path)
        return str(self._server.get_uri())

    def _forget_the_gone(self) -> None:
        """Remove a ``postmaster.pid`` whose process is not this folder's server, and the
        processes that no longer run from ``pgserver``'s list of the server's users."""
        import psutil  # pgserver's own dependency: loaded, like pgserver, by embedded nodes only

        lock = self.path / "postmaster.pid"
        try:
            lines = lock.read_text().splitlines()
            pid = int(lines[0])
        except (OSError, ValueError, IndexError):
            pid = None  # no server, or one writing the file: PostgreSQL judges it
        if pid is not None and not self._may_be_this_server(pid) and not _attached(lines):
            log.warning(
                "embedded PostgreSQL: %s names process %d, which is not this folder's server "
                "(a file left by an unclean stop); removing it",
                lock,
                pid,
            )
            if len(lines) > 4:  # and the lock of its socket, which names the same process
                socket_lock = Path(lines[4].strip(), f".s.PGSQL.{lines[3].strip()}.lock")
                with contextlib.suppress(OSError, IndexError):
                    if socket_lock.read_text().splitlines()[0].strip() == str(pid):
                        socket_lock.unlink()
            lock.unlink(missing_ok=True)
        users = self.path / ".handle_pids.json"
        try:
            pids = json.loads(users.read_text())
        except (OSError, ValueError):
            return
        running = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
        if running != pids:
            users.write_text(json.dumps(running))

    def _may_be_this_server(self, pid: int) -> bool:
        """False when process ``pid`` runs and is surely not a PostgreSQL server of this folder
        (``postgres -D path``). A process that is gone is left to PostgreSQL, which removes the
        file itself; one whose command line cannot be read is left alone."""
        import psutil

        try:
            command = psutil.Process(pid).cmdline()
        except psutil.Error:  # gone, or not ours to read
            return True
        return bool(command) and Path(command[0]).name == "postgres" and str(self.path) in command

    def _attach(self, pgserver: Any, deadline: float) -> Any:
        """``pgserver``'s handle on the server, started if need be, once it accepts connections."""
        quiet = _NoLogDump()
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

    def lost(self) -> str | None:
        """Why the server this handle started (or attached to) no longer runs, with the end of
        its log; None while it runs (or before :meth:`start`).

        A server whose backend crashed restarts itself and keeps running; one that shut down
        (its disk full while it replayed its log, stopped by hand, killed) is lost.
        """
        if self._server is None:
            return None
        for _ in range(2):  # a lock file being rewritten reads as none for a moment
            if self._status() is not None:
                return None
            time.sleep(0.5)
        words = _last_words(self._log_lines())
        return f"the embedded PostgreSQL in {self.path} is no longer running" + (
            f"; its log: {words}" if words else ""
        )

    def _log_lines(self) -> list[str]:
        try:
            return (self.path / "log").read_text(errors="replace").splitlines()
        except OSError:
            return []

    def stop(self) -> None:
        """Let go of the server: pgserver shuts it down when no other process holds it."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
