"""The record store's write rules, on a real PostgreSQL (invariants 1, 4, 5, 6)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tests.support import factories
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.queries import load as load_queries
from wiscat.shared.model import IncomingRecord, NewLink

OWN = "WIS-GISC-TEST"
REMOTE = "WIS-GISC-OTHER"


def rec(identifier: str, content: str = "a", md: datetime | None = None) -> IncomingRecord:
    xml = f"<x id='{identifier}'>{content}</x>"
    md = md or datetime(2020, 1, 1, tzinfo=UTC)
    return IncomingRecord(identifier, md, hashlib.sha256(xml.encode()).digest(), xml)


async def setup_sets(db: asyncpg.Pool) -> None:
    await store.ensure_set(db, OWN, "own", "own")
    await store.ensure_set(db, REMOTE, "remote", "remote")


async def upsert(
    db: asyncpg.Pool, set_spec: str, *records: IncomingRecord, protected: str | None = None
):
    async with db.acquire() as conn, conn.transaction():
        return await store.upsert_records(conn, set_spec, records, protected_set=protected)


async def delete(
    db: asyncpg.Pool, set_spec: str, *ids: str, protected: str | None = None, remember=False
):
    async with db.acquire() as conn, conn.transaction():
        return await store.delete_records(
            conn, set_spec, ids, protected_set=protected, remember_unknown=remember
        )


async def test_unchanged_record_keeps_its_datestamp(db: asyncpg.Pool) -> None:
    await setup_sets(db)
    result = await upsert(db, OWN, rec("a"), rec("b"))
    assert result.outcomes == {"a": "added", "b": "added"}
    first = await store.get_record(db, "a")
    await asyncio.sleep(0.01)
    result = await upsert(db, OWN, rec("a"), rec("b", "changed"))
    assert result.outcomes == {"a": "unchanged", "b": "updated"}
    again = await store.get_record(db, "a")
    changed = await store.get_record(db, "b")
    assert first and again and changed
    assert again.datestamp == first.datestamp
    assert changed.datestamp > first.datestamp
    assert changed.xml and b"changed" in changed.xml


async def test_older_md_datestamp_is_refused(db: asyncpg.Pool) -> None:
    """D06: an older copy arriving after a newer one is refused."""
    await setup_sets(db)
    new = datetime(2024, 1, 1, tzinfo=UTC)
    await upsert(db, REMOTE, rec("a", "new", new))
    result = await upsert(db, REMOTE, rec("a", "old", new - timedelta(days=1)))
    assert result.outcomes == {"a": "refused_older"}
    stored = await store.get_record(db, "a")
    assert stored and stored.xml and b"new" in stored.xml


async def test_a_copy_without_md_datestamp_does_not_replace_a_dated_one(db: asyncpg.Pool) -> None:
    """A copy with no gmd:dateStamp cannot be shown newer than a dated one: it replaced it."""
    await setup_sets(db)
    await upsert(db, REMOTE, rec("a", "dated", datetime(2024, 1, 1, tzinfo=UTC)))
    undated = rec("a", "undated")._replace(md_datestamp=None)
    assert (await upsert(db, REMOTE, undated)).outcomes == {"a": "refused_older"}
    stored = await store.get_record(db, "a")
    assert stored and stored.xml and b"dated" in stored.xml and b"undated" not in stored.xml
    # an undated copy stored is replaced by a dated one, and by another undated one of its set
    await upsert(db, REMOTE, rec("b", "first")._replace(md_datestamp=None))
    assert (await upsert(db, REMOTE, rec("b", "again")._replace(md_datestamp=None))).outcomes == {
        "b": "updated"
    }
    assert (await upsert(db, REMOTE, rec("b", "dated"))).outcomes == {"b": "updated"}


async def test_two_sets_that_disagree_without_md_datestamp_keep_the_first_copy(
    db: asyncpg.Pool,
) -> None:
    """As with the same gmd:dateStamp, two peers' undated copies replaced each other each run."""
    await setup_sets(db)
    await store.ensure_set(db, "WIS-GISC-A", "a", "remote")
    await store.ensure_set(db, "WIS-GISC-B", "b", "remote")
    for set_spec, outcome in [("WIS-GISC-A", "added"), ("WIS-GISC-B", "refused_conflict")]:
        record = rec("x", f"from {set_spec}")._replace(md_datestamp=None)
        async with db.acquire() as conn, conn.transaction():
            written = await store.upsert_records(conn, set_spec, [record], refuse_conflicts=True)
        assert written.outcomes == {"x": outcome}
    stored = await store.get_record(db, "x")
    assert stored and stored.xml and b"from WIS-GISC-A" in stored.xml


