"""The WIS 2.0 renderer: records of the own set whose centre this node speaks for become WCMP2
records and outbox rows (canonical, then update, then deletion), one transaction a page, from
the same commit-safe datestamps as OAI-PMH lists; another GISC's copy is never announced, nor a
deletion of a record this node did not announce."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

import asyncpg

from tests.support import factories
from wiscat.shared.db import wis2
from wiscat.shared.generator import identifier_for
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.identifiers import wcmp2_id

OWN = "WIS-GISC-HOME"
OTHER = "WIS-GISC-AWAY"
LICENCE = ";de-dwd=licence:https://www.dwd.de/terms"
HOW = wis2.Rendering(OWN, parse_rules("de-dwd" + LICENCE), "https://node.example/oai", page_size=7)


async def outbox(db: asyncpg.Pool) -> list[tuple[str, str]]:
    rows = await db.fetch(
        "select wcmp2_id, relation from wis2_outbox order by created_at, wcmp2_id"
    )
    return [(r["wcmp2_id"], r["relation"]) for r in rows]


def wid(n: int) -> str:
    return wcmp2_id("de-dwd", identifier_for(n))


async def test_canonical_then_update_then_deletion(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OWN, range(10))
    first = await wis2.render(db, HOW)
    assert (first.pages, first.canonical, first.invalid) == (2, 10, 0)
    assert sorted(await outbox(db)) == sorted((wid(n), "canonical") for n in range(10))
    # nothing changed: nothing queued
    assert (await wis2.render(db, HOW)).records == 0
    await factories.load_records(db, OWN, [3], version=1)
    await factories.delete(db, OWN, [identifier_for(4)])
    second = await wis2.render(db, HOW)
    assert (second.update, second.deletion, second.canonical) == (1, 1, 0)
    assert (await outbox(db))[10:] == sorted([(wid(3), "update"), (wid(4), "deletion")])
    row = await db.fetchrow("select * from wis2_records where wcmp2_id = $1", wid(4))
    assert row["deleted"] and row["content"] is None
    # integrity and length name the revision row's bytes
    for r in await db.fetch(
        "select o.sha512, o.length, v.content from wis2_outbox o join wis2_revisions v "
        "using (wcmp2_id, revision)"
    ):
        content = bytes(r["content"])
        assert r["length"] == len(content)
        assert r["sha512"] == base64.b64encode(hashlib.sha512(content).digest()).decode()
    # re-created: canonical again
    await factories.load_records(db, OWN, [4], version=2)
    assert (await wis2.render(db, HOW)).canonical == 1


async def test_another_gisc_copy_is_never_announced(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OTHER, range(5), kind="remote")
    await factories.load_records(db, OWN, [7])
    await wis2.render(db, HOW)
    assert await outbox(db) == [(wid(7), "canonical")]
    await factories.delete(db, OTHER, [identifier_for(1)])
    await wis2.render(db, HOW)
    assert await outbox(db) == [(wid(7), "canonical")]


async def test_leaving_the_own_set_or_the_centre_is_a_deletion_of_its_own_only(
    db: asyncpg.Pool,
) -> None:
    await factories.load_records(db, OWN, [1, 2])
    await factories.load_records(db, OTHER, [1], kind="remote")
    await wis2.render(db, HOW)
    await factories.delete(db, OWN, [identifier_for(1)])  # still held as the other GISC's copy
    await wis2.render(db, HOW)
    assert (await outbox(db))[-1] == (wid(1), "deletion")
    # the centre rules change: record 2 is no longer de-dwd's, and a deletion follows it
    narrower = wis2.Rendering(OWN, parse_rules("de-dwd=prefix:urn:nothing" + LICENCE), None)
    await factories.load_records(db, OWN, [2], version=1)
    await factories.load_records(db, OWN, [5])
    await wis2.render(db, narrower)
    assert (await outbox(db))[-1] == (wid(2), "deletion")
    assert [w for w, _ in await outbox(db)].count(wid(5)) == 0


async def test_delete_then_recreate_in_one_page(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OWN, [1])
    await wis2.render(db, HOW)
    await factories.delete(db, OWN, [identifier_for(1)])
    await factories.load_records(db, OWN, [1], version=1)
    done = await wis2.render(db, HOW)
    assert (done.records, done.update, done.deletion) == (1, 1, 0)
    row = await db.fetchrow(
        "select deleted, revision from wis2_records where wcmp2_id = $1", wid(1)
    )
    last = await db.fetchrow("select revision from wis2_outbox order by created_at desc limit 1")
    assert not row["deleted"] and row["revision"] == last["revision"]


async def test_a_wcmp2_id_taken_over_by_another_record_of_the_page_stays_announced(
    db: asyncpg.Pool,
) -> None:
    """A page's statements run once each for the whole page, except when one record of it
    leaves a WCMP2 id that another takes (record 1's fileIdentifier renamed, record 2 given
    record 1's old one): deleting the id after the other record put it would leave it deleted."""
    await factories.load_records(db, OWN, [1, 2])
    await wis2.render(db, HOW)
    one, two, renamed = identifier_for(1), identifier_for(2), identifier_for(1) + ".renamed"
    await db.execute(
        "update records set datestamp = datestamp + interval '1 microsecond', "
        "xml = case identifier when $1 then replace(xml, $1, $3) else replace(xml, $2, $1) end "
        "where identifier = any(array[$1, $2])",
        one,
        two,
        renamed,
    )
    done = await wis2.render(db, HOW)
    # record 2 first (its identifier sorts first): it takes wid(1) over, an update of it
    assert (done.pages, done.records, done.canonical, done.update, done.deletion) == (1, 2, 1, 1, 1)
    rows = await db.fetch("select wcmp2_id, identifier, deleted from wis2_records")
    assert {r["wcmp2_id"]: (r["identifier"], r["deleted"]) for r in rows} == {
        wid(1): (two, False),
        wid(2): (two, True),
        wcmp2_id("de-dwd", renamed): (one, False),
    }


async def catalogue_fed(db: asyncpg.Pool) -> tuple[dict[str, str | None], list[str]]:
    """A Global Discovery Catalogue fed the outbox in the order :func:`wis2.pending` gives it,
    until nothing is pending: what it holds (each WCMP2 id's revision), and each message that
    says something untrue of it (canonical for an id it holds, update or deletion of one it does
    not)."""
    held: dict[str, str | None] = {}
    untrue = []
    while batch := await wis2.pending(db, 100):
        for message in batch:
            known = message.wcmp2_id in held
            if (message.relation == "canonical") == known:
                untrue.append(f"{message.relation} of {message.wcmp2_id}, held: {known}")
            if message.relation == "deletion":
                held.pop(message.wcmp2_id, None)
            else:
                held[message.wcmp2_id] = message.revision
        await wis2.mark_sent(db, [message.message_id for message in batch])
    return held, untrue


async def test_ids_swapped_in_one_page_reach_a_catalogue_as_they_are(db: asyncpg.Pool) -> None:
    """Records of one render page that take each other's WCMP2 id: a catalogue fed the messages
    in the order they are sent ends holding exactly what this node announces, and is never told a
    canonical message of an id it holds. Before, the messages of one id a page queued went out
    in an order of chance (a deletion after the canonical message deleted the record just
    given), and a record taking an id over sent a canonical message of an id the catalogue
    held. Eight swaps in one page, each in either order of the two records."""
    whole_page = dataclasses.replace(HOW, page_size=100)
    await factories.load_records(db, OWN, range(16))
    await wis2.render(db, whole_page)
    for first in range(0, 16, 2):
        left, taker = identifier_for(first), identifier_for(first + 1)
        await db.execute(
            "update records set datestamp = datestamp + interval '1 microsecond', "
            "xml = case identifier when $1 then replace(xml, $1, $1 || '.renamed') "
            "else replace(xml, $2, $1) end where identifier = any(array[$1, $2])",
            left,
            taker,
        )
    done = await wis2.render(db, whole_page)
    assert (done.pages, done.records) == (1, 16)
    assert sorted(identifier_for(n) < identifier_for(n + 1) for n in range(0, 16, 2)) == [
        *[False] * 2,
        *[True] * 6,
    ]  # both orders of a swap's two records in the page
    held, untrue = await catalogue_fed(db)
    assert untrue == []
    announced = await db.fetch("select wcmp2_id, revision from wis2_records where not deleted")
    assert held == {row["wcmp2_id"]: row["revision"] for row in announced}
    assert len(held) == 16


async def test_an_invalid_record_is_noted_never_announced(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OWN, [1])
    await db.execute(
        "update records set xml = replace(xml, 'gmd:title', 'gmd:alternateTitle') "
        "where identifier = $1",
        identifier_for(1),
    )
    done = await wis2.render(db, HOW)
    assert done.invalid == 1 and await outbox(db) == []
    [note] = await db.fetch("select identifier, reasons from wis2_invalid")
    assert note["identifier"] == identifier_for(1) and note["reasons"] != "[]"
    await factories.load_records(db, OWN, [1], version=1)
    assert (await wis2.render(db, HOW)).canonical == 1
    assert await db.fetchval("select count(*) from wis2_invalid") == 0


async def test_a_page_stops_at_the_list_bound(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OWN, [1])
    async with db.acquire() as writer:
        tx = writer.transaction()
        await tx.start()
        await writer.execute("select txid_current()")  # a write transaction in progress
        await factories.load_records(db, OWN, [2])
        assert (await wis2.render(db, HOW)).records == 1
        await tx.rollback()
    assert (await wis2.render(db, HOW)).records == 1


async def test_the_daily_reannouncement_is_bounded_and_skips_deleted(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OWN, range(6))
    await wis2.render(db, HOW)
    await factories.delete(db, OWN, [identifier_for(0)])
    await wis2.render(db, HOW)
    assert await wis2.queue_updates(db, daily=True, limit=3) == 0  # announced today
    await db.execute("update wis2_records set announced_at = now() - interval '25 hours'")
    # records with a message still unsent wait for it
    assert await wis2.queue_updates(db, daily=True, limit=3) == 0
    await db.execute("update wis2_outbox set sent_at = now()")
    assert await wis2.queue_updates(db, daily=True, limit=3) == 3
    await db.execute("update wis2_outbox set sent_at = now()")
    assert await wis2.queue_updates(db, daily=True, limit=3) == 2  # 0 is deleted
    assert await wis2.queue_updates(db, daily=True, limit=3) == 0
    rows = await db.fetch(
        "select wcmp2_id, relation, revision from wis2_outbox where created_at > "
        "(select min(created_at) from wis2_outbox where relation = 'update')"
    )
    assert {r["relation"] for r in rows} == {"update"} and wid(0) not in {
        r["wcmp2_id"] for r in rows
    }


async def test_a_record_the_mapping_fails_on_is_noted_and_passed(db: asyncpg.Pool) -> None:
    await factories.load_records(db, OWN, [1, 2])
    await db.execute("update records set xml = '<a/>' where identifier = $1", identifier_for(1))
    broken = wis2.Rendering(OWN, HOW.rules, "https://node.example/oai", page_size=1)
    done = await wis2.render(db, broken)
    assert (done.invalid, done.canonical) == (1, 1)
    [reasons] = await db.fetch("select reasons from wis2_invalid")
    assert "ISO 19139" in reasons["reasons"]


async def test_an_announced_record_that_turns_invalid_is_deleted_and_noted(
    db: asyncpg.Pool,
) -> None:
    # a Global Discovery Catalogue must not keep serving the last valid form of a record whose
    # source changed into one that cannot be made valid: a deletion follows it, and the
    # invalid list says why
    await factories.load_records(db, OWN, [1, 2])
    await wis2.render(db, HOW)
    await factories.load_records(db, OWN, [1], version=1)
    await db.execute(
        "update records set xml = replace(xml, 'gmd:title', 'gmd:alternateTitle') "
        "where identifier = $1",
        identifier_for(1),
    )
    done = await wis2.render(db, HOW)
    assert (done.invalid, done.deletion) == (1, 1)
    assert (await outbox(db))[-1] == (wid(1), "deletion")
    row = await db.fetchrow("select deleted, content from wis2_records where wcmp2_id = $1", wid(1))
    assert row["deleted"] and row["content"] is None
    [note] = await db.fetch("select identifier, reasons from wis2_invalid")
    assert note["identifier"] == identifier_for(1) and note["reasons"] != "[]"
    # still invalid at its next change: no second deletion
    await db.execute(
        "update records set datestamp = now() where identifier = $1", identifier_for(1)
    )
    again = await wis2.render(db, HOW)
    assert (again.invalid, again.deletion) == (1, 0)
    # made valid again: announced anew
    await factories.load_records(db, OWN, [1], version=2)
    assert (await wis2.render(db, HOW)).canonical == 1
    assert await db.fetchval("select count(*) from wis2_invalid") == 0


async def test_a_changed_centre_configuration_renders_every_record_again(
    db: asyncpg.Pool,
) -> None:
    # the records do not change, WISCAT_WIS2_CENTRES does: record 1 moves out of the centre
    # this node speaks for (a deletion), record 2 moves in (announced)
    await factories.load_records(db, OWN, [1, 2])
    first = wis2.Rendering(OWN, parse_rules(f"de-dwd=prefix:{identifier_for(1)}" + LICENCE), None)
    await wis2.render(db, first)
    assert await outbox(db) == [(wid(1), "canonical")]
    second = wis2.Rendering(OWN, parse_rules(f"de-dwd=prefix:{identifier_for(2)}" + LICENCE), None)
    done = await wis2.render(db, second)
    assert (done.records, done.deletion, done.canonical) == (2, 1, 1)
    assert sorted((await outbox(db))[1:]) == sorted([(wid(1), "deletion"), (wid(2), "canonical")])
    # the same configuration again: nothing read, nothing queued
    assert (await wis2.render(db, second)).records == 0
