"""Consistency checks on a schedule (docs/checks.md): the harvester runs each stored check
when it falls due, stores its report, and exports the latest counts as metrics.

Checks are leased like links (``FOR UPDATE SKIP LOCKED``), and the lease renewed while a check
runs, so with several harvester processes on one database each check runs once per interval,
however long it takes; a crashed worker's check is taken over once its lease has run out. One
check runs at a time per process: a check lists whole sets from several GISCs, and should stay
the low-impact audit the seed describes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

from wiscat.harvester.check import CATEGORIES, CheckReport, CheckRequest, run_check
from wiscat.harvester.context import HarvestContext
from wiscat.harvester.scheduler import lease_kept
from wiscat.shared.db import checks as check_store
from wiscat.shared.logs import Outage
from wiscat.shared.model import Check
from wiscat.shared.tasks import wait_for_event

log = logging.getLogger("wiscat.check")


async def run_stored_check(ctx: HarvestContext, check: Check) -> tuple[CheckReport, int | None]:
    """Run ``check``, leased by this worker, now and store its report; returns the report and
    its id, None when the report is not stored because this worker no longer holds the check
    (removed meanwhile, or taken over by another worker, which stores its own report)."""
    request = CheckRequest(
        set_spec=check.set_spec,
        source=check.source_url,
        peers=tuple(check.peer_urls),
        sample=check.sample,
    )
    started = time.monotonic()
    report, checker = await run_check(ctx.client, request)
    with checker:
        report_id = await check_store.store_report(
            ctx.pool,
            check.name,
            report.as_json(items=request.keep),
            report.started_at,
            report.finished_at,
            leased_by=ctx.worker,
        )
    ctx.metrics.check_duration.labels(check.name).observe(time.monotonic() - started)
    if report_id is None:
        log.warning(
            "check %s of %s: %s, not stored: the check was removed meanwhile, or another "
            "worker took it over",
            check.name,
            check.set_spec,
            report.outcome,
            extra={"check": check.name, "outcome": report.outcome},
        )
        return report, None
    log.info(
        "check %s of %s: %s (report %d)",
        check.name,
        check.set_spec,
        report.outcome,
        report_id,
        extra={"check": check.name, "outcome": report.outcome, "report_id": report_id},
    )
    return report, report_id


async def run_due_checks(ctx: HarvestContext, stop: asyncio.Event) -> None:
    """Run due checks one after another until ``stop`` is set."""
    poll = max(ctx.settings.harvest_poll_seconds, 1.0)
    lease = timedelta(seconds=ctx.settings.harvest_lease_seconds)
    leasing = Outage(log, "leasing due checks")
    while not stop.is_set():
        check = None
        try:
            check = await check_store.lease_due(ctx.pool, ctx.worker, lease)
        except Exception as exc:  # the database may be restarting: try again later
            leasing.failed(exc)
        else:
            leasing.ended()
        if check is not None:
            try:
                renew = check_store.renew_lease
                async with lease_kept(ctx.pool, check.name, ctx.worker, lease, renew=renew):
                    await run_stored_check(ctx, check)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("check %s crashed", check.name)
            finally:
                with contextlib.suppress(Exception):
                    await check_store.release(
                        ctx.pool, check.name, ctx.worker, datetime.now(UTC) + check.every
                    )
            continue
        await wait_for_event(stop, poll)


async def export_check_metrics(ctx: HarvestContext) -> None:
    """Set the check gauges from the latest stored report of every check (whichever process ran
    it), so every harvester exports the same figures."""
    metrics = ctx.metrics
    rows = await check_store.latest_per_check(ctx.pool)
    checks = [check for check, _ in await check_store.all_checks(ctx.pool)]
    # rebuilt at each scrape: a removed check's gauges go with it (its "inconsistent" stayed,
    # for an alert to fire on until the process restarted); the duration histogram is history
    for gauge in (
        metrics.check_items,
        metrics.check_peer_ok,
        metrics.check_last_run,
        metrics.check_consistent,
        metrics.check_interval,
        metrics.check_created,
    ):
        gauge.clear()
    for check in checks:
        metrics.check_created.labels(check.name).set(check.created_at.timestamp())
        if check.enabled:  # a disabled check is not late
            metrics.check_interval.labels(check.name).set(check.every.total_seconds())
    for row in rows:
        name = row["check_name"]
        metrics.check_last_run.labels(name).set(row["finished_at"].timestamp())
        metrics.check_consistent.labels(name).set(1 if row["outcome"] == "consistent" else 0)
        for peer in row["report"]["peers"]:
            metrics.check_peer_ok.labels(name, peer["url"]).set(1 if peer["status"] == "ok" else 0)
            for category in CATEGORIES:
                count = peer["counts"].get(category)
                if count is not None:
                    metrics.check_items.labels(name, peer["url"], category).set(count)