async def test_two_sets_that_disagree_with_the_same_md_datestamp_keep_the_first_copy(
    db: asyncpg.Pool,
) -> None:
    """Two peers list one identifier, each in its own set, with the same gmd:dateStamp and other
    content. Each harvest replaced the other's copy, with a new datestamp each time: churn for
    every harvester downstream, for ever. A harvest (``refuse_conflicts``) keeps the first."""
    await setup_sets(db)
    await store.ensure_set(db, "WIS-GISC-A", "a", "remote")
    await store.ensure_set(db, "WIS-GISC-B", "b", "remote")
    day = datetime(2024, 1, 1, tzinfo=UTC)

    async def harvest(set_spec: str, record: IncomingRecord) -> dict[str, str]:
        async with db.acquire() as conn, conn.transaction():
            written = await store.upsert_records(conn, set_spec, [record], refuse_conflicts=True)
        return written.outcomes

    assert await harvest("WIS-GISC-A", rec("x", "from A", day)) == {"x": "added"}
    first = await store.get_record(db, "x")
    for _ in range(2):  # each peer's copy arrives again at its next full or window run
        assert await harvest("WIS-GISC-B", rec("x", "from B", day)) == {"x": "refused_conflict"}
        assert await harvest("WIS-GISC-A", rec("x", "from A", day)) == {"x": "unchanged"}
    kept = await store.get_record(db, "x")
    assert first and kept and kept.datestamp == first.datestamp
    assert kept.xml and b"from A" in kept.xml and kept.set_specs == ("WIS-GISC-A",)
    # the copy's own set may correct it without a new gmd:dateStamp
    assert await harvest("WIS-GISC-A", rec("x", "from A, fixed", day)) == {"x": "updated"}
    # a newer copy wins from any set, and the record is then in both
    later = day + timedelta(days=1)
    assert await harvest("WIS-GISC-B", rec("x", "from B", later)) == {"x": "updated"}
    stored = await store.get_record(db, "x")
    assert stored and stored.set_specs == ("WIS-GISC-A", "WIS-GISC-B")
    # a local write (ingest, the admin API) is not held to it
    assert (await upsert(db, OWN, rec("x", "mine", later))).outcomes == {"x": "updated"}


