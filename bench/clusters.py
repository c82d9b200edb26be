"""PostgreSQL servers the benchmark starts for itself, on loopback, in folders under bench/out/:
a throwaway cluster of Debian's ``postgresql`` package (built with lz4, as production servers
are) beside the embedded one, and a hot standby of either made by ``pg_basebackup``.

Both take the server's defaults but for ``max_connections`` (the embedded server's 400), so a
comparison between them is one of builds and versions, not of tuning. The servers refuse to run
as root: under root they run as a system user that owns their folders (Debian's ``postgres``,
the embedded wheel's ``pgserver``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.measure import OUT, free_port
from tests.support import pg
from wiscat.shared.db.embedded import EmbeddedPostgres, import_pgserver
from wiscat.shared.db.pool import connect

DEBIAN_ROOT = Path("/usr/lib/postgresql")


def debian_binaries(root: Path = DEBIAN_ROOT) -> Path | None:
    """The bin folder of the newest PostgreSQL Debian's packages installed, or None."""
    found = [p.parent for p in root.glob("*/bin/initdb")]
    if not found:
        return None
    return max(found, key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.name)])


def embedded_binaries() -> Path:
    import_pgserver()  # its clear error when the wheel is missing
    from pgserver import _commands

    return Path(_commands.POSTGRES_BIN_PATH)


def _run_as(user: str) -> dict[str, Any]:
    """subprocess.run's arguments to run a server command as ``user`` when this runs as root."""
    if os.geteuid() != 0:
        return {}
    if user == "pgserver":
        from pgserver.utils import ensure_user_exists

        ensure_user_exists(user)
    return {"user": user, "group": pwd.getpwnam(user).pw_gid}


@dataclass
class Cluster:
    """One server: its binaries, its data folder and its port on 127.0.0.1."""

    binaries: Path
    data: Path
    port: int
    user: str

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def run(self, command: str, *args: str) -> str:
        result = subprocess.run(
            [str(self.binaries / command), *args],
            cwd=self.data.parent,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            **_run_as(self.user),
        )
        if result.returncode != 0:
            raise RuntimeError(f"{command} {' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result.stdout

    def start(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "start")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def version(self) -> str:
        return self.run("postgres", "--version").strip()


def _folder(data: Path, user: str) -> None:
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    data.chmod(0o700)
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        for parent in data.parents:
            parent.chmod(parent.stat().st_mode | 0o011)  # traversable by the server's user
        os.chown(data, entry.pw_uid, entry.pw_gid)


def make_primary(binaries: Path, data: Path, user: str) -> Cluster:
    """A new server in ``data`` (initdb), started: defaults, loopback, ready for a standby."""
    _folder(data, user)
    server = Cluster(binaries, data, free_port(), user)
    server.run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=utf8")
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            f"port = {server.port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{data}'\nmax_connections = "
            f"{EmbeddedPostgres.MAX_CONNECTIONS}\nwal_level = replica\nhot_standby = on\n"
        )
    server.start()
    return server


def make_standby(primary: Cluster, data: Path) -> Cluster:
    """A hot standby of ``primary`` in ``data`` (``pg_basebackup -R``), started."""
    _folder(data, primary.user)
    standby = Cluster(primary.binaries, data, free_port(), primary.user)
    standby.run(
        "pg_basebackup",
        *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-D", str(data)),
        *("-R", "-X", "stream", "-c", "fast"),
    )
    with (data / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"port = {standby.port}\nunix_socket_directories = '{data}'\n")
    standby.start()
    return standby


SERVERS = ("embedded", "debian")


@dataclass
class BenchServer:
    """A server the benchmark runs on: its name in the figures, its URL (the ``postgres``
    database, with the migrated template beside it), what it is, and its binaries and
    :class:`Cluster` where the benchmark started it with ``initdb`` (a standby can be cloned)."""

    name: str
    url: str
    description: str
    cluster: Cluster | None = None


@contextlib.asynccontextmanager
async def bench_server(name: str) -> AsyncIterator[BenchServer]:
    """Server ``name`` of :data:`SERVERS`, started for the run (and stopped after it), its
    template database built: the embedded one (or ``WISCAT_BENCH_DATABASE_URL``), or a
    throwaway cluster of Debian's ``postgresql`` package in bench/out/debian-pg."""
    configured = os.environ.get("WISCAT_BENCH_DATABASE_URL")
    if name == "embedded" and configured:
        server = BenchServer(name, configured, "WISCAT_BENCH_DATABASE_URL")
        await pg.build_template(server.url)
        yield server
        return
    if name == "embedded":
        shutil.rmtree(OUT / "pg", ignore_errors=True)
        embedded = EmbeddedPostgres(OUT / "pg")
        url = embedded.start()
        try:
            version = await _server_version(url)
            await pg.build_template(url)
            yield BenchServer(
                "embedded PostgreSQL",
                url,
                f"embedded PostgreSQL {version} (pgserver wheel; built without lz4, so "
                "records.xml is stored uncompressed, migration 0005), its defaults",
            )
        finally:
            embedded.stop()
        return
    binaries = debian_binaries()
    if binaries is None:
        raise RuntimeError(
            f"no PostgreSQL of Debian's packages in {DEBIAN_ROOT}: `make postgresql` installs it"
        )
    cluster = await asyncio.to_thread(
        make_primary, binaries, OUT / "debian-pg" / "primary", "postgres"
    )
    try:
        version = await _server_version(cluster.url())
        await pg.build_template(cluster.url())
        yield BenchServer(
            "Debian's PostgreSQL",
            cluster.url(),
            f"Debian's PostgreSQL {version} ({binaries}, built with lz4, so records.xml is "
            "lz4-compressed, migration 0001), a throwaway cluster: its defaults but "
            f"max_connections {EmbeddedPostgres.MAX_CONNECTIONS}",
            cluster,
        )
    finally:
        cluster.stop()


async def _server_version(url: str) -> str:
    conn = await connect(url)
    try:
        return str(await conn.fetchval("show server_version")).split()[0]
    finally:
        await conn.close()
