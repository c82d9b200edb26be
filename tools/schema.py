"""Write ``shared/db/schema.sql``: the schema the migrations build, as one readable file.

The migrations are the source of truth (they upgrade a running node); ``schema.sql`` is the
canonical picture of where they lead, for reading and review. A test applies both to empty
databases and checks that they agree. Run ``make schema`` after adding a migration.

    python -m tools.schema
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from wiscat.shared.db import migrate
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.db.pool import connect

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "shared" / "db" / "schema.sql"
HEADER = """-- The schema the migrations in migrations/ build, written by `make schema`
-- (tools/schema.py) from pg_dump of a freshly migrated database. Do not edit: add a migration,
-- then regenerate.
-- tests/integration/test_schema.py checks that the two agree.
"""


def pg_dump_binary() -> str:
    import pgserver  # the embedded server's binaries, pg_dump among them

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump")


async def migrated_server_dump() -> str:
    folder = Path(tempfile.mkdtemp(prefix="wiscat-schema-"))
    server = EmbeddedPostgres(folder)
    url = server.start()
    try:
        conn = await connect(url)
        try:
            await migrate.migrate(conn)
        finally:
            await conn.close()
        # our own pg_dump binary, on a database we just made
        command = [pg_dump_binary(), "--schema-only", "--no-owner", "--no-privileges", url]
        done = await asyncio.to_thread(
            subprocess.run, command, check=True, capture_output=True, text=True
        )
        return str(done.stdout)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def dump() -> str:
    out = asyncio.run(migrated_server_dump())
    # drop the dump's own comments and session settings; keep the statements
    lines = [
        line
        for line in out.splitlines()
        if not line.startswith(("--", "SET ", "SELECT pg_catalog.set_config"))
    ]
    return HEADER + "\n" + re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def main() -> None:
    SCHEMA.write_text(dump())
    print(f"wrote {SCHEMA.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
