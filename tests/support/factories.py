"""Test data: generated WMO Core records loaded straight into a node's database."""

from __future__ import annotations

from collections.abc import Iterable

from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record
from wiscat.shared.ingest import ensure_own_set, incoming
from wiscat.shared.iso19139 import parse_record


async def load_records(
    pool: Pool,
    set_spec: str,
    numbers: Iterable[int],
    *,
    version: int = 0,
    centre: str = "xx",
    kind: str = "own",
    gml_id: str | None = None,
) -> list[str]:
    """Generate records ``numbers`` (at ``version``, with ``gml_id``, see
    :func:`generate_record`) into ``set_spec``; return their identifiers."""
    if kind == "own":
        await ensure_own_set(pool, set_spec)
    else:
        await store.ensure_set(pool, set_spec, set_spec, kind)
    identifiers = []
    batch = []
    for n in numbers:
        record = parse_record(generate_record(n, centre=centre, version=version, gml_id=gml_id))
        identifiers.append(record.identifier)
        batch.append(incoming(record))
        if len(batch) == 500:
            async with pool.acquire() as conn, conn.transaction():
                await store.upsert_records(conn, set_spec, batch)
            batch = []
    if batch:
        async with pool.acquire() as conn, conn.transaction():
            await store.upsert_records(conn, set_spec, batch)
    return identifiers


async def delete(pool: Pool, set_spec: str, identifiers: list[str]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await store.delete_records(conn, set_spec, identifiers)


async def catalogue(pool: Pool, set_spec: str | None = None) -> dict[str, tuple[str, bool]]:
    """identifier -> (datestamp as OAI writes it, deleted) for the whole catalogue or one set."""
    if set_spec is None:
        rows = await pool.fetch("select identifier, datestamp, deleted from records")
    else:
        rows = await pool.fetch(
            "select identifier, datestamp, deleted from set_members where set_spec = $1", set_spec
        )
    return {
        r["identifier"]: (r["datestamp"].strftime("%Y-%m-%dT%H:%M:%SZ"), r["deleted"]) for r in rows
    }


async def backdate(pool: Pool, statement: str, *args: object) -> None:
    """Run ``statement``, which sets datestamps as a test needs them (days ago, say): a write
    is otherwise stamped with the time it is made (migration 0008's triggers)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("select set_config('wiscat.keep_datestamps', 'on', true)")
        await conn.execute(statement, *args)
