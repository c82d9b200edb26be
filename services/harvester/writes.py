"""A run's writes: each page in one transaction with the run's progress, and the list's
completion (its deletions, behind the mass-deletion breaker, with the high-water mark) in one
more (invariant 3: the mark moves only with a whole list). Each write first checks that the
run still holds its link."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from wiscat.harvester.context import HarvestContext, RunReport, run_log
from wiscat.harvester.errors import LinkRemoved, PagesLost, RunTakenOver
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db import refusals as refusal_store
from wiscat.shared.db.pool import Connection, Pool, limit_statements
from wiscat.shared.model import IncomingRecord, Link, PageCounts
from wiscat.shared.refusals import OUTCOMES, Reason

#: The outcomes of a write that leave the link's copy stored (a refusal of it is then over).
STORED = ("added", "updated", "joined", "unchanged")

DELETE_BATCH = 5000


class MassDeletion(Exception):
    """A run would delete more of a link's records than the circuit breaker allows."""


class _RolledBack(Exception):
    """Ends :func:`would_refuse`'s transaction: nothing it wrote is kept."""


async def write_harvested(
    conn: Connection, link: Link, batch: list[IncomingRecord], protected: str | None
) -> store.WriteResult:
    """Write a page of ``link``'s records by the harvester's rules: the one decision of what is
    stored and what refused, for a run's pages and for ``wiscat link test``'s prediction."""
    return await store.upsert_records(
        conn,
        link.local_set,
        batch,
        protected_set=protected,
        refuse_conflicts=True,
        source=link.name,
        deletions_hold=True,
    )


def refusals(result: store.WriteResult) -> list[tuple[str, Reason]]:
    """A write's refused identifiers, each with its reason code (wiscat.shared.refusals)."""
    return sorted(
        (identifier, OUTCOMES[outcome])
        for identifier, outcome in result.outcomes.items()
        if outcome in OUTCOMES
    )


async def would_refuse(
    pool: Pool, link: Link, record: IncomingRecord, protected: str | None
) -> Reason | None:
    """Why a run of ``link`` would refuse ``record`` now (None: it would store it): the run's
    own write, in a transaction rolled back."""
    found: list[tuple[str, Reason]] = []
    try:
        async with pool.acquire() as conn, conn.transaction():
            found = refusals(await write_harvested(conn, link, [record], protected))
            raise _RolledBack
    except _RolledBack:
        pass
    return found[0][1] if found else None


async def store_page(
    ctx: HarvestContext,
    link: Link,
    report: RunReport,
    batch: list[IncomingRecord],
    quarantined: list[tuple[str | None, str, bytes]],
    protected: str | None,
    size: int,
) -> None:
    written = report.pages - 1  # this page is counted as its write begins
    async with ctx.pool.acquire() as conn, conn.transaction():
        # A write held up (on a lock held elsewhere) fails the run rather than holding back
        # every list, which stops before the oldest write in progress (invariant 2).
        await limit_statements(conn, ctx.settings.write_timeout_seconds)
        await hold_run(conn, link, report, written)
        result = await write_harvested(conn, link, batch, protected)
        counts = result.counts
        refused_here = refusals(result)
        refused = len(refused_here)
        await link_store.record_page(
            conn,
            report.run_id,
            PageCounts(
                bytes=size,
                added=counts["added"],
                updated=counts["updated"] + counts["joined"],
                unchanged=counts["unchanged"],
                refused=refused,
                quarantined=len(quarantined),
            ),
        )
        await refusal_store.record_refusals(
            conn,
            link.name,
            report.run_id,
            refused_here,
            [i for i, outcome in result.outcomes.items() if outcome in STORED],
        )
        await link_store.quarantine(conn, link.name, report.run_id, report.pages, quarantined)
    ctx.metrics.bytes.labels(link.name).inc(size)
    for code, number in Counter(code for _, code in refused_here).items():
        report.refusals[code] += number
        ctx.metrics.refused.labels(link.name, code).inc(number)
    page_counts = {
        "added": counts["added"],
        "updated": counts["updated"] + counts["joined"],
        "unchanged": counts["unchanged"],
        "refused": refused,
        "quarantined": len(quarantined),
    }
    report.counts.update(page_counts)
    for name, value in page_counts.items():
        if value:
            ctx.metrics.records.labels(link.name, name).inc(value)
    for identifier in result.identifiers("refused_protected"):
        run_log(report).warning(
            "harvest %s: refused %s: it belongs to the own set %s and a link into %s "
            "may not change it",
            link.name,
            identifier,
            protected,
            link.local_set,
        )
    older = result.identifiers("refused_older")
    undated = {r.identifier for r in batch if r.md_datestamp is None} if older else set()
    for identifier in older:
        run_log(report).info(
            "harvest %s: refused %s: %s",
            link.name,
            identifier,
            "no gmd:dateStamp, and the stored copy has one"
            if identifier in undated
            else "gmd:dateStamp older than the stored copy's",
        )
    for identifier in result.identifiers("refused_deleted"):
        run_log(report).info(
            "harvest %s: refused %s: deleted here, and this copy's gmd:dateStamp is not newer "
            "than the deleted copy's (a deletion is newer than the copy it deleted)",
            link.name,
            identifier,
        )
    for identifier in result.identifiers("refused_conflict"):
        run_log(report).warning(
            "harvest %s: refused %s: the copy stored from another link or set has the same "
            "gmd:dateStamp and other content; it is kept (the peers disagree on this record)",
            link.name,
            identifier,
        )
    for held, reason, _ in quarantined:
        run_log(report).warning("harvest %s: quarantined %s: %s", link.name, held, reason)


