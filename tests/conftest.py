"""Fixtures shared by every test: a real PostgreSQL, a fresh database per test."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.support import pg
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.db.pool import connect, create_pool

#: Selects the Hypothesis profile of the property tests (RELIABILITY F01-F03): ``ci`` (the
#: default, 100 examples a test), ``soak`` (100 times as many, for ``make soak``) or ``mutants``
#: (``ci`` without shrinking: tools/mutants.py needs only to know that a test fails).
HYPOTHESIS_PROFILE = "WISCAT_HYPOTHESIS_PROFILE"

# No deadline: a test never asserts speed, and a loaded machine would make one flaky. The
# examples that failed are kept under .pytest_cache (ignored by git) and replayed first.
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    database=DirectoryBasedExampleDatabase(
        Path(__file__).parent.parent / ".pytest_cache" / "hypothesis"
    ),
    print_blob=True,
)
settings.register_profile("soak", settings.get_profile("ci"), max_examples=10_000)
settings.register_profile(
    "mutants",
    settings.get_profile("ci"),
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE, "ci"))


async def without_fsync(url: str) -> None:
    """Let the tests' own server skip fsync. Every test drops the database it used, and each
    drop waits for a checkpoint, which with fsync took about 1.5 s (on a loaded 2-core machine;
    0.1 s without): the biggest single cost of the suite. A server killed (-m immediate) loses
    nothing this way, as its writes are in the system's page cache; only a crash of the machine
    would, and the test server is thrown away then. Commits still wait for their WAL write
    (synchronous_commit stays on), so a test that kills a server sees what it committed. Tests
    that crash a server on purpose (D02) start one of their own, with the defaults."""
    conn = await connect(url)
    try:
        await conn.execute("alter system set fsync = off")
        await conn.execute("alter system set full_page_writes = off")
        await conn.execute("select pg_reload_conf()")
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """The server the tests use: ``WISCAT_TEST_DATABASE_URL``, or an embedded one."""
    configured = os.environ.get("WISCAT_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    # Not under pytest's basetemp: a later pytest session on the same machine prunes old
    # basetemps, and would pull the data folder from under a server that is still running.
    # WISCAT_TEST_PG_PARENT: where the mutation runner looks for a server its kill left.
    parent = os.environ.get("WISCAT_TEST_PG_PARENT")
    folder = Path(tempfile.mkdtemp(prefix="wiscat-test-pg-", dir=parent))
    server = EmbeddedPostgres(folder)
    url = server.start()
    asyncio.run(without_fsync(url))
    try:
        yield url
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def template_ready(postgres_server_url: str) -> str:
    await pg.build_template(postgres_server_url)
    return postgres_server_url


@pytest.fixture
async def database_url(template_ready: str) -> AsyncIterator[str]:
    """URL of a fresh, migrated database for this test alone."""
    url = await pg.clone_template(template_ready)
    try:
        yield url
    finally:
        await pg.drop_database(template_ready, url)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, max_size=5)
    try:
        yield pool
    finally:
        await pool.close()
