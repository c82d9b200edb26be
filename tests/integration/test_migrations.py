"""Migrations: applied in order to an empty database, recorded, and idempotent."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from tests.support.pg import drop_database, with_database
from wiscat.shared.db import migrate as migrations
from wiscat.shared.db.errors import SchemaNotCurrent
from wiscat.shared.db.pool import connect


async def test_migrations_apply_to_an_empty_database_once(template_ready: str) -> None:
    name = "wiscat_m_" + uuid.uuid4().hex[:10]
    admin = await connect(template_ready)
    await admin.execute(f"create database {name}")
    await admin.close()
    url = with_database(template_ready, name)
    try:
        conn = await connect(url)
        try:
            available = [m.version for m in migrations.available()]
            try:
                await migrations.check_current(conn)
                raise AssertionError("an empty database is not current")
            except SchemaNotCurrent as exc:
                assert str(exc) == (
                    f"schema not current: missing migrations {available}; run `wiscat migrate`"
                )
            applied = await migrations.migrate(conn)
            assert applied == [m.name for m in migrations.available()]
            assert await migrations.migrate(conn) == []  # idempotent
            await migrations.check_current(conn)
            versions = await conn.fetch("select version from schema_migrations order by 1")
            assert [r["version"] for r in versions] == [m.version for m in migrations.available()]
            compression = await conn.fetchval(
                "select attcompression from pg_attribute "
                "where attrelid = 'records'::regclass and attname = 'xml'"
            )
            # lz4 where the server has it; the default compression (pglz) otherwise
            lz4 = await conn.fetchval(
                "select 'lz4' = any(enumvals) from pg_settings "
                "where name = 'default_toast_compression'"
            )
            assert compression == (b"l" if lz4 else b"\x00")
            # without lz4, stored uncompressed ('e'xternal) rather than with pglz ('x'tended)
            storage = await conn.fetchval(
                "select attstorage from pg_attribute "
                "where attrelid = 'records'::regclass and attname = 'xml'"
            )
            assert storage == (b"x" if lz4 else b"e")
        finally:
            await conn.close()
    finally:
        await drop_database(template_ready, url)


async def test_quarantine_copies_stored_before_0006_are_dropped_but_the_newest(
    template_ready: str, tmp_path: Path
) -> None:
    # before 0006 a bad record sent again was stored again: the migration keeps one row of each
    name = "wiscat_m_" + uuid.uuid4().hex[:10]
    admin = await connect(template_ready)
    await admin.execute(f"create database {name}")
    await admin.close()
    url = with_database(template_ready, name)
    for migration in migrations.available():
        if migration.version < 6:
            shutil.copy(migration.path, tmp_path)
    try:
        conn = await connect(url)
        try:
            assert len(await migrations.migrate(conn, tmp_path)) == 5
            await conn.execute("insert into sets (spec, name, kind) values ('S', 'S', 'remote')")
            await conn.execute(
                "insert into links (name, base_url, local_set) values ('peer', 'http://p/oai', 'S')"
            )
            await conn.execute(
                "insert into quarantine (link, identifier, reason, raw) values "
                "('peer', 'a', 'r1', 'x'), ('peer', 'a', 'r2', 'x'), ('peer', 'a', 'r3', 'y'), "
                "('peer', null, 'r4', 'z'), ('peer', null, 'r5', 'z'), (null, 'a', 'r6', 'x')"
            )
            assert (await migrations.migrate(conn))[0] == "0006_history.sql"
            kept = await conn.fetch("select identifier, reason from quarantine order by id")
            assert [tuple(r) for r in kept] == [("a", "r2"), ("a", "r3"), (None, "r5"), ("a", "r6")]
        finally:
            await conn.close()
    finally:
        await drop_database(template_ready, url)


async def test_0009_flags_stored_rows_with_characters_xml_forbids_keeping_datestamps(
    template_ready: str, tmp_path: Path
) -> None:
    """P14: migration 0009 flags the rows stored before it whose documents hold a character
    XML 1.0 does not allow (written by SQL, or by an older version), for the provider to mend
    when it serves them; no row's datestamp moves."""
    name = "wiscat_m_" + uuid.uuid4().hex[:10]
    admin = await connect(template_ready)
    await admin.execute(f"create database {name}")
    await admin.close()
    url = with_database(template_ready, name)
    for migration in migrations.available():
        if migration.version < 9:
            shutil.copy(migration.path, tmp_path)
    try:
        conn = await connect(url)
        try:
            assert len(await migrations.migrate(conn, tmp_path)) == 8
            await conn.execute(
                "insert into records (identifier, datestamp, xml, deleted) values "
                "('clean', now(), '<a>x</a>', false), "
                "('control', now(), '<a>x' || chr(11) || '</a>', false), "
                "('nonchar', now(), '<a b=\"' || chr(65535) || '\"/>', false), "
                "('deleted', now(), null, true)"
            )
            before = await conn.fetch("select identifier, datestamp from records order by 1")
            assert (await migrations.migrate(conn))[0] == "0009_xml_mend.sql"
            after = await conn.fetch(
                "select identifier, datestamp, xml_mend from records order by 1"
            )
            assert [tuple(r) for r in after] == [
                (r["identifier"], r["datestamp"], r["identifier"] in ("control", "nonchar"))
                for r in before
            ]
        finally:
            await conn.close()
    finally:
        await drop_database(template_ready, url)
