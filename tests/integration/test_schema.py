"""``shared/db/schema.sql``, the canonical schema from `make schema`, agrees with the migrations."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg

from tests.support.pg import drop_database, with_database
from wiscat.shared.db.pool import connect

SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "db" / "schema.sql"

DESCRIBE = {
    "columns": """
        select c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid)
        from pg_attribute a
        join pg_class c on c.oid = a.attrelid
        join pg_namespace n on n.oid = c.relnamespace
        left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where n.nspname = 'public' and c.relkind = 'r' and a.attnum > 0 and not a.attisdropped
        order by 1, 2""",
    "constraints": """
        select c.relname, k.conname, pg_get_constraintdef(k.oid)
        from pg_constraint k
        join pg_class c on c.oid = k.conrelid
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public'
        order by 1, 2""",
    "indexes": "select tablename, indexname, indexdef from pg_indexes "
    "where schemaname = 'public' order by 1, 2",
}


async def describe(url: str) -> dict[str, list[tuple[object, ...]]]:
    conn = await connect(url)
    try:
        return {
            name: [tuple(row) for row in await conn.fetch(query)]
            for name, query in DESCRIBE.items()
        }
    finally:
        await conn.close()


async def test_schema_sql_builds_what_the_migrations_build(
    database_url: str, template_ready: str
) -> None:
    from_migrations = await describe(database_url)
    name = "wiscat_s_" + uuid.uuid4().hex[:12]
    empty = with_database(template_ready, name)
    conn: asyncpg.Connection = await connect(template_ready)
    try:
        await conn.execute(f"create database {name} template template0")
    finally:
        await conn.close()
    try:
        conn = await connect(empty)
        try:
            await conn.execute(SCHEMA.read_text())
        finally:
            await conn.close()
        from_schema = await describe(empty)
    finally:
        await drop_database(template_ready, empty)
    assert from_schema["columns"], "schema.sql created no table"
    for part in DESCRIBE:
        assert from_schema[part] == from_migrations[part], (
            f"shared/db/schema.sql and migrations/ differ in {part}: run `make schema`"
        )
