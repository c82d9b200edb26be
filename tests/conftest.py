"""Fixtures shared by every test: a real PostgreSQL, a fresh database per test."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from shared.db.embedded import EmbeddedPostgres
from shared.db.pool import create_pool
from tests import pg


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """The server the tests use: ``WISCAT_TEST_DATABASE_URL``, or an embedded one."""
    configured = os.environ.get("WISCAT_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    # Not under pytest's basetemp: a later pytest session on the same machine prunes old
    # basetemps, and would pull the data folder from under a server that is still running.
    folder = Path(tempfile.mkdtemp(prefix="wiscat-test-pg-"))
    server = EmbeddedPostgres(folder)
    url = server.start()
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
