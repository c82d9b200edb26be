"""A real PostgreSQL for the tests: a migrated template database, and a fresh clone per test."""

from __future__ import annotations

import asyncio
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from wiscat.shared.db import migrate as migrations
from wiscat.shared.db.pool import connect

#: The migrated template each test database is cloned from: one a pytest-xdist worker, as the
#: workers may share a server (WISCAT_TEST_DATABASE_URL).
TEMPLATE = "wiscat_test_template_" + os.environ.get("PYTEST_XDIST_WORKER", "main")


def with_database(url: str, name: str) -> str:
    """``url`` pointed at database ``name``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def build_template(server_url: str) -> None:
    conn = await connect(server_url)
    try:
        await conn.execute(f"drop database if exists {TEMPLATE}")
        await conn.execute(f"create database {TEMPLATE}")
    finally:
        await conn.close()
    conn = await connect(with_database(server_url, TEMPLATE))
    try:
        await migrations.migrate(conn)
    finally:
        await conn.close()


async def clone_template(server_url: str) -> str:
    """A new database cloned from the template; returns its URL."""
    name = "wiscat_t_" + uuid.uuid4().hex[:12]
    conn = await connect(server_url)
    try:
        for attempt in range(20):
            try:
                await conn.execute(f"create database {name} template {TEMPLATE}")
                break
            except asyncpg.ObjectInUseError:  # another clone of the template is running
                if attempt == 19:
                    raise
                await asyncio.sleep(0.1)
    finally:
        await conn.close()
    return with_database(server_url, name)


async def drop_database(server_url: str, database_url: str) -> None:
    name = urlsplit(database_url).path.lstrip("/")
    for attempt in range(2):
        conn = await connect(server_url)
        try:
            await conn.execute(f"drop database if exists {name} with (force)")
            return
        except (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError):
            if attempt:
                raise
        finally:
            await conn.close()
