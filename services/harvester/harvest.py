"""One harvest run of one link: docs/harvesting.md's rules, in the order a run meets them.

- An incremental run asks ``from = high-water mark - overlap``; a full run asks no ``from``; a
  window run re-reads one from/until slice of the peer's range and never moves the high-water
  mark (docs/harvesting.md).
- Every page is written in one statement, in one transaction with the run's progress; unusable
  records go to the quarantine with their raw bytes, the rest of the page is stored.
- Deleted headers are kept until the whole list has arrived (the last event of an identifier in
  the list wins: one listed live after its deletion is not deleted); the mass-deletion circuit
  breaker looks at them then, and they are applied in the same transaction that advances the
  high-water mark (invariant 3). A failure mid-list keeps the committed pages and the old
  high-water mark.

The run's pure decisions are in :mod:`wiscat.harvester.plan`, its writes in
:mod:`wiscat.harvester.writes`, the backup synchronisation in :mod:`wiscat.harvester.backup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

from wiscat.harvester.backup import backup
from wiscat.harvester.context import HarvestContext, RunReport, run_end_log, run_log
from wiscat.harvester.errors import (
    BadIdentify,
    HarvestError,
    LinkToItself,
    MalformedRecord,
    RunTakenOver,
)
from wiscat.harvester.page_content import PageSorter
from wiscat.harvester.plan import (
    choose_mode,
    high_water_mark,
    is_this_node,
    nothing_but_quarantined,
    protected_set,
    window_slice,
)
from wiscat.harvester.transport import global_addresses_only
from wiscat.harvester.writes import MassDeletion, complete, store_page
from wiscat.shared.db import links as link_store
from wiscat.shared.db.errors import DatabaseFailed
from wiscat.shared.linkspec import REGISTRY_LINK_PREFIX
from wiscat.shared.model import Link, RunMode
from wiscat.shared.oaipmh.dates import shifted
from wiscat.shared.oaipmh.errors import CannotDisseminateFormat, IdDoesNotExist, OAIError
from wiscat.shared.oaipmh.pages import NOT_WELL_FORMED, HeaderItem, IdentifyInfo
from wiscat.shared.text import clipped

log = logging.getLogger("wiscat.harvester")


async def harvest_link(
    ctx: HarvestContext,
    link: Link,
    *,
    requested: str | None = None,
    full: bool = False,
    allow_mass_delete: bool = False,
    window: bool = True,
) -> RunReport:
    """Run ``link`` once (full or incremental), then one window slice when that is due."""
    now = datetime.now(UTC)
    mode = choose_mode(link, now=now, requested=requested, full=full)
    from_ = None
    if mode == "incremental" and link.high_water_mark is not None:
        from_ = shifted(link.high_water_mark, -link.overlap)
    report = await run_list(
        ctx, link, mode=mode, from_=from_, until=None, allow_mass_delete=allow_mass_delete
    )
    if report.status == "ok" and mode == "incremental" and window:
        fresh = await link_store.get_link(ctx.pool, link.name)
        known = ctx.identified.get(link.base_url)
        if fresh is not None and known is not None:
            piece = window_slice(fresh, known[1].earliest_datestamp, now=now)
            if piece is not None:
                start, stop, next_index = piece
                await run_list(
                    ctx,
                    fresh,
                    mode="window",
                    from_=start,
                    until=stop,
                    allow_mass_delete=allow_mass_delete,
                    next_window_index=next_index,
                )
    return report


async def run_list(
    ctx: HarvestContext,
    link: Link,
    *,
    mode: RunMode,
    from_: datetime | None,
    until: datetime | None,
    allow_mass_delete: bool = False,
    next_window_index: int | None = None,
) -> RunReport:
    """Harvest one whole list of ``link`` and record the run."""
    started = time.monotonic()
    for abandoned in await link_store.close_abandoned_runs(ctx.pool, link.name):
        log.warning(
            "harvest %s: run %d was left unfinished by a stopped worker", link.name, abandoned
        )
    run_id = await link_store.start_run(ctx.pool, link.name, mode, from_, until, ctx.worker)
    report = RunReport(link.name, run_id, mode, from_=from_, until=until)
    run_log(report).info(
        "harvest %s (%s) from %s until %s: started run %d",
        link.name,
        mode,
        from_.isoformat() if from_ else "-",
        until.isoformat() if until else "-",
        run_id,
    )
    # a link the registry added harvests a URL someone else chose: global addresses only
    guarded = link.name.startswith(REGISTRY_LINK_PREFIX) and not ctx.settings.allow_private_fetch
    try:
        with global_addresses_only(guarded):
            if mode == "backup":
                await backup(ctx, link, report)
            else:
                await _harvest(ctx, link, report, allow_mass_delete, next_window_index)
        report.status = "ok"
    except MassDeletion as exc:
        report.status, report.error_kind, report.error = "stopped", "mass_delete", str(exc)
    except HarvestError as exc:
        report.status, report.error_kind, report.error = "failed", exc.kind, exc.reason
        if (
            link.strategy == "ListRecords"
            and exc.reason.startswith(NOT_WELL_FORMED)
            and not isinstance(exc, BadIdentify)
        ):
            report.error += (
                f"; if one record breaks the page, `wiscat link set {link.name} --strategy "
                "ListIdentifiers` gets the records one by one and quarantines that one"
            )
    except OAIError as exc:
        report.status, report.error_kind, report.error = (
            "failed",
            exc.code or "oaiError",
            f"peer answered {exc.code}: {exc.message}",
        )
    except asyncio.CancelledError:
        report.status, report.error_kind = "failed", "cancelled"
        report.error = "stopped before the list ended: the process was asked to stop"
        await _finish(ctx, link, report, started)
        raise
    except DatabaseFailed as exc:  # the database failed under the run (RELIABILITY D02, D03)
        report.status, report.error_kind = "failed", "DatabaseError"
        report.error = f"the database failed during the run: {exc.kind}: {exc}"
    except Exception as exc:  # a bug of ours must not take the other links down
        run_log(report).exception("harvest %s run %d: unexpected error", link.name, run_id)
        report.status, report.error_kind, report.error = (
            "failed",
            type(exc).__name__,
            str(exc),
        )
    await _finish(ctx, link, report, started)
    return report


# The longest reason stored for a failed run: a peer's error message is the peer's text, of any
# length, and the reason is stored with the run and the link and shown on the dashboard.
MAX_REASON = 1000


async def _finish(ctx: HarvestContext, link: Link, report: RunReport, started: float) -> None:
    report.seconds = time.monotonic() - started
    if report.error is not None:
        report.error = clipped(report.error, MAX_REASON)
    finished = await link_store.finish_run(
        ctx.pool,
        report.run_id,
        report.status,
        error_kind=report.error_kind,
        error=report.error,
        deleted=report.counts["deleted"],
        refused=report.counts["refused_deletions"],
    )
    if finished is None:
        # the link was removed while it ran, its runs with it: nothing to record, no error
        report.status, report.error_kind = "stopped", "LinkRemoved"
        report.error = f"link {link.name} was removed during the run"
        run_end_log(report).info("harvest %s", report.summary())
        return
    if report.status != "ok":
        ctx.identified.pop(link.base_url, None)  # the peer may have changed: ask it again
        if report.error_kind != RunTakenOver.__name__:  # the link's state is its new run's
            await link_store.fail_link(ctx.pool, link.name, report.run_id, report.error or "")
        ctx.metrics.errors.labels(link.name, report.error_kind or "unknown").inc()
        run_end_log(report).warning("harvest %s", report.summary())
    else:
        ctx.metrics.last_success.labels(link.name).set(time.time())
        run_end_log(report).info("harvest %s", report.summary())
        if nothing_but_quarantined(report.counts):
            run_log(report).warning(
                "harvest %s: every record of run %d was quarantined (%d; `wiscat link quarantine "
                "%s` says why); if none is gmd:MD_Metadata, metadataPrefix %r is not the peer's "
                "ISO 19139 format: its ListMetadataFormats names them",
                link.name,
                report.run_id,
                report.counts["quarantined"],
                link.name,
                link.metadata_prefix,
            )
    ctx.metrics.runs.labels(link.name, report.mode, report.status).inc()
    ctx.metrics.duration.labels(link.name, report.mode).observe(report.seconds)


# How long a peer's Identify is trusted between runs. An Identify rarely changes (a new
# granularity, earliestDatestamp or list guarantee comes with a new software release), and
# reading it once per run would double the requests of a quiet incremental run.
IDENTIFY_MAX_AGE_SECONDS = 3600.0


async def _identify(ctx: HarvestContext, link: Link, mode: RunMode) -> IdentifyInfo:
    """The peer's Identify: read on a full run, when this process has not read it in the last
    hour, and after a failed run of a link to that peer (``_finish`` forgets it); otherwise the
    copy an earlier run read."""
    known = ctx.identified.get(link.base_url)
    now = time.monotonic()
    if mode == "full" or known is None or now - known[0] > IDENTIFY_MAX_AGE_SECONDS:
        known = (now, await ctx.client.identify(link.base_url))
        ctx.identified[link.base_url] = known
    return known[1]


async def _harvest(  # noqa: C901
    ctx: HarvestContext,
    link: Link,
    report: RunReport,
    allow_mass_delete: bool,
    next_window_index: int | None,
) -> None:
    settings = ctx.settings
    protected = protected_set(link, settings.own_set)
    identify = await _identify(ctx, link, report.mode)
    if is_this_node(settings, link.base_url, identify):
        raise LinkToItself(
            f"{link.base_url} is this node's own provider ({settings.base_url}): a link to "
            "itself harvests nothing new; remove it"
        )
    if (
        report.mode == "incremental"
        and identify.whole_seconds
        and not identify.day_granularity
        and report.from_ is not None
        and report.from_ == link.high_water_mark
    ):
        # the peer lists a second only once all of it is visible: its records at the HWM's
        # second arrived last time, so start after it (a quiet run then transfers nothing)
        report.from_ = shifted(report.from_, timedelta(seconds=1))
        await link_store.set_run_from(ctx.pool, report.run_id, report.from_)
    first_response: datetime | None = None
    greatest: datetime | None = None
    # Deleted identifiers, applied once the whole list has arrived. Within one list the last
    # event of an identifier wins (invariant 4): one listed live on a later page than its
    # deletion is no longer to delete; one deleted after it was written is.
    deletions: dict[str, None] = {}
    by_identifiers = link.strategy == "ListIdentifiers"
    # One page's write runs in PostgreSQL while the next page is fetched and parsed here; at
    # most one write is in flight, and the pages commit in order.
    writing: asyncio.Task[None] | None = None
    told = time.monotonic()
    try:
        # Pages are parsed and hashed in worker processes (or a thread), several at once, while
        # this loop writes the one before.
        async for page, content in ctx.client.read_pages(
            link.base_url,
            "ListIdentifiers" if by_identifiers else "ListRecords",
            ctx.pages.read,
            metadata_prefix=link.metadata_prefix,
            set_spec=link.remote_set,
            from_=report.from_,
            until=report.until,
            day_granularity=identify.day_granularity,
            ahead=ctx.pages.ahead,
        ):
            sorter = content.sorter
            for record in sorter.batch:
                deletions.pop(record.identifier, None)
            for header in content.wanted:
                deletions.pop(header.identifier, None)
            deletions.update(dict.fromkeys(content.deletions))
            if content.greatest is not None and (greatest is None or content.greatest > greatest):
                greatest = content.greatest
            if content.wanted:
                await _get_records(ctx, link, content.wanted, sorter)
            if first_response is None:
                first_response = page.summary.response_date
            if writing is not None:
                await writing
            report.pages += 1
            report.bytes += page.bytes
            # a long list says how far it has got (a full harvest of a GISC takes hours)
            every = ctx.settings.progress_seconds
            if every and time.monotonic() - told >= every:
                told = time.monotonic()
                _progress(report, len(deletions), page.summary.complete_list_size)
            writing = asyncio.create_task(
                store_page(
                    ctx, link, report, sorter.batch, sorter.quarantined, protected, page.bytes
                )
            )
        if writing is not None:
            await writing
    except asyncio.CancelledError:
        if writing is not None:
            writing.cancel()
            with contextlib.suppress(BaseException):
                await writing
        raise
    except BaseException:
        # Invariant 3: a failure on page N+1 keeps page N, whose write is already under way.
        if writing is not None:
            with contextlib.suppress(Exception):
                await writing
        raise
    await complete(
        ctx,
        link,
        report,
        list(deletions),
        protected,
        allow_mass_delete,
        high_water_mark=high_water_mark(greatest, first_response, report.mode),
        next_window_index=next_window_index,
    )


def _progress(report: RunReport, deletions: int, size: int | None) -> None:
    """Log how far a long list has got: its pages, and the records of those written."""
    done = deletions + sum(
        report.counts[outcome]
        for outcome in ("added", "updated", "unchanged", "refused", "quarantined")
    )
    run_log(report).info(
        "harvest %s run %d: %d pages, %d records so far%s",
        report.link,
        report.run_id,
        report.pages,
        done,
        f" (the peer gives {size} in all)" if size else "",
    )


GET_RECORD_CONCURRENCY = 4


async def _get_records(
    ctx: HarvestContext, link: Link, headers: list[HeaderItem], sorter: PageSorter
) -> None:
    """The ListIdentifiers + GetRecord strategy (docs/links.md, ``--strategy``): fetch a page's
    records, a few at a time, and sort each as it arrives.

    A record the peer will not give (idDoesNotExist: gone since it was listed, from a
    repository that keeps no deletions; cannotDisseminateFormat: not in this format, §3.6 "not
    supported by the item") is quarantined with the peer's answer, and so is one whose answer is
    not well-formed XML (the answer kept as the record's raw bytes), as a record that cannot be
    used in a ListRecords page is: failing the run instead would fail every run after it, from
    the same high-water mark, for as long as the peer keeps listing that header.
    """
    limit = asyncio.Semaphore(GET_RECORD_CONCURRENCY)

    async def one(header: HeaderItem) -> None:
        async with limit:
            try:
                item = await ctx.client.get_record(
                    link.base_url, header.identifier, link.metadata_prefix
                )
            except (IdDoesNotExist, CannotDisseminateFormat) as exc:
                reason = clipped(f"GetRecord answered {exc.code}: {exc.message}", MAX_REASON)
                sorter.quarantined.append((header.identifier, reason, b""))
                return
            except MalformedRecord as exc:
                reason = clipped(f"GetRecord answered {exc.reason}", MAX_REASON)
                sorter.quarantined.append((header.identifier, reason, exc.body))
                return
        if item.header.deleted:
            return
        sorter.take(header, item.metadata)

    await asyncio.gather(*(one(header) for header in headers))