async def hold_run(conn: Connection, link: Link, report: RunReport, written: int) -> None:
    """Start a write of the run: stop it, the transaction unwritten, if it no longer runs or if
    the database no longer holds the ``written`` pages it wrote before."""
    held = await link_store.hold_run(conn, report.run_id)
    if held is None:
        raise LinkRemoved(f"link {link.name} was removed during the run")
    status, stored = held
    if status != "running":
        raise RunTakenOver(
            f"another worker took link {link.name} over during this run, whose lease had run "
            "out unrenewed (the process held up, or cut off from the database, for longer than "
            "WISCAT_HARVEST_LEASE_SECONDS); this run stopped, its pages written before are "
            "kept, and the high-water mark is the other run's to move"
        )
    if stored < written:
        # The database lost commits of this run: a standby promoted before it had received
        # them (asynchronous replication), or a restore. Pages written after them would leave
        # a hole in the link's set that the high-water mark then passes.
        raise PagesLost(
            f"the database holds {stored} of the {written} pages this run wrote: it lost "
            "the others (a failover to a standby that had not received them, or a restore); "
            "this run stopped, and the next lists again from the high-water mark"
        )


async def complete(
    ctx: HarvestContext,
    link: Link,
    report: RunReport,
    deletions: list[str],
    protected: str | None,
    allow_mass_delete: bool,
    *,
    high_water_mark: datetime | None,
    next_window_index: int | None,
) -> None:
    settings = ctx.settings
    if deletions and not allow_mass_delete:
        doomed = await link_store.live_in_set(ctx.pool, link.local_set, deletions)
        held = await link_store.live_count(ctx.pool, link.local_set)
        limit = max(settings.mass_delete_share * held, settings.mass_delete_min)
        if doomed > limit:
            raise MassDeletion(
                f"the peer deleted {doomed} of the {held} live records of {link.local_set} "
                f"(more than {settings.mass_delete_share:.0%}); nothing was deleted and the "
                f"high-water mark was kept: check the peer, then run "
                f"`wiscat harvest {link.name} --allow-mass-delete`"
            )
    counts: Counter[str] = Counter()
    async with ctx.pool.acquire() as conn, conn.transaction():
        await link_store.hold_link(conn, link.name)  # updated last; locked first (see there)
        await hold_run(conn, link, report, report.pages)
        for start in range(0, len(deletions), DELETE_BATCH):
            await limit_statements(conn, ctx.settings.write_timeout_seconds)
            result = await store.delete_records(
                conn,
                link.local_set,
                deletions[start : start + DELETE_BATCH],
                protected_set=protected,
                remember_unknown=True,
            )
            counts.update(result.counts)
            for identifier in result.identifiers("refused_protected"):
                run_log(report).warning(
                    "harvest %s: refused the deletion of %s: it belongs to the own set",
                    link.name,
                    identifier,
                )
        advanced = await link_store.complete_list(
            conn,
            link,
            high_water_mark=high_water_mark,
            full=report.mode == "full",
            window_index=next_window_index if next_window_index is not None else link.window_index,
            run_id=report.run_id,
        )
        if not advanced:
            high_water_mark = None
            run_log(report).warning(
                "harvest %s: the link was pointed elsewhere or removed during run %d: its "
                "high-water mark is left as it is (reset by a new source: a full harvest next)",
                link.name,
                report.run_id,
            )
    report.counts["deleted"] += counts["deleted"] + counts["left_set"] + counts["remembered"]
    report.counts["refused_deletions"] += counts["refused_protected"]
    if counts["deleted"] + counts["left_set"]:
        ctx.metrics.records.labels(link.name, "deleted").inc(counts["deleted"] + counts["left_set"])
    report.high_water_mark = high_water_mark
