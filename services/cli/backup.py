"""``wiscat backup FILE`` and ``wiscat restore FILE``: the whole database, embedded or a
server's, in one file of ``pg_dump``'s custom format (:mod:`wiscat.shared.db.backup`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from wiscat.cli.arguments import command
from wiscat.cli.database import existing_node, quiet_database
from wiscat.shared.db import backup as backups
from wiscat.shared.db import migrate as migrations
from wiscat.shared.db import records as records_store
from wiscat.shared.db.pool import connect, database_url
from wiscat.shared.settings import Settings


def add_parsers(sub: Any) -> None:
    p = command(
        sub,
        "backup",
        help="write the whole database to FILE with pg_dump (custom format); the node may run",
        handler=cmd_backup,
        examples=["wiscat backup wiscat-$(date +%F).dump"],
        exits={
            0: "the backup was written",
            2: "no node database, pg_dump missing or failed (its words are printed), or FILE's "
            "folder cannot be written",
        },
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the file to write (replaced whole)")
    p = command(
        sub,
        "restore",
        help="restore a backup into this node's database with pg_restore, then migrate it; "
        "stop the node first",
        handler=cmd_restore,
        examples=[
            "WISCAT_DATA_DIR=/srv/wiscat/var wiscat restore wiscat-2026-11-28.dump",
            "wiscat restore --force wiscat-2026-11-28.dump",
        ],
        exits={
            0: "restored, and its schema brought current",
            1: "the database holds records or links: nothing restored (see --force)",
            2: "FILE cannot be read, pg_restore missing or failed (nothing restored), or the "
            "database could not be used",
        },
    )
    p.add_argument("file", type=Path, metavar="FILE", help="a file written by wiscat backup")
    p.add_argument(
        "--force",
        action="store_true",
        help="restore over a database that holds records or links: the tables the backup holds "
        "are dropped with all their rows, then restored from it",
    )


def _size(file: Path) -> str:
    size = file.stat().st_size
    return f"{size / 1e6:,.1f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB"


async def cmd_backup(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat backup FILE``: the node's database dumped with PostgreSQL's own pg_dump."""
    existing_node(settings)
    embedded = settings.database_url is None
    began = time.monotonic()
    with quiet_database():
        async with database_url(settings.database_url, settings.data_dir) as url:
            await backups.dump(settings.session_url(url), args.file, embedded=embedded)
    print(
        f"backed up the database of {settings.own_set} to {args.file} "
        f"({_size(args.file)}, {time.monotonic() - began:.1f} s)"
    )
    return 0


async def cmd_restore(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat restore FILE``: a dump restored with pg_restore, into a node holding nothing
    (or over one, with --force), then migrated."""
    if not args.file.is_file():
        print(f"wiscat: no such file: {args.file}", file=sys.stderr)
        return 2
    embedded = settings.database_url is None
    with quiet_database():
        # the embedded database is made when there is none: a new node restored from a backup
        async with database_url(settings.database_url, settings.data_dir) as url:
            session = settings.session_url(url)
            conn = await connect(session)
            try:
                held = await backups.catalogue_rows(conn)
            finally:
                await conn.close()
            if held and not args.force:
                print(
                    f"wiscat: not restored: the database holds {held:,} records and links; "
                    "restore into a new node (another WISCAT_DATA_DIR or an empty database), "
                    "or give --force to replace them",
                    file=sys.stderr,
                )
                return 1
            await backups.restore(session, args.file, embedded=embedded, clean=held is not None)
            conn = await connect(session)  # the migration's lock: never through a pooler
            try:
                applied = await migrations.migrate(conn)
                other = await records_store.other_own_set(conn, settings.own_set)
            finally:
                await conn.close()
    print(
        f"restored {args.file} ({_size(args.file)})"
        + (f"; applied {len(applied)} migration(s): {', '.join(applied)}" if applied else "")
    )
    if other is not None:
        print(
            f"wiscat: the backup is of the node whose own set is {other}: start this node "
            f"with WISCAT_GISC_NAME={other.removeprefix('WIS-GISC-')}",
            file=sys.stderr,
        )
    return 0