async def test_two_links_into_one_set_that_disagree_keep_the_first_copy(
    db: asyncpg.Pool,
) -> None:
    """Two GISCs serving one shared set, each harvested by a link of its own into that set: a
    record they hold with the same gmd:dateStamp and other content was replaced by each link's
    full or window run in turn, with a new datestamp each time. The first link's copy stays;
    that link alone may correct it without a new gmd:dateStamp."""
    shared = "shared01"
    for name in ("from-a", "from-b"):
        await link_store.add_link(db, NewLink(name, f"http://{name}/oai", shared, shared))
    day = datetime(2024, 1, 1, tzinfo=UTC)

    async def harvest(link: str, record: IncomingRecord) -> str:
        async with db.acquire() as conn, conn.transaction():
            written = await store.upsert_records(
                conn, shared, [record], refuse_conflicts=True, source=link
            )
        return written.outcomes["x"]

    assert await harvest("from-a", rec("x", "A's copy", day)) == "added"
    first = await store.get_record(db, "x")
    for _ in range(2):
        assert await harvest("from-b", rec("x", "B's copy", day)) == "refused_conflict"
        assert await harvest("from-a", rec("x", "A's copy", day)) == "unchanged"
    kept = await store.get_record(db, "x")
    assert first and kept and kept.datestamp == first.datestamp
    assert kept.xml and b"A's copy" in kept.xml
    assert await harvest("from-a", rec("x", "A's copy, fixed", day)) == "updated"
    assert await harvest("from-b", rec("x", "B's copy", day)) == "refused_conflict"
    # a newer copy wins from either link, and is then that link's to correct
    later = day + timedelta(days=1)
    assert await harvest("from-b", rec("x", "B's newer copy", later)) == "updated"
    assert await harvest("from-a", rec("x", "A's newer copy", later)) == "refused_conflict"
    # a link into another set that brings the same copy joins it; the copy stays B's
    await link_store.add_link(db, NewLink("into-c", "http://c/oai", "C", "C"))
    async with db.acquire() as conn, conn.transaction():
        joined = await store.upsert_records(
            conn, "C", [rec("x", "B's newer copy", later)], refuse_conflicts=True, source="into-c"
        )
    assert joined.outcomes == {"x": "joined"}
    assert await harvest("from-b", rec("x", "B's newer copy, fixed", later)) == "updated"
    # a removed link's copy is held by its sets alone, as a copy from before links were kept
    assert await link_store.remove_link(db, "from-b")
    assert await harvest("from-a", rec("x", "A's newer copy", later)) == "updated"
    # a local write is not held to it, and leaves a copy held by its sets
    assert (await upsert(db, shared, rec("x", "mine", later))).outcomes == {"x": "updated"}
    assert await harvest("from-a", rec("x", "A's newer copy", later)) == "updated"


async def test_a_stored_md_datestamp_far_ahead_does_not_block_a_true_one(
    db: asyncpg.Pool,
) -> None:
    """A record stored with gmd:dateStamp 2102 (before such records were refused): its copy
    with the true date, 2012, was refused as older, on every run, for ever."""
    await setup_sets(db)
    await upsert(db, REMOTE, rec("typo", "2102", datetime(2102, 3, 4, tzinfo=UTC)))
    result = await upsert(db, REMOTE, rec("typo", "2012", datetime(2012, 3, 4, tzinfo=UTC)))
    assert result.outcomes == {"typo": "updated"}
    stored = await store.get_record(db, "typo")
    assert stored and stored.xml and b"2012" in stored.xml
    # and from then on the true date guards it as usual
    result = await upsert(db, REMOTE, rec("typo", "2011", datetime(2011, 3, 4, tzinfo=UTC)))
    assert result.outcomes == {"typo": "refused_older"}


async def test_protected_own_set_is_not_changed_by_a_gisc_link(db: asyncpg.Pool) -> None:
    await setup_sets(db)
    await upsert(db, OWN, rec("mine"))
    result = await upsert(db, REMOTE, rec("mine", "other"), rec("theirs"), protected=OWN)
    assert result.outcomes == {"mine": "refused_protected", "theirs": "added"}
    gone = await delete(db, REMOTE, "mine", protected=OWN)
    assert gone.outcomes == {"mine": "refused_protected"}
    stored = await store.get_record(db, "mine")
    assert stored and not stored.deleted and stored.set_specs == (OWN,)
    # once the own set deleted it, a relayed deletion has nothing to do: not "refused" (with a
    # warning that it belongs to the own set), as it was at every run of such a link
    await delete(db, OWN, "mine")
    gone = await delete(db, REMOTE, "mine", protected=OWN)
    assert gone.outcomes == {"mine": "unchanged"}
    stored = await store.get_record(db, "mine")
    assert stored and stored.deleted


async def test_deletion_leaves_a_tombstone_in_the_set_and_catalogue(db: asyncpg.Pool) -> None:
    await setup_sets(db)
    await upsert(db, OWN, rec("a"), rec("b"))
    await upsert(db, REMOTE, rec("b"))  # b is in both sets now
    result = await delete(db, OWN, "a", "b", "zzz")
    assert result.outcomes == {"a": "deleted", "b": "left_set", "zzz": "not_found"}
    a = await store.get_record(db, "a")
    b = await store.get_record(db, "b")
    # a tombstone keeps the sets it was deleted from, and the deleted copy's gmd:dateStamp
    assert a and a.deleted and a.xml is None and a.set_specs == (OWN,)
    assert await db.fetchval("select md_datestamp from records where identifier = 'a'")
    assert b and not b.deleted and b.set_specs == (REMOTE,)
    bound = datetime.now(UTC) + timedelta(seconds=1)
    own = await store.list_page(
        db, store.ListScope(OWN, None, None, bound), after=None, limit=10, with_xml=True
    )
    assert [(r.identifier, r.deleted, r.xml is None) for r in own] == [
        ("a", True, True),
        ("b", True, True),
    ]
    again = await delete(db, OWN, "a")
    assert again.outcomes == {"a": "unchanged"}


