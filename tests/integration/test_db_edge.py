"""The driver's errors become wiscat's at the edge of wiscat.shared.db, on a real PostgreSQL and a
real fault proxy: what services act on (unavailable, out of time, text PostgreSQL cannot hold)
arrives as wiscat.shared.db.errors' classes, with the driver's message and class name kept;
an error in a query (a bug) goes up as the driver raised it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.support.faultproxy import Down, SlowClose, postgres_url, proxy_to_postgres
from tests.support.registry_network import make_network
from wiscat.shared.db import links as link_store
from wiscat.shared.db import registry as registry_store
from wiscat.shared.db.errors import (
    DatabaseError,
    DatabaseFailed,
    DatabaseUnavailable,
    StoreRefusal,
    UnstorableText,
)
from wiscat.shared.db.pool import Pool, connect, create_pool, limit_statements
from wiscat.shared.model import NewLink


async def test_a_server_gone_is_unavailable_when_a_connection_is_taken(database_url: str) -> None:
    async with proxy_to_postgres(database_url) as proxy:
        pool = await create_pool(postgres_url(proxy, database_url), min_size=1, max_size=1)
        try:
            assert await pool.fetchval("select 1") == 1
            proxy.set(Down())
            await asyncio.sleep(0.2)  # the pool hears its connection close
            with pytest.raises(DatabaseUnavailable) as gone:
                async with pool.acquire():
                    pass
        finally:
            pool.terminate()
    assert gone.value.kind == "ConnectionRefusedError"
    assert isinstance(gone.value.__cause__, ConnectionRefusedError)
    assert str(gone.value) == str(gone.value.__cause__)


async def test_a_connection_cut_under_a_query_is_unavailable(database_url: str) -> None:
    async with proxy_to_postgres(database_url) as proxy:
        pool = await create_pool(postgres_url(proxy, database_url), min_size=1, max_size=1)
        try:
            async with pool.acquire() as conn:
                query = asyncio.ensure_future(conn.fetchval("select pg_sleep(5)"))
                await asyncio.sleep(0.3)
                proxy.set(Down())
                with pytest.raises(DatabaseUnavailable) as cut:
                    await query
        finally:
            pool.terminate()
    assert (cut.value.kind, str(cut.value)) == (
        "ConnectionDoesNotExistError",
        "connection was closed in the middle of operation",
    )


async def test_a_connection_told_it_is_ended_but_not_yet_closed_is_unavailable(
    database_url: str,
) -> None:
    """A server shutting down tells each session so (a FATAL error) and then closes it. When a
    statement starts between the two, the driver raises a protocol error of its own
    (InternalClientError, "cannot switch to state ..."), not a connection error: in a container
    the close came late, and a provider answered 500 to Identify as the primary stopped, where
    it owes 503."""
    admin = await connect(database_url)
    async with proxy_to_postgres(database_url) as proxy:
        proxy.set(SlowClose("downstream", 3.0))
        pool = await create_pool(postgres_url(proxy, database_url), min_size=1, max_size=1)
        try:
            async with pool.acquire() as conn:
                await admin.execute("select pg_terminate_backend($1)", conn.get_server_pid())
                await asyncio.sleep(0.3)  # the FATAL read, the end of the stream held back
                with pytest.raises(DatabaseUnavailable) as ended:
                    await conn.fetchval("select 1")
        finally:
            pool.terminate()
            await admin.close()
    assert ended.value.kind == "InternalClientError"


async def test_a_statement_timeout_is_unavailable_and_its_transaction_rolled_back(
    db: Pool,
) -> None:
    async with db.acquire() as conn:
        with pytest.raises(DatabaseUnavailable) as late:
            async with conn.transaction():
                await limit_statements(conn, 0.05)
                await conn.execute("select pg_sleep(2)")
        assert await conn.fetchval("select 1") == 1  # the connection is fine for the next
    assert (late.value.kind, str(late.value)) == (
        "QueryCanceledError",
        "canceling statement due to statement timeout",
    )


async def test_nul_in_text_is_unstorable_text(db: Pool) -> None:
    with pytest.raises(UnstorableText) as refused:
        await db.fetchval("select $1::text", "a\x00b")
    assert (refused.value.kind, str(refused.value)) == (
        "CharacterNotInRepertoireError",
        'invalid byte sequence for encoding "UTF8": 0x00',
    )


async def test_an_error_in_a_query_is_not_translated(db: Pool) -> None:
    with pytest.raises(asyncpg.PostgresSyntaxError) as bug:
        await db.fetchval("selec 1")
    assert not isinstance(bug.value, DatabaseError)
    with pytest.raises(asyncpg.UniqueViolationError):  # shared.db's own modules handle it
        async with db.acquire() as conn, conn.transaction():
            await conn.execute("create temporary table t (k int primary key)")
            await conn.execute("insert into t values (1), (1)")


async def test_a_server_that_refuses_at_start_is_unavailable(database_url: str) -> None:
    async with proxy_to_postgres(database_url) as proxy:
        url = postgres_url(proxy, database_url)
        proxy.set(Down())
        with pytest.raises(DatabaseUnavailable) as refused:
            await create_pool(url)
    assert str(refused.value).startswith("cannot connect to the database: ")
    assert refused.value.kind == "ConnectionRefusedError"


async def test_a_closed_port_is_unavailable() -> None:
    """A refused connection is the tree's DatabaseUnavailable: try again later."""
    with socket.socket() as probe:  # a port of this host on which nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DatabaseUnavailable) as refused:
        await create_pool(f"postgresql://wiscat@127.0.0.1:{port}/wiscat")
    assert refused.value.kind == "ConnectionRefusedError"
    assert isinstance(refused.value.__cause__, ConnectionRefusedError)
    assert str(refused.value).startswith("cannot connect to the database: ")


