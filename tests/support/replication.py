"""PostgreSQL streaming replication for the tests: a primary made by ``initdb``, a hot standby
cloned from it by ``pg_basebackup``, both started with ``pg_ctl`` on loopback ports; the
embedded PostgreSQL's binaries (the ``pgserver`` wheel). PostgreSQL's own replication, nothing
home-made: the tests pause and resume its replay, and promote the standby.

The servers refuse to run as root: under root, as the embedded server does, they run as the
``pgserver`` system user, owner of their folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.nodes import free_port
from wiscat.shared.db import migrate
from wiscat.shared.db.embedded import import_pgserver
from wiscat.shared.db.pool import connect
from wiscat.shared.db.replication import primary_horizon, replayed_position

#: the system user the servers run as when the tests run as root
SERVER_USER = "pgserver"


def _binaries() -> Path:
    import_pgserver()  # its clear error when the wheel is missing
    from pgserver import _commands

    return Path(_commands.POSTGRES_BIN_PATH)


def _as_server_user() -> dict[str, Any]:
    """subprocess.run's arguments to run a server command as a user it accepts."""
    if os.geteuid() != 0:
        return {}
    from pgserver.utils import ensure_user_exists

    ensure_user_exists(SERVER_USER)
    return {"user": SERVER_USER, "group": pwd.getpwnam(SERVER_USER).pw_gid}


def _run(command: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [str(_binaries() / command), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **_as_server_user(),
    )
    if result.returncode != 0:
        raise RuntimeError(f"{command} {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result.stdout


def _own(folder: Path) -> None:
    """Let the server user own ``folder`` (and reach it) when the tests run as root."""
    if os.geteuid() != 0:
        return
    entry = pwd.getpwnam(SERVER_USER)
    for parent in folder.parents:
        parent.chmod(parent.stat().st_mode | 0o011)  # traversable by others
    os.chown(folder, entry.pw_uid, entry.pw_gid)


@dataclass
class Server:
    """One PostgreSQL server of the pair, on ``127.0.0.1:port``."""

    data: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        _run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.data / "log"),
            "-w",
            "start",
            cwd=self.data,
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop it; ``immediate`` is a crash (no checkpoint, recovery at the next start)."""
        with contextlib.suppress(RuntimeError):  # not running
            _run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", cwd=self.data)

    def promote(self) -> None:
        """Promote a standby (``pg_ctl promote``): it ends recovery and takes writes."""
        _run("pg_ctl", "-D", str(self.data), "-w", "promote", cwd=self.data)

    def log(self) -> str:
        return (self.data / "log").read_text(errors="replace")


def _settings(port: int, folder: Path) -> str:
    # fsync off, as the tests' own server (tests/conftest.py): nothing here outlives a test
    return (
        f"port = {port}\n"
        "listen_addresses = '127.0.0.1'\n"
        f"unix_socket_directories = '{folder}'\n"
        "fsync = off\n"
        "full_page_writes = off\n"
        "max_connections = 200\n"
        "wal_level = replica\n"
        "max_wal_senders = 5\n"
        "hot_standby = on\n"
        "wal_receiver_status_interval = 1s\n"
    )


def make_primary(folder: Path) -> Server:
    """A new primary in ``folder``/primary, started."""
    data = folder / "primary"
    data.mkdir()
    _own(data)
    _run(
        "initdb",
        "-D",
        str(data),
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=utf8",
        "--wal-segsize=1",
        cwd=data,
    )
    port = free_port()
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(_settings(port, data))
    server = Server(data, port)
    server.start()
    return server


def make_standby(primary: Server, folder: Path, via: int | None = None) -> Server:
    """A hot standby of ``primary`` in ``folder``/standby (``pg_basebackup -R``: it streams
    from the primary, or from port ``via`` of 127.0.0.1: a proxy to it), started."""
    data = folder / "standby"
    data.mkdir()
    _own(data)
    data.chmod(0o700)
    _run(
        "pg_basebackup",
        "-h",
        "127.0.0.1",
        "-p",
        str(primary.port),
        "-U",
        "postgres",
        "-D",
        str(data),
        "-R",
        "-X",
        "stream",
        "-c",
        "fast",
        cwd=data,
    )
    port = free_port()
    with (data / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"port = {port}\nunix_socket_directories = '{data}'\n")
        if via is not None:
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={via} user=postgres'\n")
    server = Server(data, port)
    server.start()
    return server


class Replication:
    """The servers of one test's replication, in a folder of their own: :meth:`primary` makes
    one, :meth:`standby` a standby of it; leaving :func:`replication` stops them all."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.servers: list[Server] = []

    def primary(self) -> Server:
        server = make_primary(self.folder)
        self.servers.append(server)
        return server

    def standby(self, primary: Server, via: int | None = None) -> Server:
        server = make_standby(primary, self.folder, via)
        self.servers.append(server)
        return server


@contextlib.contextmanager
def replication() -> Iterator[Replication]:
    """A :class:`Replication` in a fresh folder, whose servers are stopped (and folder removed)
    at the end."""
    folder = Path(tempfile.mkdtemp(prefix="wiscat-replica-"))
    folder.chmod(0o755)
    servers = Replication(folder)
    try:
        yield servers
    finally:
        for server in reversed(servers.servers):
            server.stop("immediate")
        # removed in the background: unlinking two data folders' thousand files each takes
        # seconds on a busy machine, and nothing waits for it (but
        # the interpreter's exit)
        threading.Thread(target=shutil.rmtree, args=(folder, True)).start()


async def migrated_primary(made: Replication, database: str) -> Server:
    """A new primary of ``made`` holding ``database``, created and migrated."""
    primary = await asyncio.to_thread(made.primary)
    conn = await connect(primary.url())
    try:
        await conn.execute(f"create database {database}")
    finally:
        await conn.close()
    conn = await connect(primary.url(database))
    try:
        await migrate.migrate(conn)
    finally:
        await conn.close()
    return primary


async def caught_up(primary: Server, standby: Server, database: str = "postgres") -> None:
    """Return once the standby has replayed all the primary has written so far."""
    conn = await connect(primary.url(database))
    try:
        target = (await primary_horizon(conn)).wal_position
    finally:
        await conn.close()
    conn = await connect(standby.url(database))
    try:
        for _ in range(600):
            if (await replayed_position(conn) or 0) >= target:
                return
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    raise AssertionError(f"the standby did not catch up: {standby.log()[-2000:]}")


def several_hosts(servers: list[Server], database: str, attrs: str = "read-write") -> str:
    """A URL naming every server, whose connections go to the one with ``attrs``
    (``target_session_attrs``): the primary, whichever it is."""
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in servers)
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs={attrs}"


async def pause_replay(standby: Server, database: str = "postgres") -> None:
    """Pause the standby's replay (it goes on receiving) until :func:`resume_replay`."""
    conn = await connect(standby.url(database))
    try:
        await conn.execute("select pg_wal_replay_pause()")
        for _ in range(200):
            if await conn.fetchval("select pg_get_wal_replay_pause_state()") == "paused":
                return
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    raise AssertionError("the standby's replay did not pause")


async def resume_replay(standby: Server, database: str = "postgres") -> None:
    conn = await connect(standby.url(database))
    try:
        await conn.execute("select pg_wal_replay_resume()")
    finally:
        await conn.close()
