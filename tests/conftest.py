"""Fixtures shared by every test: a real PostgreSQL, a fresh database per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from shared.db.embedded import EmbeddedPostgres
from shared.db.pool import create_pool
from tests import pg


@pytest.fixture(scope="session")
def postgres_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server the tests use: ``WISCAT_TEST_DATABASE_URL``, or an embedded one."""
    configured = os.environ.get("WISCAT_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg"))
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


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
