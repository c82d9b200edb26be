"""Backups with PostgreSQL's own tools: ``pg_dump -Fc`` writes one file of the whole database,
``pg_restore`` reads it back (docs/backup-and-recovery.md).

The tools come from where the server does: the embedded server's own (``pgserver``'s ``bin``
folder, the server's version), or for ``WISCAT_DATABASE_URL`` those on ``PATH`` (Debian's
``postgresql-client``), which must be of the server's major version or newer. The password
never goes on a command line, which any user of the machine can read (``ps``): it is taken out
of the URL and given in ``PGPASSWORD``, the tools' own environment variable.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from wiscat.shared.db.errors import DatabaseError
from wiscat.shared.db.queries import load

_SQL = load("backup.sql")

Executor = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool

# What the tool printed that is said when it fails and names no error: the end of its stderr.
_LAST_LINES = 5


class BackupError(DatabaseError):
    """A backup or restore could not be made; the message says why (the tool's own words)."""


def tool(name: str, *, embedded: bool) -> str:
    """The path of PostgreSQL's ``name`` (pg_dump, pg_restore) for this node's server."""
    if embedded:
        from wiscat.shared.db.embedded import import_pgserver

        import_pgserver()  # says how to install it when it is not
        from pgserver._commands import POSTGRES_BIN_PATH

        return str(Path(POSTGRES_BIN_PATH) / name)
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} is not on PATH: install PostgreSQL's client tools, of the server's major "
            "version or newer (Debian: apt-get install postgresql-client)"
        )
    return found


def without_password(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its password, and the environment that gives the password to libpq."""
    parts = urlsplit(url)
    password = unquote(parts.password) if parts.password is not None else None
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = userinfo.split(":", 1)[0] + "@" + host
    query = parse_qsl(parts.query, keep_blank_values=True)
    for key, value in query:
        if key == "password":
            password = value
    query = [(key, value) for key, value in query if key != "password"]
    clean = urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
    return clean, ({"PGPASSWORD": password} if password else {})


async def _run(program: str, args: list[str], url: str) -> None:
    target, secret = without_password(url)
    process = await asyncio.create_subprocess_exec(
        program,
        *args,
        f"--dbname={target}",
        env={**os.environ, **secret},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate()
    if process.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        # the first error says why; the lines after it quote the statement (a whole function)
        errors = [line for line in lines if " error: " in line]
        said = errors[:1] or lines[-_LAST_LINES:]
        raise BackupError(
            f"{Path(program).name} failed (exit {process.returncode}): " + " | ".join(said)
        )


async def dump(url: str, file: Path, *, embedded: bool) -> None:
    """Write the whole database at ``url`` to ``file`` (custom format), through a file beside
    it renamed when whole: an interrupted backup leaves no half file under the name."""
    part = file.with_name(f".{file.name}.part")
    try:
        await _run(tool("pg_dump", embedded=embedded), ["--format=custom", f"--file={part}"], url)
        os.replace(part, file)
    finally:
        part.unlink(missing_ok=True)


async def restore(url: str, file: Path, *, embedded: bool, clean: bool) -> None:
    """Restore ``file`` into the database at ``url`` in one transaction (a failure changes
    nothing); ``clean`` first drops the objects the backup holds, with their rows. Objects are
    owned by the user who restores, whoever owned them where the backup was made."""
    args = ["--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges"]
    if clean:
        args += ["--clean", "--if-exists"]
    await _run(tool("pg_restore", embedded=embedded), [*args, str(file)], url)


async def catalogue_rows(db: Executor) -> int | None:
    """The records and links the database holds; None when it has no schema yet."""
    if not await db.fetchval(_SQL["has_schema"]):
        return None
    rows: int = await db.fetchval(_SQL["catalogue_rows"])
    return rows
