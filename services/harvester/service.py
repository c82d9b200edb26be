"""The harvester process: the scheduler plus its own /healthz, /readyz and /metrics (aiohttp)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from wiscat.harvester import wis2
from wiscat.harvester.client import ClientSettings, OAIClient
from wiscat.harvester.context import HarvestContext
from wiscat.harvester.hints import Hints
from wiscat.harvester.page_workers import PageReaders
from wiscat.harvester.scheduled_checks import export_check_metrics, run_due_checks
from wiscat.harvester.scheduler import Scheduler
from wiscat.listen import listen
from wiscat.shared.db import hints as hint_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db.errors import DatabaseUnavailable
from wiscat.shared.db.hints import HintStream, subscription
from wiscat.shared.db.migrate import check_current, not_ready
from wiscat.shared.db.pool import answered, create_pool
from wiscat.shared.heap import one_arena
from wiscat.shared.model import Link
from wiscat.shared.settings import Settings
from wiscat.shared.urls import url_host

log = logging.getLogger("wiscat.harvester")


def client_settings(settings: Settings) -> ClientSettings:
    return ClientSettings(
        read_timeout=settings.harvest_timeout_seconds,
        # a response that keeps coming, however slowly, is cut off at 15 minutes, or at the
        # read timeout where an operator set that longer
        total_timeout=max(ClientSettings.total_timeout, settings.harvest_timeout_seconds),
        max_retries=settings.harvest_max_retries,
        max_decompressed_bytes=settings.harvest_max_page_bytes,
        max_empty_pages=settings.harvest_max_empty_pages,
        max_requests_per_list=settings.harvest_max_requests_per_list,
        retry_after_cap=settings.harvest_retry_after_cap_seconds,
        ca_file=settings.ca_file,
        proxy=settings.proxy,
        from_address=settings.admin_email,
    )


@contextlib.asynccontextmanager
async def harvest_context(settings: Settings, database_url: str) -> AsyncIterator[HarvestContext]:
    """A pool, one HTTP session for the whole process, and the client over it."""
    one_arena()  # before the threads that spool pages and receive what workers made of them
    pool = await create_pool(
        database_url,
        max_size=max(4, settings.harvest_concurrency // 2),
        statement_cache=settings.database_statement_cache,
    )
    try:
        async with contextlib.AsyncExitStack() as stack:
            client_config = client_settings(settings)
            session = await stack.enter_async_context(OAIClient.session(client_config))
            client = OAIClient(session, client_config)
            pages = PageReaders(settings.harvest_page_workers)
            stack.callback(pages.close)
            # leases are session advisory locks: on a session of their own, past any pooler
            session_url = settings.session_url(database_url)
            yield HarvestContext(settings, pool, client, pages=pages, database_url=session_url)
    finally:
        await pool.close()


def health_app(ctx: HarvestContext) -> web.Application:
    app = web.Application()

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        reason = await not_ready(ctx.pool, ctx.settings.probe_timeout_seconds)
        if reason is not None:
            return web.json_response({"ready": False, "reason": reason}, status=503)
        return web.json_response({"ready": True})

    async def read_values() -> tuple[list[Link], dict[str, HintStream]]:
        await export_check_metrics(ctx)
        return await link_store.all_links(ctx.pool), await hint_store.all_streams(ctx.pool)

    async def metrics(request: web.Request) -> web.Response:
        now = time.time()
        try:
            links, streams = await answered(read_values(), ctx.settings.probe_timeout_seconds)
        except DatabaseUnavailable as exc:
            # the process's own metrics are worth most during an outage: served all the same
            log.warning("metrics without the database's values: %s: %s", exc.kind, exc)
            ctx.metrics.database_up.set(0)
        else:
            ctx.metrics.database_up.set(1)
            # rebuilt from the database at each scrape: a removed link's series goes with it
            # instead of staying frozen at its last value
            per_link = (
                ctx.metrics.last_success,
                ctx.metrics.lag,
                ctx.metrics.interval,
                ctx.metrics.enabled,
                ctx.metrics.created,
                ctx.metrics.hint_stream_up,
            )
            for gauge in per_link:
                gauge.clear()
            for link in links:
                ctx.metrics.interval.labels(link.name).set(link.every.total_seconds())
                ctx.metrics.enabled.labels(link.name).set(link.enabled)
                ctx.metrics.created.labels(link.name).set(link.created_at.timestamp())
                hinted = subscription(link, streams.get(link.base_url), ctx.settings.hints)
                if hinted["state"] in ("connected", "down"):  # its peer advertises a stream
                    up = hinted["state"] == "connected"
                    ctx.metrics.hint_stream_up.labels(link.name).set(up)
                if link.last_success_at is not None:
                    last = link.last_success_at.timestamp()
                    ctx.metrics.last_success.labels(link.name).set(last)
                    ctx.metrics.lag.labels(link.name).set(now - last)
        body = generate_latest(ctx.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def health_runner(ctx: HarvestContext) -> web.AppRunner:
    """The health port's server: a connection idle for WISCAT_HEADER_TIMEOUT_SECONDS, before
    its first request or between two, is closed (aiohttp's default kept one that never sent a
    request for an hour, its file descriptor with it), as the provider closes it. No route
    reads a body: the connection of a request with one is closed after the answer, where
    aiohttp would read the rest for up to 10 s ("lingering"), 100 MB and more (RELIABILITY
    S11)."""
    timeout = ctx.settings.header_timeout_seconds
    return web.AppRunner(
        health_app(ctx), access_log=None, keepalive_timeout=timeout, lingering_time=0
    )


async def serve_harvester(
    settings: Settings, database_url: str, *, host: str, port: int, stop: asyncio.Event
) -> None:
    """Run the scheduler and the health endpoints until ``stop`` is set."""
    async with harvest_context(settings, database_url) as ctx:
        async with ctx.pool.acquire() as conn:
            await check_current(conn)
        runner = health_runner(ctx)
        await runner.setup()
        site = web.SockSite(runner, listen(host, port, "the harvester's health endpoints"))
        await site.start()
        log.info("harvester health on http://%s:%d/healthz", url_host(host), port)
        scheduler = Scheduler(ctx)
        ctx.metrics.running.set_function(lambda: len(scheduler.running))
        checks = asyncio.create_task(run_due_checks(ctx, stop), name="checks")
        tasks = [checks]
        tasks.append(asyncio.create_task(Hints(ctx, scheduler.wake).run(stop), name="hints"))
        if settings.wis2_broker_url and settings.wis2_centres:
            counts = wis2.Counts(metrics=ctx.metrics)
            tasks.append(
                asyncio.create_task(wis2.run_wis2(ctx.pool, settings, stop, counts), name="wis2")
            )
        try:
            await scheduler.run(stop)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await runner.cleanup()