async def test_unknown_deletion_is_remembered_for_relays(db: asyncpg.Pool) -> None:
    await setup_sets(db)
    result = await delete(db, REMOTE, "never-seen", remember=True)
    assert result.outcomes == {"never-seen": "remembered"}
    stored = await store.get_record(db, "never-seen")
    assert stored and stored.deleted


async def test_keyset_pages_cover_every_record_once(db: asyncpg.Pool) -> None:
    await setup_sets(db)
    for start in range(0, 50, 10):
        await upsert(db, OWN, *(rec(f"r{n:03d}") for n in range(start, start + 10)))
    bound = datetime.now(UTC) + timedelta(seconds=1)
    everything = store.ListScope(None, None, None, bound)
    seen: list[str] = []
    after = None
    while True:
        page = await store.list_page(db, everything, after=after, limit=7, with_xml=False)
        if not page:
            break
        seen += [r.identifier for r in page]
        after = (page[-1].datestamp, page[-1].identifier)
    assert sorted(seen) == [f"r{n:03d}" for n in range(50)]
    assert len(seen) == len(set(seen))
    assert await store.count_list(db, store.ListScope(OWN, None, None, bound)) == 50


async def test_a_page_read_by_its_keys_first_is_the_same_page(db: asyncpg.Pool) -> None:
    await setup_sets(db)
    for start in range(0, 50, 10):
        await upsert(db, OWN, *(rec(f"r{n:03d}") for n in range(start, start + 10)))
        await upsert(db, REMOTE, rec(f"s{start:03d}"))  # in the catalogue, not in OWN
    bound = datetime.now(UTC) + timedelta(seconds=1)
    for scope in (
        store.ListScope(None, None, None, bound),
        store.ListScope(OWN, None, None, bound),
    ):
        after = None
        while True:
            whole = await store.list_page(db, scope, after=after, limit=7, with_xml=True)
            keys = await store.list_keys(db, scope, after=after, limit=7)
            assert keys == [(r.datestamp, r.identifier) for r in whole]
            if not keys:
                break
            through = await store.list_page(
                db, scope, after=after, limit=100, with_xml=True, through=keys[-1]
            )
            assert through == whole
            after = keys[-1]


async def test_purge_drops_only_old_tombstones(db: asyncpg.Pool) -> None:
    """D08: only tombstones past the retention are purged."""
    await setup_sets(db)
    await upsert(db, OWN, rec("a"), rec("b"))
    await delete(db, OWN, "a")
    assert await store.purge_tombstones(db, timedelta(days=1)) == 0
    # every row past the retention, the live record's too: only the tombstone may go
    await factories.backdate(db, "update records set datestamp = datestamp - interval '2 days'")
    await factories.backdate(db, "update set_members set datestamp = datestamp - interval '2 days'")
    assert await store.purge_tombstones(db, timedelta(days=1)) == 1
    assert await store.get_record(db, "a") is None
    assert await store.get_record(db, "b") is not None


