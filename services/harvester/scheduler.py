"""Runs every enabled link on its schedule: many at once, bounded overall and per peer host.

Links are leased from the database (``FOR UPDATE SKIP LOCKED``), so several harvester processes on
one database share the work and a link never runs twice at once; a crashed worker's lease runs out
and another worker takes the link over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from wiscat.harvester.context import HarvestContext
from wiscat.harvester.harvest import harvest_link
from wiscat.shared.db import links as link_store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.links import Link
from wiscat.shared.db.pool import Pool
from wiscat.shared.logs import Outage
from wiscat.shared.version import VERSION

log = logging.getLogger("wiscat.harvester")


Renew = Callable[[Pool, str, str, timedelta], Awaitable[bool]]


@contextlib.asynccontextmanager
async def lease_kept(
    pool: Pool, name: str, owner: str, lease: timedelta, *, renew: Renew = link_store.renew_lease
) -> AsyncIterator[None]:
    """Renew ``owner``'s lease of ``name`` (a link; a check with ``renew`` of the checks) every
    third of ``lease`` while the block runs, so that no other worker takes it over while its
    run lasts longer than one lease."""
    keeper = asyncio.create_task(_keep_lease(pool, name, owner, lease, renew), name=f"lease {name}")
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _keep_lease(pool: Pool, name: str, owner: str, lease: timedelta, renew: Renew) -> None:
    while True:
        await asyncio.sleep(lease.total_seconds() / 3)
        try:
            renewed = await renew(pool, name, owner, lease)
        except Exception as exc:  # the database may be restarting: try again at the next turn
            log.warning("could not renew the lease of %s: %s", name, exc)
            continue
        if not renewed:
            log.warning("lost the lease of %s: another worker took it over", name)
            return


def next_run(link: Link, *, now: datetime, failed: bool) -> datetime:
    """When to run ``link`` again: its interval with ±10% jitter, sooner after a failure."""
    interval = link.every.total_seconds()
    if failed:
        interval = min(interval, 300.0)
    return now + timedelta(seconds=interval * random.uniform(0.9, 1.1))


class Scheduler:
    def __init__(self, ctx: HarvestContext, *, owner: str | None = None) -> None:
        self.ctx = ctx
        self.owner = owner or ctx.worker
        settings = ctx.settings
        self.lease = timedelta(seconds=settings.harvest_lease_seconds)
        self.slots = settings.harvest_concurrency
        self.per_host = settings.harvest_per_host
        self.poll = settings.harvest_poll_seconds
        self.host_limits: dict[str, asyncio.Semaphore] = {}
        self.running: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        self.leasing = Outage(log, "leasing due links")

    async def run(self, stop: asyncio.Event) -> None:
        """Lease due links and run them until ``stop`` is set; then finish the running ones."""
        log.info(
            "harvester %s scheduling (%d at once, %d per host; wiscat %s)",
            self.owner,
            self.slots,
            self.per_host,
            VERSION,
        )
        while not stop.is_set():
            free = self.slots - len(self.running)
            if free > 0:
                try:
                    due = await link_store.lease_due(self.ctx.pool, self.owner, self.lease, free)
                except Exception as exc:  # the database may be restarting: try again later
                    self.leasing.failed(exc)
                    due = []
                else:
                    self.leasing.ended()
                for link in due:
                    task = asyncio.create_task(self._run(link), name=f"harvest {link.name}")
                    self.running.add(task)
                    task.add_done_callback(self._done)
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait(stop), self.poll)
        if self.running:
            log.info("stopping: waiting for %d running harvests", len(self.running))
            for task in list(self.running):
                task.cancel()
            await asyncio.gather(*self.running, return_exceptions=True)

    async def _wait(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(self.wake.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.wake.set()

    async def _run(self, link: Link) -> None:
        host = urlsplit(link.base_url).netloc
        limit = self.host_limits.setdefault(host, asyncio.Semaphore(self.per_host))
        failed = True
        try:
            async with lease_kept(self.ctx.pool, link.name, self.owner, self.lease), limit:
                # spread the first requests of links that fall due together
                await asyncio.sleep(random.uniform(0, 0.5))
                report = await harvest_link(self.ctx, link, requested=link.run_requested)
                failed = report.status != "ok"
        except asyncio.CancelledError:
            raise
        except DatabaseUnavailable as exc:
            # the run could not even be recorded as failed: it is, as abandoned, once its
            # lease runs out (WISCAT_HARVEST_LEASE_SECONDS); the link runs again then
            log.warning(
                "harvest of %s stopped: the database is unavailable (%s: %s)",
                link.name,
                exc.kind,
                exc,
            )
        except Exception:
            log.exception("harvest of %s crashed", link.name)
        finally:
            with contextlib.suppress(Exception):
                await link_store.release_lease(
                    self.ctx.pool,
                    link.name,
                    self.owner,
                    next_run(link, now=datetime.now(UTC), failed=failed),
                    link,
                )
