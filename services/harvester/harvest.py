"""One harvest run of one link: the rules of DESIGN §2 and §4 in one place.

- An incremental run asks ``from = high-water mark - overlap``; a full run asks no ``from``; a
  window run re-reads one from/until slice of the peer's range (seed 000 §4) and never moves the
  high-water mark.
- Every page is written in one statement, in one transaction with the run's progress; unusable
  records go to the quarantine with their raw bytes, the rest of the page is stored.
- Deleted headers are kept until the whole list has arrived (the last event of an identifier in
  the list wins: one listed live after its deletion is not deleted); the mass-deletion circuit
  breaker looks at them then, and they are applied in the same transaction that advances the
  high-water mark (invariant 3). A failure mid-list keeps the committed pages and the old
  high-water mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from services.harvester.client import OAIClient, global_addresses_only
from services.harvester.errors import (
    BadIdentify,
    HarvestError,
    LinkRemoved,
    LinkToItself,
    MalformedRecord,
    RunTakenOver,
)
from services.harvester.metrics import HarvesterMetrics
from services.harvester.page_records import PageReaders, PageSorter
from shared.db import links as link_store
from shared.db import records as store
from shared.db.errors import FAILED
from shared.db.links import Link, PageCounts, RunMode, RunStatus
from shared.db.pool import Connection, Pool
from shared.linkspec import REGISTRY_LINK_PREFIX
from shared.oaipmh.dates import shifted
from shared.oaipmh.errors import CannotDisseminateFormat, IdDoesNotExist, OAIError
from shared.oaipmh.pages import (
    NOT_WELL_FORMED,
    HeaderItem,
    IdentifyInfo,
    RecordItem,
    UnreadableItem,
)
from shared.settings import Settings
from shared.text import clipped

log = logging.getLogger("wiscat.harvester")

DELETE_BATCH = 5000
# A long list says how far it has got this often (a full harvest of a GISC takes hours).
PROGRESS_SECONDS = 60.0


@dataclass
class HarvestContext:
    """What every run needs, built once per process."""

    settings: Settings
    pool: Pool
    client: OAIClient
    metrics: HarvesterMetrics = field(default_factory=HarvesterMetrics)
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    # each peer's Identify (by base URL) and when it was read: see _identify
    identified: dict[str, tuple[float, IdentifyInfo]] = field(default_factory=dict)
    # where pages are parsed and hashed (worker processes, or a thread)
    pages: PageReaders = field(default_factory=lambda: PageReaders(0))


@dataclass
class RunReport:
    """What one run did (also stored in ``harvest_runs``)."""

    link: str
    run_id: int
    mode: RunMode
    status: RunStatus = "running"
    from_: datetime | None = None
    until: datetime | None = None
    counts: Counter[str] = field(default_factory=Counter)
    pages: int = 0
    bytes: int = 0
    error_kind: str | None = None
    error: str | None = None
    high_water_mark: datetime | None = None
    seconds: float = 0.0
    taken: list[str] = field(default_factory=list)  # backup synchronisation: what it took

    def summary(self) -> str:
        parts = ", ".join(f"{k} {self.counts[k]}" for k in sorted(self.counts))
        text = f"{self.link} {self.mode} run {self.run_id}: {self.status}; pages {self.pages}"
        if parts:
            text += f"; {parts}"
        if self.error:
            text += f"; {self.error_kind}: {self.error}"
        return text


class MassDeletion(Exception):
    """A run would delete more of a link's records than the circuit breaker allows."""


def _run_log(report: RunReport) -> logging.LoggerAdapter[logging.Logger]:
    # link and run as fields of their own in JSON logs (WISCAT_LOG_FORMAT=json)
    return logging.LoggerAdapter(log, {"link": report.link, "run": report.run_id})


def choose_mode(link: Link, *, now: datetime, requested: str | None, full: bool) -> RunMode:
    """Full when asked, when the link has no high-water mark yet, or when its full re-harvest
    is due; incremental otherwise."""
    if full or requested == "full" or link.high_water_mark is None or link.last_full_at is None:
        return "full"
    if now - link.last_full_at >= link.full_every:
        return "full"
    return "incremental"


