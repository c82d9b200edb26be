"""D02: the sink's PostgreSQL stopped with `pg_ctl stop -m immediate` in the middle of a harvest
(a crash: no checkpoint, recovery from the WAL at the next start), then started again.

The harvest that was running fails with the database's error; the next one, once the server is
back, ends with exactly the source's records, no duplicate row, and a high-water mark no later
than the source's newest datestamp (invariant 3: only a completed list moves it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from tests.e2e.copies import assert_copy_is_the_source, assert_mark_is_covered
from tests.e2e.test_harvester_killed import WISCAT, content, env_for, wiscat
from tests.support import factories
from tests.support.pg import with_database
from tests.support.servers import running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import migrate
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.db.pool import Pool, connect, create_pool

SOURCE_SET = "WIS-GISC-TEST"
RECORDS = 2000


def crash(server_folder: Path) -> None:
    """Stop the server as `pg_ctl stop -m immediate` does, a power cut's equal: SIGQUIT to the
    postmaster, no shutdown checkpoint (pg_ctl itself will not run as root, as tests may)."""
    pid = int((server_folder / "postgres" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGQUIT)
    for _ in range(3000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError("the postmaster did not stop")


async def test_d02_the_database_crashes_mid_harvest_and_the_next_run_completes(
    db: Pool, database_url: str
) -> None:
    await factories.load_records(db, SOURCE_SET, range(RECORDS))
    folder = Path(tempfile.mkdtemp(prefix="wiscat-crash-pg-"))
    server = EmbeddedPostgres(folder)
    try:
        server_url = await asyncio.to_thread(server.start)
        admin = await connect(server_url)
        try:
            await admin.execute("create database sink")
        finally:
            await admin.close()
        sink_url = with_database(server_url, "sink")
        conn = await connect(sink_url)
        try:
            await migrate.migrate(conn)
        finally:
            await conn.close()
        env = env_for(sink_url) | {"WISCAT_HARVEST_LEASE_SECONDS": "1"}
        async with running_provider(database_url, page_size=100) as provider:
            code, out = await wiscat(
                sink_url, "link", "add", "src", "--url", provider.oai, "--set", SOURCE_SET
            )
            assert code == 0, out
            sink = await create_pool(sink_url, max_size=2)
            process = await asyncio.create_subprocess_exec(
                WISCAT,
                "harvest",
                "src",
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                for _ in range(3000):
                    if (await sink.fetchval("select max(pages) from harvest_runs") or 0) >= 5:
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError("the harvest never got to its fifth page")
            finally:
                await sink.close()
            await asyncio.to_thread(crash, folder)
            out_bytes, _ = await asyncio.wait_for(process.communicate(), 120)
            said = out_bytes.decode()
            assert process.returncode == 2, said
            assert "wiscat: the database could not be reached during the harvest of src" in said

            # this process's handle on the crashed server is let go (its stop finds no server),
            # and a new one starts it, as a node started again would: recovery from the WAL
            with contextlib.suppress(Exception):
                await asyncio.to_thread(server.stop)
            server = EmbeddedPostgres(folder)
            await asyncio.to_thread(server.start)
            sink = await create_pool(sink_url, max_size=2)
            try:
                link = await link_store.get_link(sink, "src")
                assert link is not None and link.high_water_mark is None
                partial = await sink.fetchval("select count(*) from records")
                assert partial < RECORDS
                await asyncio.sleep(1.2)  # the dead run's lease runs out
                code, out = await wiscat(sink_url, "harvest", "src")
                assert code == 0, out
                assert await content(sink) == await content(db)
                await assert_copy_is_the_source(sink, db)
                link = await link_store.get_link(sink, "src")
                newest = await db.fetchval("select max(datestamp) from records")
                assert link is not None and link.high_water_mark is not None
                assert link.high_water_mark <= newest
                await assert_mark_is_covered(sink, db)
            finally:
                await sink.close()
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(folder, ignore_errors=True)
