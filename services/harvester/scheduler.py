"""Runs every enabled link on its schedule: many at once, bounded overall and per peer host.

Links are leased from the database, so several harvester processes on one database share the work
and a link never runs twice at once. Each run holds its lease, and a slot of its peer host, on a
database session of its own (``wiscat.shared.db.leases``): a worker that dies frees its links and
host slots with its sessions, at once, and the others take them over; one that is alive but stuck
loses its links when their leases run out. A link whose host has all its slots taken (by any
process) is not leased: it waits, unleased, for whichever worker finds a slot free first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from wiscat.harvester.context import HarvestContext
from wiscat.harvester.harvest import harvest_link
from wiscat.shared.db import leases as lease_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.leases import LeaseSession
from wiscat.shared.db.pool import Pool
from wiscat.shared.logs import Outage
from wiscat.shared.model import Link
from wiscat.shared.version import VERSION

log = logging.getLogger("wiscat.harvester")


Renew = Callable[[Pool, str, str, timedelta], Awaitable[bool]]

# Due links looked at in one round, at most: a host's links beyond its WISCAT_HARVEST_PER_HOST
# are not among them, so up to CANDIDATES / per-host hosts, full or not, are tried in a round.
CANDIDATES = 1000


def lease_kept(
    pool: Pool, name: str, owner: str, lease: timedelta, *, renew: Renew = link_store.renew_lease
) -> contextlib.AbstractAsyncContextManager[None]:
    """Renew ``owner``'s lease of ``name`` (a link; a check with ``renew`` of the checks) every
    third of ``lease`` while the block runs, so that no other worker takes it over while its
    run lasts longer than one lease."""
    return renewed(lambda: renew(pool, name, owner, lease), name, lease)


@contextlib.asynccontextmanager
async def renewed(
    renew: Callable[[], Awaitable[bool]], name: str, lease: timedelta
) -> AsyncIterator[None]:
    """Call ``renew`` every third of ``lease`` while the block runs (a lease of ``name``)."""
    keeper = asyncio.create_task(_keep_lease(renew, name, lease), name=f"lease {name}")
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _keep_lease(renew: Callable[[], Awaitable[bool]], name: str, lease: timedelta) -> None:
    while True:
        await asyncio.sleep(lease.total_seconds() / 3)
        try:
            still_ours = await renew()
        except Exception as exc:  # the database may be restarting: try again at the next turn
            log.warning("could not renew the lease of %s: %s", name, exc)
            continue
        if not still_ours:
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
                    await self._lease_due(free)
                except Exception as exc:  # the database may be restarting: try again later
                    self.leasing.failed(exc)
                else:
                    self.leasing.ended()
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

    async def _lease_due(self, free: int) -> None:
        """Lease up to ``free`` due links, each with a slot of its peer host, and start them.

        A host's slot is taken before the link's lease: a link whose host has all its slots
        taken is left unleased (another link, of another host, may take the free run slot),
        where it once took a run slot and its lease to wait for its host."""
        # a few of every host that has due links: a host whose slots are all taken is passed
        # over after one try, and the links of the others come after
        candidates = await lease_store.free_due(self.ctx.pool, CANDIDATES, self.per_host)
        full: set[str] = set()
        for name, base_url in candidates:
            if free == 0:
                return
            host = urlsplit(base_url).netloc
            if host in full:
                continue
            session = await LeaseSession.open(self.ctx.database_url)
            try:
                if not await session.take_host_slot(host, self.per_host):
                    full.add(host)
                    link = None
                else:
                    link = await session.take(name, self.owner, self.lease, due=True)
            except BaseException:
                await session.close()
                raise
            if link is None:
                await session.close()
                continue
            free -= 1
            task = asyncio.create_task(self._run(link, session), name=f"harvest {link.name}")
            self.running.add(task)
            task.add_done_callback(self._done)

    async def _run(self, link: Link, session: LeaseSession) -> None:
        failed = True
        try:
            renew = functools.partial(session.renew, link.name, self.owner, self.lease)
            async with renewed(renew, link.name, self.lease):
                # spread the first requests of links that fall due together
                await asyncio.sleep(random.uniform(0, 0.5) if not session.hinted else 0)
                if session.hinted:
                    self.ctx.metrics.hint_runs.labels(link.name).inc()
                report = await harvest_link(self.ctx, link, requested=link.run_requested)
                failed = report.status != "ok"
                if not failed and session.hinted_until is not None:
                    latency = datetime.now(UTC) - session.hinted_until
                    self.ctx.metrics.hint_latency.labels(link.name).observe(
                        max(latency.total_seconds(), 0.0)
                    )
        except asyncio.CancelledError:
            raise
        except DatabaseUnavailable as exc:
            # the run could not even be recorded as failed: it is, as abandoned, by the link's
            # next run, which starts as soon as the database is back (the lease's session, and
            # so its lock, went with it)
            log.warning(
                "harvest of %s stopped: the database is unavailable (%s: %s)",
                link.name,
                exc.kind,
                exc,
            )
        except Exception:
            log.exception("harvest of %s crashed", link.name)
        finally:
            await give_back(
                self.ctx.pool,
                session,
                link,
                self.owner,
                next_run(link, now=datetime.now(UTC), failed=failed),
            )


async def give_back(
    pool: Pool, session: LeaseSession, link: Link, owner: str, next_run_at: datetime
) -> None:
    """Give ``link``'s lease back on its session, and close that: on the pool where the session
    was lost (its locks went with it), the row's lease alone is left to give back. A stop that
    comes meanwhile (the harvester's end, Ctrl-C) waits for it: a lease left in its row would
    keep the link from its next run until it ran out."""
    giving = asyncio.ensure_future(_give_back(pool, session, link, owner, next_run_at))
    try:
        await asyncio.shield(giving)
    except asyncio.CancelledError:
        await giving
        raise


async def _give_back(
    pool: Pool, session: LeaseSession, link: Link, owner: str, next_run_at: datetime
) -> None:
    try:
        await session.give_back(link.name, owner, next_run_at, link)
    except Exception:
        with contextlib.suppress(Exception):
            await link_store.release_lease(
                pool, link.name, owner, next_run_at, link, hint_only=session.hint_only
            )
    finally:
        await session.close()