def window_slice(
    link: Link, earliest: datetime, *, now: datetime
) -> tuple[datetime, datetime, int] | None:
    """The from/until slice the rolling windowed re-harvest reads this time, and the next index.

    The peer's range, from its earliestDatestamp to our high-water mark, is cut into
    ``window_slices`` equal slices; one run reads one slice, cycling (seed 000 §4: "a re-harvester
    works for the first year of the archive on Monday, the second on Tuesday").
    """
    if link.window_slices <= 0 or link.high_water_mark is None:
        return None
    end = min(link.high_water_mark, now)
    if end < earliest:
        return None
    span = (end - earliest) / link.window_slices
    index = link.window_index % link.window_slices
    start = earliest + span * index
    stop = end if index == link.window_slices - 1 else start + span
    return start, stop, (index + 1) % link.window_slices


def _protected_set(link: Link, own_set: str) -> str | None:
    # Invariant 6: only writes into the own set (local ingest, area and recovery links) may change
    # a record of the own set; every other link is refused such records.
    return None if link.local_set == own_set else own_set


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
    _run_log(report).info(
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
                await _backup(ctx, link, report)
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
    except FAILED as exc:  # the database failed under the run (RELIABILITY D02, D03)
        report.status, report.error_kind = "failed", "DatabaseError"
        report.error = f"the database failed during the run: {type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug of ours must not take the other links down
        _run_log(report).exception("harvest %s run %d: unexpected error", link.name, run_id)
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
        _run_log(report).info("harvest %s", report.summary())
        return
    if report.status != "ok":
        ctx.identified.pop(link.base_url, None)  # the peer may have changed: ask it again
        if report.error_kind != RunTakenOver.__name__:  # the link's state is its new run's
            await link_store.fail_link(ctx.pool, link.name, report.run_id, report.error or "")
        ctx.metrics.errors.labels(link.name, report.error_kind or "unknown").inc()
        _run_log(report).warning("harvest %s", report.summary())
    else:
        ctx.metrics.last_success.labels(link.name).set(time.time())
        _run_log(report).info("harvest %s", report.summary())
        if _nothing_but_quarantined(report.counts):
            _run_log(report).warning(
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


def _nothing_but_quarantined(counts: Counter[str]) -> bool:
    kept = ("added", "updated", "unchanged", "refused")
    return counts["quarantined"] > 0 and not any(counts[name] for name in kept)


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


def is_this_node(settings: Settings, url: str, identify: IdentifyInfo) -> bool:
    """Whether the peer at ``url`` is this node. Its Identify's baseURL is compared only with
    a BASE_URL set for this node: a derived one (``http://127.0.0.1:8080/oai``) is also what
    any node left unconfigured announces, wherever it runs."""
    if url == settings.base_url:
        return True
    return settings.base_url_set and identify.base_url == settings.base_url


async def _harvest(
    ctx: HarvestContext,
    link: Link,
    report: RunReport,
    allow_mass_delete: bool,
    next_window_index: int | None,
) -> None:
    settings = ctx.settings
    protected = _protected_set(link, settings.own_set)
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
    # event of an identifier wins (DESIGN invariant 4): one listed live on a later page than its
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
            if time.monotonic() - told >= PROGRESS_SECONDS:
                told = time.monotonic()
                _progress(report, len(deletions), page.summary.complete_list_size)
            writing = asyncio.create_task(
                _store_page(
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
    await _complete(
        ctx,
        link,
        report,
        list(deletions),
        protected,
        allow_mass_delete,
        high_water_mark=_high_water_mark(greatest, first_response, report.mode),
        next_window_index=next_window_index,
    )


def _progress(report: RunReport, deletions: int, size: int | None) -> None:
    """Log how far a long list has got: its pages, and the records of those written."""
    done = deletions + sum(
        report.counts[outcome]
        for outcome in ("added", "updated", "unchanged", "refused", "quarantined")
    )
    _run_log(report).info(
        "harvest %s run %d: %d pages, %d records so far%s",
        report.link,
        report.run_id,
        report.pages,
        done,
        f" (the peer gives {size} in all)" if size else "",
    )


async def _backup(ctx: HarvestContext, link: Link, report: RunReport) -> None:
    """Backup synchronisation between two GISCs that serve one shared set (seed 000 §5).

    Never scheduled: an operator runs it after inspection (``wiscat harvest LINK
    --backup-sync``). It reads the peer's whole set and takes a record only when there is no live
    local copy, or the local one is older by oai:datestamp and by gmd:dateStamp; what it takes
    keeps the peer's oai:datestamp, so downstream harvesters that already passed that time do
    not pick it up again (no loop). Deleted headers are not applied, and the high-water mark is
    not moved.
    """
    protected = _protected_set(link, ctx.settings.own_set)
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
            await _hold_run(conn, link, report)
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
                _run_log(report).info(
                    "backup sync %s: took %s (%s)",
                    link.name,
                    identifier,
                    "missing here" if outcome == "taken_new" else "newer gmd:dateStamp",
                )


GET_RECORD_CONCURRENCY = 4


async def _get_records(
    ctx: HarvestContext, link: Link, headers: list[HeaderItem], sorter: PageSorter
) -> None:
    """The ListIdentifiers + GetRecord strategy (seed 002): fetch a page's records, a few at
    a time, and sort each as it arrives.

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


def _high_water_mark(
    greatest: datetime | None, first_response: datetime | None, mode: RunMode
) -> datetime | None:
    """The greatest datestamp of the list, never later than its first responseDate (DESIGN §1)."""
    if mode == "window" or greatest is None:
        return None
    if first_response is not None and greatest > first_response:
        return first_response
    return greatest


async def _store_page(
    ctx: HarvestContext,
    link: Link,
    report: RunReport,
    batch: list[store.IncomingRecord],
    quarantined: list[tuple[str | None, str, bytes]],
    protected: str | None,
    size: int,
) -> None:
    timeout_ms = int(ctx.settings.write_timeout_seconds * 1000)
    async with ctx.pool.acquire() as conn, conn.transaction():
        # A write held up (on a lock held elsewhere) fails the run rather than holding back
        # every list, which stops before the oldest write in progress (invariant 2).
        await conn.execute(f"set local statement_timeout = {timeout_ms}")
        await _hold_run(conn, link, report)
        result = await store.upsert_records(
            conn,
            link.local_set,
            batch,
            protected_set=protected,
            refuse_conflicts=True,
            source=link.name,
            deletions_hold=True,
        )
        counts = result.counts
        refused = (
            counts["refused_older"]
            + counts["refused_protected"]
            + counts["refused_conflict"]
            + counts["refused_deleted"]
        )
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
        await link_store.quarantine(conn, link.name, report.run_id, report.pages, quarantined)
    ctx.metrics.bytes.labels(link.name).inc(size)
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
        _run_log(report).warning(
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
        _run_log(report).info(
            "harvest %s: refused %s: %s",
            link.name,
            identifier,
            "no gmd:dateStamp, and the stored copy has one"
            if identifier in undated
            else "gmd:dateStamp older than the stored copy's",
        )
    for identifier in result.identifiers("refused_deleted"):
        _run_log(report).info(
            "harvest %s: refused %s: deleted here, and this copy's gmd:dateStamp is not newer "
            "than the deleted copy's (a deletion is newer than the copy it deleted)",
            link.name,
            identifier,
        )
    for identifier in result.identifiers("refused_conflict"):
        _run_log(report).warning(
            "harvest %s: refused %s: the copy stored from another link or set has the same "
            "gmd:dateStamp and other content; it is kept (the peers disagree on this record)",
            link.name,
            identifier,
        )
    for held, reason, _ in quarantined:
        _run_log(report).warning("harvest %s: quarantined %s: %s", link.name, held, reason)


async def _hold_run(conn: Connection, link: Link, report: RunReport) -> None:
    """Start a write of the run: stop it, the transaction unwritten, if it no longer runs."""
    status = await link_store.hold_run(conn, report.run_id)
    if status is None:
        raise LinkRemoved(f"link {link.name} was removed during the run")
    if status != "running":
        raise RunTakenOver(
            f"another worker took link {link.name} over during this run, whose lease had run "
            "out unrenewed (the process held up, or cut off from the database, for longer than "
            "WISCAT_HARVEST_LEASE_SECONDS); this run stopped, its pages written before are "
            "kept, and the high-water mark is the other run's to move"
        )


async def _complete(
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
    timeout_ms = int(ctx.settings.write_timeout_seconds * 1000)
    async with ctx.pool.acquire() as conn, conn.transaction():
        await link_store.hold_link(conn, link.name)  # updated last; locked first (see there)
        await _hold_run(conn, link, report)
        for start in range(0, len(deletions), DELETE_BATCH):
            await conn.execute(f"set local statement_timeout = {timeout_ms}")
            result = await store.delete_records(
                conn,
                link.local_set,
                deletions[start : start + DELETE_BATCH],
                protected_set=protected,
                remember_unknown=True,
            )
            counts.update(result.counts)
            for identifier in result.identifiers("refused_protected"):
                _run_log(report).warning(
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
            _run_log(report).warning(
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