async def test_concurrent_writers_of_the_same_records_never_deadlock(db: asyncpg.Pool) -> None:
    # Two links bringing the same records at once (the catalogue comes from every GISC), in
    # opposite orders: each statement must lock rows in one order, or PostgreSQL finds a
    # deadlock and fails one of the runs. (Before: a deadlock in each of 8 rounds out of 8.)
    await setup_sets(db)
    for round_ in range(3):
        ids = [f"urn:x-wmo:md:test::r{round_}.{n:04d}" for n in range(600)]
        batch = [rec(i, f"v{round_}") for i in ids]
        results = await asyncio.gather(
            upsert(db, OWN, *batch), upsert(db, OWN, *batch[::-1]), return_exceptions=True
        )
        assert not [r for r in results if isinstance(r, BaseException)], results
        # and the same for deletions that leave tombstones of records never seen here
        gone = [f"urn:x-wmo:md:test::gone{round_}.{n:04d}" for n in range(600)]
        results = await asyncio.gather(
            delete(db, OWN, *gone, remember=True),
            delete(db, OWN, *gone[::-1], remember=True),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)], results
    assert await db.fetchval("select count(*) from records where not deleted") == 1800
    assert await db.fetchval("select count(*) from records where deleted") == 1800


@pytest.mark.parametrize("statement", ["upsert_records", "backup_records"])
async def test_a_page_is_sorted_for_its_locks_without_its_documents(
    db: asyncpg.Pool, statement: str
) -> None:
    """A writer sorts a page's rows by identifier (the lock order above) without their
    documents, which it takes after the sort: a page's documents are more than work_mem (500
    records of 9 KB are 4.7 MB), and sorted with them the rows spilled to a temporary file at
    every page, about a tenth of PostgreSQL's CPU a harvested record (docs/benchmarks.md)."""
    await setup_sets(db)
    records = [rec(f"urn:x-wmo:md:test::big.{n:04d}", "x" * 20_000) for n in range(300)]
    columns = zip(
        *((r.identifier, r.md_datestamp, r.content_hash, r.xml, r.xml_ids) for r in records),
        strict=True,
    )
    identifiers, stamps, hashes, documents, ids = map(list, columns)
    # the parameters as the writer gives them: a local write into OWN, or a synchronisation
    # keeping the source's datestamps
    arguments = {
        "upsert_records": (OWN, identifiers, stamps, hashes, documents, None, False, None, False),
        "backup_records": (OWN, identifiers, stamps, hashes, documents, stamps, None),
    }[statement]
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("set local work_mem = '4MB'")  # 6 MB of documents: more than that
        await conn.execute("select set_config('wiscat.xml_checked', 'on', true)")
        plan = await conn.fetchval(
            "explain (analyze, format json) " + load_queries("records.sql")[statement],
            *arguments,
            ids,
        )
        sorts = list(_sorts(json.loads(plan)[0]["Plan"]))
        written = await conn.fetchval("select count(*) from records")
    assert written == len(records)  # the plan ran: every record was written
    assert sorts, "the statement sorts no rows: the lock order is gone"
    assert [s for s in sorts if s["Sort Space Type"] == "Disk"] == []


