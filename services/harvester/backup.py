"""Backup synchronisation between two GISCs that serve one shared set (docs/harvesting.md)."""

from __future__ import annotations

from datetime import datetime

from wiscat.harvester.context import HarvestContext, RunReport, run_log
from wiscat.harvester.page_content import PageSorter
from wiscat.harvester.plan import protected_set
from wiscat.harvester.writes import hold_run
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.model import Link, PageCounts
from wiscat.shared.oaipmh.pages import RecordItem, UnreadableItem


async def backup(ctx: HarvestContext, link: Link, report: RunReport) -> None:
    """Backup synchronisation between two GISCs that serve one shared set (docs/harvesting.md).

    Never scheduled: an operator runs it after inspection (``wiscat harvest LINK
    --backup-sync``). It reads the peer's whole set and takes a record only when there is no live
    local copy, or the local one is older by oai:datestamp and by gmd:dateStamp; what it takes
    keeps the peer's oai:datestamp, so downstream harvesters that already passed that time do
    not pick it up again (no loop). Deleted headers are not applied, and the high-water mark is
    not moved.
    """
    protected = protected_set(link, ctx.settings.own_set)
    async for page in ctx.client.list_pages(
        link.base_url,
        "ListRecords",
        metadata_prefix=link.metadata_prefix,
        set_spec=link.remote_set,
    ):
        sorter = PageSorter()
        stamps: dict[str, datetime] = {}
        for item in page.items():
            if isinstance(item, RecordItem) and not item.header.deleted:
                stamps[item.header.identifier] = item.header.datestamp_parsed
                sorter.take(item.header, item.metadata)
            elif isinstance(item, UnreadableItem):
                sorter.set_aside(item)
        report.pages += 1
        report.bytes += page.bytes
        async with ctx.pool.acquire() as conn, conn.transaction():
            await hold_run(conn, link, report, report.pages - 1)
            result = await store.backup_records(
                conn,
                link.local_set,
                sorter.batch,
                [stamps[record.identifier] for record in sorter.batch],
                protected_set=protected,
            )
            counts = result.counts
            page_counts = PageCounts(
                bytes=page.bytes,
                added=counts["taken_new"],
                updated=counts["taken"],
                unchanged=counts["same"] + counts["not_newer"],
                refused=counts["refused_protected"],
                quarantined=len(sorter.quarantined),
            )
            await link_store.record_page(conn, report.run_id, page_counts)
            await link_store.quarantine(
                conn, link.name, report.run_id, report.pages, sorter.quarantined
            )
        report.counts.update(
            {
                "added": page_counts.added,
                "updated": page_counts.updated,
                "unchanged": page_counts.unchanged,
                "refused": page_counts.refused,
                "quarantined": page_counts.quarantined,
            }
        )
        for outcome in ("taken_new", "taken"):
            for identifier in result.identifiers(outcome):
                report.taken.append(identifier)
                run_log(report).info(
                    "backup sync %s: took %s (%s)",
                    link.name,
                    identifier,
                    "missing here" if outcome == "taken_new" else "newer gmd:dateStamp",
                )
