"""A real PgBouncer (Debian's ``pgbouncer``, ``make pgbouncer``) on loopback, in transaction
mode, in front of the tests' PostgreSQL server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from tests.e2e.nodes import free_port

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


@contextlib.asynccontextmanager
async def running_pgbouncer(server_url: str) -> AsyncIterator[str]:
    """PgBouncer, pool_mode = transaction, on 127.0.0.1 before the server of ``server_url``
    (every database of it, by name); yields ``server_url`` pointed at PgBouncer (same user,
    database and password)."""
    if not os.access(BINARY, os.X_OK):
        raise AssertionError("PgBouncer is not installed: run `make pgbouncer`")
    parts = urlsplit(server_url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = parts.port or 5432
    user = parts.username or "postgres"
    password = parts.password or ""
    folder = Path(tempfile.mkdtemp(prefix="wiscat-pgbouncer-"))
    folder.chmod(0o755)
    listen = free_port()
    server = f"host={host} port={port}" + (f" password={password}" if password else "")
    (folder / "users.txt").write_text(f"{_quoted(user)} {_quoted(password)}\n")
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = {server}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
logfile = {folder / "pgbouncer.log"}
"""
    )
    command = [BINARY]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root: it runs as the user that may open the server's
        # socket folder (the embedded server's own user), or as nobody for a TCP server, and
        # writes its log here as that user
        socket_folder = Path(host)
        owner = socket_folder.owner() if socket_folder.is_dir() else "nobody"
        command += ["-u", owner]
        shutil.chown(folder, owner)
    with open(folder / "stderr", "wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *command,
            str(folder / "pgbouncer.ini"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        for _ in range(200):
            if process.returncode is not None:
                break
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", listen)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            break
        else:
            raise AssertionError("PgBouncer did not start listening")
        if process.returncode is not None:
            said = "".join(
                (folder / name).read_text(errors="replace")
                for name in ("stderr", "pgbouncer.log")
                if (folder / name).exists()
            )
            raise AssertionError(f"PgBouncer exited {process.returncode}:\n{said}")
        credentials = user + (f":{password}" if password else "")
        yield urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{listen}", query=""))
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)  # its shutdown without waiting for clients
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(folder, ignore_errors=True)