def _sorts(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every Sort node of an EXPLAIN (format json) plan that ran."""
    if node["Node Type"] == "Sort" and "Sort Space Type" in node:
        yield node
    for child in node.get("Plans", []):
        yield from _sorts(child)


async def test_a_link_moves_to_another_local_set_only_without_records(db: asyncpg.Pool) -> None:
    """A GISC link given another remote set (a set name mistyped) files its records under the
    new set's name; not while it has records under the old one, which no link would then keep
    up to date."""
    link = await link_store.add_link(
        db, NewLink("gisc", "http://g/oai", "WIS-GISC-G", "WIS-GISC-G")
    )
    moved = dataclasses.replace(
        NewLink("gisc", "http://g/oai", "WIS-GISC-H", "WIS-GISC-H"), every=link.every
    )
    async with db.acquire() as conn, conn.transaction():
        await store.upsert_records(conn, "WIS-GISC-G", [rec("x")], source="gisc")
    async with db.acquire() as conn:
        with pytest.raises(link_store.LinkHasRecords, match="has 1 there"):
            await link_store.update_link(conn, link, moved)
    assert (await link_store.get_link(db, "gisc")).local_set == "WIS-GISC-G"  # type: ignore[union-attr]
    # the same link without records there (another link's record does not count)
    await db.execute("update records set source = 'other'")
    async with db.acquire() as conn:
        after, changed = await link_store.update_link(conn, link, moved)
    assert (after.remote_set, after.local_set, changed) == ("WIS-GISC-H", "WIS-GISC-H", ["source"])
    assert await db.fetchval("select kind from sets where spec = 'WIS-GISC-H'") == "remote"


_PAUSES = """
create function pause_slow_writer() returns trigger language plpgsql as $$
begin
    -- the slow writer waits before its first write (for 1), and again once it holds a row it
    -- found written by another (an update after a conflict: for 2)
    if current_setting('application_name') = 'slow-writer' then
        perform pg_advisory_lock_shared(case when tg_op = 'INSERT' then 1 else 2 end);
        perform pg_advisory_unlock_shared(case when tg_op = 'INSERT' then 1 else 2 end);
    end if;
    return new;
end $$;
create trigger pause_slow_writer before insert or update on records
    for each row execute function pause_slow_writer();
create trigger pause_slow_writer before insert or update on set_members
    for each row execute function pause_slow_writer();
"""


async def test_a_record_written_by_another_during_an_upsert_does_not_deadlock_a_deletion(
    db: asyncpg.Pool, database_url: str
) -> None:
    """A writer's statement that began before a record was written elsewhere (so it sees none)
    and a deletion of that record run at once: each must lock the record's row before its
    membership's, as the other does, or PostgreSQL finds a deadlock and fails one of them."""
    await setup_sets(db)
    await db.execute(_PAUSES)
    late = rec("urn:x-wmo:md:test::late")
    holder = await db.acquire()
    await holder.execute("select pg_advisory_lock(1), pg_advisory_lock(2)")
    slow = await asyncpg.connect(database_url, server_settings={"application_name": "slow-writer"})
    try:
        # the slow writer's statement takes its snapshot, then waits before its first write
        writing = asyncio.create_task(store.upsert_records(slow, OWN, [late]))
        waiting = "select count(*) from pg_locks where locktype = 'advisory' and not granted"
        await _until(db, waiting)
        # meanwhile the record is written and committed elsewhere
        await upsert(db, OWN, late)
        # the slow writer finds the record's rows written: it holds the first, and waits again
        await holder.execute("select pg_advisory_unlock(1)")
        await _until(
            db,
            "select count(*) from pg_locks where locktype = 'advisory' and objid = 2 "
            "and not granted",
        )
        # a deletion of the record starts, and the slow writer goes on
        deleting = asyncio.create_task(delete(db, OWN, late.identifier))
        await asyncio.sleep(0.3)
        await holder.execute("select pg_advisory_unlock(2)")
        results = await asyncio.gather(writing, deleting, return_exceptions=True)
    finally:
        await slow.close()
        await db.release(holder)
    assert not [r for r in results if isinstance(r, BaseException)], results


async def _until(db: asyncpg.Pool, count_query: str) -> None:
    for _ in range(200):
        if await db.fetchval(count_query):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never true: {count_query}")


async def test_rows_written_without_the_stamp_by_other_sql_are_stamped(db: asyncpg.Pool) -> None:
    """P17, D10: the stamping trigger is spared only rows that carry the transaction's stamp
    already (migration 0017). A row another writer leaves without a datestamp, in a transaction
    that has no stamp yet, or with a datestamp of its own, is stamped all the same."""
    await setup_sets(db)
    async with db.acquire() as conn, conn.transaction():
        # no stamp in this transaction yet, and no datestamp given: the trigger fills it
        await conn.execute(
            "insert into records (identifier, xml, deleted, set_specs) values ('a', '<x/>', false,"
            " '{S1}')"
        )
        # a stamp now exists; a datestamp of the writer's own is replaced by it
        await conn.execute(
            "insert into records (identifier, datestamp, xml, deleted, set_specs)"
            " values ('b', '2001-01-01Z', '<x/>', false, '{S1}')"
        )
    rows = await db.fetch("select identifier, datestamp from records order by identifier")
    assert [r["identifier"] for r in rows] == ["a", "b"]
    assert rows[0]["datestamp"] is not None and rows[0]["datestamp"] == rows[1]["datestamp"]
    assert rows[0]["datestamp"] > datetime.now(UTC) - timedelta(minutes=5)