async def test_a_database_that_does_not_exist_is_not_unavailable(database_url: str) -> None:
    """A server that turns the connection away for good is a DatabaseError, not a failure to
    retry."""
    missing = urlsplit(database_url)._replace(path="/no_such_database").geturl()
    with pytest.raises(DatabaseError) as refused:
        await create_pool(missing)
    assert not isinstance(refused.value, DatabaseFailed)
    assert refused.value.kind == "InvalidCatalogNameError"
    assert 'database "no_such_database" does not exist' in str(refused.value)


async def test_the_stores_refusals_are_refusals_not_failures(db: Pool, tmp_path: Path) -> None:
    """LinkExists and GenesisMismatch (as LinkGone and LinkHasRecords) are StoreRefusals: the
    database worked, so no "the database failed" handler (DatabaseFailed) takes them."""
    link = NewLink("dwd", "http://127.0.0.1:9/oai", None, "WIS-GISC-DWD")
    await link_store.add_link(db, link)
    with pytest.raises(StoreRefusal) as taken:
        await link_store.add_link(db, link)
    assert isinstance(taken.value, link_store.LinkExists)
    assert not isinstance(taken.value, DatabaseFailed)
    assert str(taken.value) == "a link named 'dwd' exists already"
    for folder in ("ours", "theirs"):
        (tmp_path / folder).mkdir()
    ours, theirs = make_network(tmp_path / "ours", 1), make_network(tmp_path / "theirs", 1)
    await registry_store.ensure_genesis(db, ours.network.genesis)
    with pytest.raises(StoreRefusal) as other:
        await registry_store.ensure_genesis(db, theirs.network.genesis)
    assert isinstance(other.value, registry_store.GenesisMismatch)
    assert not isinstance(other.value, DatabaseFailed)
    assert str(other.value).startswith("the database holds the chain of another registry network")


async def test_a_transaction_whose_connection_is_cut_is_unavailable(database_url: str) -> None:
    """Its end (asyncpg checks the connection itself there, before any COMMIT), and a new
    transaction on the closed connection, raise wiscat's error, not the driver's."""
    async with proxy_to_postgres(database_url) as proxy:
        conn = await connect(postgres_url(proxy, database_url))
        try:
            with pytest.raises(DatabaseUnavailable) as ended:
                async with conn.transaction():
                    await conn.fetchval("select 1")
                    proxy.set(Down())
                    await asyncio.sleep(0.2)  # the connection hears it is closed
            with pytest.raises(DatabaseUnavailable) as begun:
                conn.transaction()
        finally:
            conn.terminate()
    assert ended.value.kind == "InterfaceError"
    assert "connection is closed" in str(ended.value)
    assert (begun.value.kind, str(begun.value)) == ("InterfaceError", "connection is closed")
