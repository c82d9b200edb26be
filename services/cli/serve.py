"""``wiscat run``, ``provider``, ``harvester`` (the services) and ``migrate``."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from wiscat.cli.arguments import command, port_number
from wiscat.cli.database import migrated_database, quiet_database
from wiscat.cli.signals import on_signals
from wiscat.listen import cannot_listen, listen
from wiscat.shared.db import migrate as migrations
from wiscat.shared.db.pool import connect, database_url
from wiscat.shared.heap import freeze_startup_objects, tune_heap
from wiscat.shared.settings import Settings
from wiscat.shared.urls import url_host

log = logging.getLogger("wiscat")

_SERVICE_EXITS = {
    0: "stopped by SIGINT, SIGTERM or SIGHUP, cleanly",
    2: "could not start: a bad setting, a port in use, an unusable key file, or the database "
    "could not be used (or stopped under it)",
}


def add_parsers(sub: Any) -> None:
    command(
        sub,
        "migrate",
        help="apply migrations/ to the database (idempotent)",
        handler=cmd_migrate,
        examples=[
            "wiscat migrate",
            "WISCAT_DATABASE_URL=postgresql://wiscat@db/wiscat wiscat migrate",
        ],
        exits={0: "the schema is current (migrations applied, or none due)"},
    )
    p = command(
        sub,
        "provider",
        help="serve /oai, /admin, /healthz, /readyz, /metrics",
        handler=cmd_provider,
        examples=["wiscat provider", "wiscat provider --host 0.0.0.0 --port 8080"],
        exits=_SERVICE_EXITS,
    )
    p.add_argument("--host", help="address to listen on (default: WISCAT_PROVIDER_HOST)")
    p.add_argument("--port", type=port_number, help="port (default: WISCAT_PROVIDER_PORT)")
    p = command(
        sub,
        "harvester",
        help="run the link scheduler (+ /healthz, /readyz, /metrics)",
        handler=cmd_harvester,
        examples=["wiscat harvester", "wiscat harvester --port 8081"],
        exits=_SERVICE_EXITS,
    )
    p.add_argument("--port", type=port_number, help="health port (default: WISCAT_HARVESTER_PORT)")
    command(
        sub,
        "run",
        help="run a whole node (embedded PostgreSQL when no DATABASE_URL)",
        handler=cmd_run,
        examples=[
            "wiscat run",
            "WISCAT_PROVIDER_PORT=18480 WISCAT_HARVESTER_PORT=18481 wiscat run",
        ],
        exits=_SERVICE_EXITS,
    )


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat migrate``: apply migrations/ to the database (idempotent)."""
    with quiet_database():
        async with database_url(settings.database_url, settings.data_dir) as url:
            conn = await connect(settings.session_url(url))  # the lock: never through a pooler
            try:
                applied = await migrations.migrate(conn)
            finally:
                await conn.close()
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


async def _serve_provider(
    settings: Settings, url: str, host: str, port: int, stop: asyncio.Event
) -> None:
    from wiscat.provider.app import create_app
    from wiscat.provider.serving import QuietServer, provider_config

    # listening from the moment it serves: peers' streams, cut by a restart, come back as their
    # own jittered backoff says, not all let in at once when the provider is ready
    with listen(host, port, "the provider", accept_now=False) as sock:
        app = create_app(settings, url)
        tune_heap()  # list pages of megabytes, built and sent many times a second
        freeze_startup_objects()
        config = provider_config(
            app,
            settings.header_timeout_seconds,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=10,
        )
        server = QuietServer(config)
        watcher = asyncio.create_task(stop.wait())
        watcher.add_done_callback(lambda _: setattr(server, "should_exit", True))
        log.info("provider listening on http://%s:%d/oai", url_host(host), port)
        if settings.base_url_unreachable:
            log.warning(
                "WISCAT_BASE_URL is unset: Identify and every response name %s, which peers "
                "cannot reach; set it to the URL they use",
                settings.base_url,
            )
        try:
            await server.serve(sockets=[sock])
        except OSError as exc:
            if server.started:
                raise
            # another process bound the port too, and listened first
            raise cannot_listen("the provider", host, port, exc) from exc
        finally:
            watcher.cancel()
            stop.set()


def _check_key_files(settings: Settings) -> None:
    """A registry key file that cannot be used stops the start at once, with its reason."""
    from wiscat.provider.registry import load_key_files

    load_key_files(settings)


async def cmd_provider(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat provider``: serve /oai, /admin, /healthz, /readyz, /metrics."""
    settings = settings.listening_on(args.host, args.port)
    _check_key_files(settings)
    stop = asyncio.Event()
    on_signals(stop.set)
    async with migrated_database(settings, stop) as url:
        await _serve_provider(settings, url, settings.provider_host, settings.provider_port, stop)
    log.info("provider stopped")
    return 0


async def cmd_harvester(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat harvester``: run the link scheduler (+ /healthz, /readyz, /metrics)."""
    from wiscat.harvester.service import serve_harvester

    stop = asyncio.Event()
    on_signals(stop.set)
    async with migrated_database(settings, stop) as url:
        await serve_harvester(
            settings,
            url,
            host=settings.provider_host,
            port=args.port or settings.harvester_port,
            stop=stop,
        )
    log.info("harvester stopped")
    return 0


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat run``: run a whole node (embedded PostgreSQL when no DATABASE_URL)."""
    from wiscat.harvester.service import serve_harvester

    _check_key_files(settings)
    stop = asyncio.Event()
    on_signals(stop.set)
    async with migrated_database(settings, stop) as url:
        host, port = settings.provider_host, settings.provider_port
        harvester = asyncio.create_task(
            serve_harvester(settings, url, host=host, port=settings.harvester_port, stop=stop)
        )
        # a node whose harvester stopped (it could not listen, or failed) stops as a whole,
        # with the harvester's error, rather than serving on without harvesting
        harvester.add_done_callback(lambda _: stop.set())
        site = f"http://{url_host(host)}:{port}"
        print(
            f"wiscat node {settings.gisc_name}: open {site}/oai?verb=Identify, dashboard {site}/",
            flush=True,
        )
        try:
            await _serve_provider(settings, url, host, port, stop)
        finally:
            stop.set()
            await harvester
    log.info("node stopped")
    return 0
