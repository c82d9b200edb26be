"""What a sink's copy of a source must be: the checks the crash tests (D01, D02) share.

``assert_copy_is_the_source`` compares each row of the sink with the source's (content hash,
a live record's gmd:dateStamp, deleted flag) and each set membership, so that a record stored
twice (in two sets, or twice in one record's ``set_specs``) or left at an older version fails
it; a count of distinct identifiers cannot, as ``identifier`` is the primary key.
``assert_mark_is_covered`` checks invariant 3 against what the sink committed: every source
record a list up to the high-water mark would have listed is at the sink, at the source's
version.
"""

from __future__ import annotations

from datetime import timedelta

from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import Pool

# a tombstone keeps the gmd:dateStamp of the copy it deleted, which a sink may never have seen
_ROWS = (
    "select identifier, content_hash, case when deleted then null else md_datestamp end as md,"
    " deleted from records"
)
Rows = dict[str, tuple[object, ...]]
_MEMBERS = "select identifier, deleted from set_members where set_spec = $1"


async def versions(pool: Pool, query: str = _ROWS, *args: object) -> Rows:
    rows = await pool.fetch(query, *args)
    return {r["identifier"]: tuple(r[k] for k in list(r.keys())[1:]) for r in rows}


def _same(sink: Rows, source: Rows, what: str) -> None:
    differ = sorted(i for i in sink.keys() | source.keys() if sink.get(i) != source.get(i))
    assert not differ, f"{len(differ)} {what}s differ from the source's, e.g. " + "; ".join(
        f"{i}: sink {sink.get(i)}, source {source.get(i)}" for i in differ[:3]
    )


async def assert_copy_is_the_source(
    sink: Pool, source: Pool, *, link: str = "src", source_set: str = "WIS-GISC-TEST"
) -> None:
    """The sink holds each source record once, at the source's version, in the link's set."""
    _same(await versions(sink), await versions(source), "row")
    stored = await link_store.get_link(sink, link)
    assert stored is not None
    members = await versions(sink, _MEMBERS, stored.local_set)
    _same(members, await versions(source, _MEMBERS, source_set), "set membership")
    # a record's sets, kept beside set_members for the list pages, name each set once: a live
    # record's its live memberships, a tombstone's the sets it was deleted from
    twice = await sink.fetch(
        "select identifier, deleted, set_specs from records r where "
        "cardinality(set_specs) <> (select count(distinct s) from unnest(set_specs) s) "
        "or not deleted and (select array_agg(s order by s) from unnest(set_specs) s) "
        "is distinct from (select array_agg(m.set_spec order by m.set_spec) from set_members m "
        "where m.identifier = r.identifier and not m.deleted) "
        "or deleted and not set_specs <@ coalesce((select array_agg(m.set_spec) "
        "from set_members m where m.identifier = r.identifier), '{}')"
    )
    assert not twice, f"set_specs disagree with set_members: {[dict(r) for r in twice[:3]]}"


async def assert_mark_is_covered(sink: Pool, source: Pool, *, link: str = "src") -> None:
    """Invariant 3, checked against the sink's committed rows: every record the source lists up
    to the link's high-water mark (its whole second: a wiscat provider lists a second only once
    all of it is visible) is at the sink at the source's version, and each deletion is applied
    (or the record was never copied)."""
    stored = await link_store.get_link(sink, link)
    assert stored is not None
    mark = stored.high_water_mark
    if mark is None:
        return
    covered = await source.fetch(
        "select identifier, content_hash, deleted from records where datestamp < $1",
        mark.replace(microsecond=0) + timedelta(seconds=1),
    )
    held = {
        r["identifier"]: (r["content_hash"], r["deleted"])
        for r in await sink.fetch(
            "select identifier, content_hash, deleted from records where identifier = any($1)",
            [r["identifier"] for r in covered],
        )
    }
    missing = []
    for row in covered:
        copy = held.get(row["identifier"])
        # a deletion: deleted here too, or never copied
        right = copy is None or copy[1] if row["deleted"] else copy == (row["content_hash"], False)
        if not right:
            missing.append(row["identifier"])
    assert not missing, (
        f"the high-water mark {mark.isoformat()} is ahead of the data: {len(missing)} of the "
        f"{len(covered)} source records up to it are not at the sink as the source has them, "
        f"e.g. {missing[:3]}"
    )
