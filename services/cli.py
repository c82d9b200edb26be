"""The ``wiscat`` command (DESIGN §8): one entry point for every service and operator task."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError

from services import cli_checks, cli_history, cli_probe, cli_registry, cli_settings
from services.cli_output import table, when
from services.listen import CannotListen, listen
from shared import ingest
from shared.db import links as link_store
from shared.db import migrate as migrations
from shared.db import records as records_store
from shared.db.errors import FAILED, UNAVAILABLE, DatabaseError
from shared.db.pool import Pool, connect, create_pool, database_url
from shared.durations import format_duration, parse_duration
from shared.heap import freeze_startup_objects, tune_heap
from shared.linkspec import (
    LinkSpecError,
    build_link,
    changed_link,
    set_kind,
)
from shared.logs import configure
from shared.registry.keyfile import KeyFileError
from shared.settings import Settings
from shared.settings import explain as explain_settings
from shared.settings import unknown as unknown_settings
from shared.urls import safe_url, url_host
from shared.version import VERSION

log = logging.getLogger("wiscat")


@contextlib.asynccontextmanager
async def migrated_database(
    settings: Settings, stop: asyncio.Event | None = None
) -> AsyncIterator[str]:
    """The database URL (embedded server started if none is configured), schema brought current.

    A service passes its ``stop``: if the embedded server stops running under it, the service is
    stopped, and the command then fails with the reason (the end of the server's log).
    """
    lost: list[str] = []
    on_lost = None
    if stop is not None:

        def on_lost(reason: str) -> None:
            log.error("%s; stopping", reason)
            lost.append(reason)
            stop.set()

    async with database_url(settings.database_url, settings.data_dir, on_lost=on_lost) as url:
        conn = await connect(url)
        try:
            applied = await migrations.migrate(conn)
            other = await records_store.other_own_set(conn, settings.own_set)
        finally:
            await conn.close()
        if applied:
            log.info("applied migrations: %s", ", ".join(applied))
        if other is not None:
            # a typo in WISCAT_GISC_NAME, or another node's database: the records of the set
            # this node made its own would lose the own set's protection (invariant 6)
            raise DatabaseError(
                f"this database belongs to the node whose own set is {other}, and "
                f"WISCAT_GISC_NAME={settings.gisc_name} names {settings.own_set}: set "
                f"WISCAT_GISC_NAME={other.removeprefix('WIS-GISC-')}, or point "
                "WISCAT_DATABASE_URL (or WISCAT_DATA_DIR) at this node's own database"
            )
        yield url
    if lost:
        raise DatabaseError(lost[0])


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    async with database_url(settings.database_url, settings.data_dir) as url:
        conn = await connect(url)
        try:
            applied = await migrations.migrate(conn)
        finally:
            await conn.close()
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


class _Server(uvicorn.Server):
    """uvicorn, minus its own signal handling: the command owns the stop signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def stop_signals() -> list[signal.Signals]:
    """The signals that stop a command cleanly: SIGINT, SIGTERM and SIGHUP (its terminal gone,
    whose default ended the process on the spot, an embedded PostgreSQL left running), unless
    SIGHUP is ignored, as ``nohup`` asks."""
    stops = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        stops.append(signal.SIGHUP)
    return stops


def _on_signals(callback: Callable[[], None]) -> None:
    """``callback`` on each of :func:`stop_signals`, logged (a service that stops says why)."""
    loop = asyncio.get_running_loop()

    def received(sig: signal.Signals) -> None:
        log.info("%s received: stopping", sig.name)
        callback()

    for sig in stop_signals():
        loop.add_signal_handler(sig, received, sig)


async def _serve_provider(
    settings: Settings, url: str, host: str, port: int, stop: asyncio.Event
) -> None:
    from services.provider.app import create_app
    from services.provider.serving import provider_config

    with listen(host, port, "the provider") as sock:
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
        server = _Server(config)
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
        finally:
            watcher.cancel()
            stop.set()


def _check_key_files(settings: Settings) -> None:
    """A registry key file that cannot be used stops the start at once, with its reason."""
    from services.provider.registry import load_key_files

    load_key_files(settings)


async def cmd_provider(settings: Settings, args: argparse.Namespace) -> int:
    settings = settings.listening_on(args.host, args.port)
    _check_key_files(settings)
    stop = asyncio.Event()
    _on_signals(stop.set)
    async with migrated_database(settings, stop) as url:
        await _serve_provider(settings, url, settings.provider_host, settings.provider_port, stop)
    log.info("provider stopped")
    return 0


async def cmd_harvester(settings: Settings, args: argparse.Namespace) -> int:
    from services.harvester.service import serve_harvester

    stop = asyncio.Event()
    _on_signals(stop.set)
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
    from services.harvester.service import serve_harvester

    _check_key_files(settings)
    stop = asyncio.Event()
    _on_signals(stop.set)
    async with migrated_database(settings, stop) as url:
        host, port = settings.provider_host, settings.provider_port
        harvester = asyncio.create_task(
            serve_harvester(settings, url, host=host, port=settings.harvester_port, stop=stop)
        )
        # a node whose harvester stopped (it could not listen, or failed) stops as a whole,
        # with the harvester's error, rather than serving on without harvesting
        harvester.add_done_callback(lambda _: stop.set())
        print(
            f"wiscat node {settings.gisc_name}: open http://{url_host(host)}:{port}/oai?verb=Identify",
            flush=True,
        )
        try:
            await _serve_provider(settings, url, host, port, stop)
        finally:
            stop.set()
            await harvester
    log.info("node stopped")
    return 0


async def cmd_harvest(settings: Settings, args: argparse.Namespace) -> int:
    try:
        return await _harvest_once(settings, args)
    except UNAVAILABLE as exc:
        # the database went away during the run (a crash, a restart, a network cut): said as
        # such, where the system's words alone ('[Errno 2] No such file or directory', the
        # server's socket) named no database; the run is closed as abandoned once its lease
        # runs out, and the next run starts from the high-water mark
        raise DatabaseError(
            f"the database could not be reached during the harvest of {args.name}: "
            f"{_said(exc)}; its pages committed before are kept, and the next run starts "
            "from the link's high-water mark"
        ) from exc


async def _harvest_once(settings: Settings, args: argparse.Namespace) -> int:
    from services.harvester.harvest import harvest_link, run_list
    from services.harvester.scheduler import lease_kept
    from services.harvester.service import harvest_context

    async with migrated_database(settings) as url, harvest_context(settings, url) as ctx:
        owner = ctx.worker
        lease = timedelta(seconds=settings.harvest_lease_seconds)
        link = await link_store.lease_link(ctx.pool, args.name, owner, lease)
        if link is None:
            if await link_store.get_link(ctx.pool, args.name) is None:
                print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
                return 2
            print(f"wiscat: link {args.name} is being harvested by another worker", file=sys.stderr)
            return 1
        try:
            # renewed while the run lasts: a long run must not be taken over by a harvester
            async with lease_kept(ctx.pool, link.name, owner, lease):
                if args.backup_sync:
                    report = await run_list(ctx, link, mode="backup", from_=None, until=None)
                else:
                    report = await harvest_link(
                        ctx,
                        link,
                        full=args.full,
                        allow_mass_delete=args.allow_mass_delete,
                        window=False,
                    )
        finally:
            await link_store.release_lease(ctx.pool, link.name, owner, link.next_run_at, link)
    print(report.summary())
    for identifier in report.taken:
        print(f"took: {identifier}")
    return 0 if report.status == "ok" else 1


async def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if str(p) != ingest.STDIN and not p.exists()]
    if missing:
        print(f"no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if ingest.STDIN in args.paths and (refused := _stdin_refused(args.paths, "a record")):
        return refused
    report = ingest.IngestReport()
    async with migrated_database(settings) as url:
        pool = await create_pool(url, max_size=2)
        try:
            await ingest.ingest_paths(pool, settings.own_set, paths, report)
        except UNAVAILABLE + FAILED as exc:  # a file's own errors are the report's
            log.debug("ingest stopped by the database", exc_info=exc)
            why = f"the database failed during the ingest: {_said(exc)}"
            _print_ingest_stopped(settings, report, why)
            return 2
        except asyncio.CancelledError:  # Ctrl-C, SIGTERM, a closed terminal
            _print_ingest_stopped(settings, report, "the ingest was asked to stop")
            raise
        finally:
            await pool.close()
    _print_ingest(settings, report)
    return 1 if report.refused or report.older else 0


def _stdin_refused(arguments: list[str], what: str) -> int | None:
    """Exit status 2, said why, if '-' (standard input) cannot be read here: given twice, or a
    terminal (the command would wait for typing that no one means to do)."""
    if arguments.count(ingest.STDIN) > 1:
        print("wiscat: '-' (standard input) may be given once", file=sys.stderr)
        return 2
    if sys.stdin.isatty():
        print(
            f"wiscat: '-' is standard input, which is a terminal here: pipe {what} into it",
            file=sys.stderr,
        )
        return 2
    return None


def _print_ingest_stopped(settings: Settings, report: ingest.IngestReport, why: str) -> None:
    """What an ingest stored before ``why`` stopped it stays stored: said, so that the operator
    knows where it stopped and how to go on."""
    _print_ingest(settings, report)
    print(
        f"wiscat: {why}. The counts above are what was stored before; the batch being written "
        f"(up to {ingest.BATCH} files) was not. The same ingest, run again, goes on: what was "
        "stored comes back unchanged.",
        file=sys.stderr,
    )


def _said(exc: BaseException) -> str:
    """An exception's message, or its kind when it has none (a connection reset says nothing)."""
    return str(exc) or type(exc).__name__


def _print_ingest(settings: Settings, report: ingest.IngestReport) -> None:
    for path, reason in report.refused:
        print(f"bad: {path}: {reason}", file=sys.stderr)
    for path, reason in report.older:
        print(f"refused: {path}: {reason}", file=sys.stderr)
    print(f"{settings.own_set}: {report.summary()}")


async def cmd_delete(settings: Settings, args: argparse.Namespace) -> int:
    identifiers = list(args.identifiers)
    if ingest.STDIN in identifiers:  # one identifier a line: more than a command line holds
        if refused := _stdin_refused(identifiers, "identifiers (one a line)"):
            return refused
        piped = [line.strip() for line in sys.stdin.read().splitlines()]
        identifiers = [i for i in identifiers if i != ingest.STDIN] + [i for i in piped if i]
    async with migrated_database(settings) as url:
        pool = await create_pool(url, max_size=2)
        try:
            result = await ingest.delete_local(pool, settings.own_set, identifiers)
        finally:
            await pool.close()
    failed = 0
    for identifier in identifiers:
        outcome = result.outcomes[identifier]
        if outcome in ("deleted", "left_set"):
            print(f"deleted: {identifier}")
        else:
            failed += 1
            print(
                f"not deleted: {identifier}: no live record in {settings.own_set}", file=sys.stderr
            )
    return 1 if failed else 0


@contextlib.asynccontextmanager
async def migrated_pool(settings: Settings) -> AsyncIterator[Pool]:
    async with migrated_database(settings) as url:
        pool = await create_pool(url, max_size=4)
        try:
            yield pool
        finally:
            await pool.close()


async def cmd_link_add(settings: Settings, args: argparse.Namespace) -> int:
    try:
        new = build_link(
            name=args.name,
            url=args.url,
            remote_set=args.set,
            into=args.into,
            own_set=settings.own_set,
            prefix=args.prefix,
            strategy=args.strategy,
            every=args.every,
            full_every=args.full_every,
            overlap=args.overlap,
            window_slices=args.window_slices,
            enabled=not args.disabled,
            recovery=args.recovery,
            own_base_url=settings.base_url,
        )
    except LinkSpecError as exc:
        print(f"wiscat: link not added: {exc}", file=sys.stderr)
        return 2
    async with migrated_pool(settings) as pool:
        try:
            link = await link_store.add_link(
                pool, new, set_kind=set_kind(new.local_set, settings.own_set)
            )
        except link_store.LinkExists as exc:
            print(f"wiscat: {exc}", file=sys.stderr)
            return 1
    print(
        f"added link {link.name}: {safe_url(link.base_url)} set={link.remote_set or '(all)'} "
        f"into {link.local_set}, every {format_duration(link.every)}, "
        f"full every {format_duration(link.full_every)}"
    )
    print(f"ask the peer what its harvests will: wiscat link test {link.name}")
    return 0


# How each harvest strategy is named to an operator.
_BY = {"ListRecords": "ListRecords", "ListIdentifiers": "ListIdentifiers + GetRecord"}


async def cmd_link_list(settings: Settings, args: argparse.Namespace) -> int:
    async with migrated_pool(settings) as pool:
        found = await link_store.all_links(pool)
    if args.json:
        print(json.dumps([link.as_json() for link in found], indent=2))
        return 0
    if not found:
        print("no links")
        return 0
    rows = [
        [
            link.name,
            "yes" if link.enabled else "no",
            link.remote_set or "(all)",
            link.local_set,
            f"{format_duration(link.every)}/{format_duration(link.full_every)}",
            when(link.high_water_mark),
            when(link.last_success_at),
            safe_url(link.base_url)
            + (f" prefix {link.metadata_prefix}" if link.metadata_prefix != "iso19139" else "")
            + (f" by {_BY[link.strategy]}" if link.strategy != "ListRecords" else "")
            + (f"  [{link.last_error}]" if link.last_error else ""),
        ]
        for link in found
    ]
    headers = ["NAME", "ENABLED", "SET", "INTO", "EVERY/FULL", "HWM", "LAST OK", "URL / LAST ERROR"]
    print("\n".join(table(headers, rows)))
    return 0


async def cmd_link_remove(settings: Settings, args: argparse.Namespace) -> int:
    async with migrated_pool(settings) as pool:
        removed = await link_store.remove_link(pool, args.name)
    if not removed:
        print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
        return 1
    print(f"removed link {args.name} (its records stay)")
    return 0


_LINK_CHANGES = (
    "url",
    "set",
    "prefix",
    "strategy",
    "every",
    "full_every",
    "overlap",
    "window_slices",
)


async def cmd_link_set(settings: Settings, args: argparse.Namespace) -> int:
    if all(getattr(args, name) is None for name in _LINK_CHANGES) and not (
        args.enable or args.disable
    ):
        options = ", ".join("--" + name.replace("_", "-") for name in _LINK_CHANGES)
        print(f"wiscat: nothing to change: give {options}, --enable or --disable", file=sys.stderr)
        return 2
    async with migrated_pool(settings) as pool:
        link = await link_store.get_link(pool, args.name)
        if link is None:
            print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
            return 1
        try:
            new = changed_link(
                link,
                settings.own_set,
                url=args.url,
                remote_set=args.set,
                prefix=args.prefix,
                strategy=args.strategy,
                every=args.every,
                full_every=args.full_every,
                overlap=args.overlap,
                window_slices=args.window_slices,
                own_base_url=settings.base_url,
            )
        except LinkSpecError as exc:
            print(f"wiscat: link not changed: {exc}", file=sys.stderr)
            return 2
        try:
            async with pool.acquire() as conn:
                kind = set_kind(new.local_set, settings.own_set)
                link, changed = await link_store.update_link(conn, link, new, set_kind=kind)
        except link_store.LinkGone:  # removed meanwhile
            print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
            return 1
        except link_store.LinkHasRecords as exc:
            print(f"wiscat: link not changed: {exc}", file=sys.stderr)
            return 2
        source = (
            f"{safe_url(link.base_url)} set={link.remote_set or '(all)'} "
            f"prefix={link.metadata_prefix}"
        )
        if "source" in changed:
            print(
                f"link {link.name} now harvests {source}; "
                "high-water mark reset: the next run is a full harvest"
            )
        elif args.url is not None or args.set is not None or args.prefix is not None:
            # not a new source: its high-water mark stays, and no full harvest is due
            print(f"link {link.name} harvests {source} already; its source is unchanged")
        if "strategy" in changed:
            print(
                f"link {link.name} now harvests by {_BY[link.strategy]}; its high-water mark stays"
            )
        if "schedule" in changed:
            print(
                f"link {link.name}: every {format_duration(link.every)}, full every "
                f"{format_duration(link.full_every)}, overlap {format_duration(link.overlap)}, "
                f"window slices {link.window_slices}; its high-water mark stays"
            )
        if args.enable or args.disable:
            await link_store.set_enabled(pool, link.name, bool(args.enable))
            print(f"link {link.name} {'enabled' if args.enable else 'disabled'}")
    return 0


_DURATION = cli_checks.argument(parse_duration)


def _port(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r}: a port, 1 to 65535")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wiscat",
        description="WIS catalogue node: OAI-PMH provider, harvester and tools. Settings come "
        "from WISCAT_* environment variables or ./.env.",
    )
    parser.add_argument("--version", action="version", version=f"wiscat {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("migrate", help="apply migrations/ to the database (idempotent)")

    p = sub.add_parser("provider", help="serve /oai, /admin, /healthz, /readyz, /metrics")
    p.add_argument("--host", help="address to listen on (default: WISCAT_PROVIDER_HOST)")
    p.add_argument("--port", type=_port, help="port (default: WISCAT_PROVIDER_PORT)")

    p = sub.add_parser("harvester", help="run the link scheduler (+ /healthz, /readyz, /metrics)")
    p.add_argument("--port", type=_port, help="health port (default: WISCAT_HARVESTER_PORT)")

    sub.add_parser("run", help="run a whole node (embedded PostgreSQL when no DATABASE_URL)")

    p = sub.add_parser("harvest", help="run one link once now; exit 0 on success")
    p.add_argument("name")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="a full harvest (no from)")
    mode.add_argument(
        "--backup-sync",
        action="store_true",
        help="backup synchronisation of a shared set (seed 000 §5): take only records missing "
        "here or newer by gmd:dateStamp, keeping the peer's datestamps; lists what it took",
    )
    p.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="apply deletions even past the mass-deletion circuit breaker",
    )

    p = sub.add_parser("ingest", help="load ISO 19139 files or folders into the own set")
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="a file, a folder (its *.xml), or - (stdin)"
    )

    p = sub.add_parser("delete", help="delete records of the own set (tombstones)")
    p.add_argument(
        "identifiers",
        nargs="+",
        metavar="IDENTIFIER",
        help="an identifier, or - (stdin, one a line)",
    )

    link = sub.add_parser("link", help="manage harvest links").add_subparsers(
        dest="link_command", required=True, metavar="ACTION"
    )
    p = link.add_parser("add", help="add a link to a peer")
    p.add_argument("name")
    p.add_argument("--url", required=True, help="the peer's OAI-PMH base URL")
    p.add_argument("--set", help="the remote set to harvest (default: the whole catalogue)")
    p.add_argument("--into", help="the local set (default: the remote set's name)")
    p.add_argument("--prefix", default="iso19139", help="metadataPrefix (default iso19139)")
    p.add_argument(
        "--every", type=_DURATION, default="1h", help="incremental interval (default 1h)"
    )
    p.add_argument(
        "--full-every", type=_DURATION, default="7d", help="full re-harvest interval (default 7d)"
    )
    p.add_argument(
        "--overlap",
        type=_DURATION,
        default="0s",
        help="ask from = high-water mark minus this (peers with jittery clocks; default 0s)",
    )
    p.add_argument(
        "--strategy",
        choices=["ListRecords", "ListIdentifiers"],
        default="ListRecords",
        help="ListIdentifiers means ListIdentifiers + GetRecord",
    )
    p.add_argument(
        "--window-slices",
        type=int,
        default=24,
        help="slices of the rolling windowed re-harvest (0: off; default 24)",
    )
    p.add_argument("--disabled", action="store_true", help="add it disabled")
    p.add_argument(
        "--recovery",
        action="store_true",
        help="a recovery link: restores the own set from another GISC",
    )
    p = link.add_parser("list", help="list links and their state")
    p.add_argument("--json", action="store_true")
    p = link.add_parser("remove", help="remove a link (its records stay)")
    p.add_argument("name")
    p = link.add_parser("set", help="change a link; a new peer or set resets its high-water mark")
    p.add_argument("name")
    p.add_argument("--url", help="new OAI-PMH base URL of the peer")
    p.add_argument("--set", help="new remote set ('' for the whole catalogue)")
    p.add_argument("--prefix", help="new metadataPrefix (a new peer, set or prefix resets the HWM)")
    p.add_argument(
        "--strategy",
        choices=["ListRecords", "ListIdentifiers"],
        help="ListIdentifiers + GetRecord gets a page's records one by one: a record that "
        "breaks its ListRecords page is then quarantined alone",
    )
    p.add_argument("--every", type=_DURATION, help="new incremental interval")
    p.add_argument("--full-every", type=_DURATION, help="new full re-harvest interval")
    p.add_argument("--overlap", type=_DURATION, help="new overlap")
    p.add_argument("--window-slices", type=int, help="new slices of the windowed re-harvest")
    state = p.add_mutually_exclusive_group()
    state.add_argument("--enable", action="store_true")
    state.add_argument("--disable", action="store_true")

    cli_history.add_parsers(link)
    cli_probe.add_parsers(link)
    cli_checks.add_parsers(sub)
    cli_registry.add_parsers(sub)
    cli_settings.add_parsers(sub)
    return parser


COMMANDS = {
    "migrate": cmd_migrate,
    "provider": cmd_provider,
    "run": cmd_run,
    "harvester": cmd_harvester,
    "harvest": cmd_harvest,
    "ingest": cmd_ingest,
    "delete": cmd_delete,
    "link add": cmd_link_add,
    "link list": cmd_link_list,
    "link remove": cmd_link_remove,
    "link set": cmd_link_set,
    **cli_history.COMMANDS,
    **cli_probe.COMMANDS,
    **cli_checks.COMMANDS,
    **cli_registry.COMMANDS,
    **cli_settings.COMMANDS,
}


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (uvicorn[standard] brings it on Linux and macOS): its
    transports and asyncpg's protocol run several times faster on it than on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _stopped_by_signals(command: Coroutine[Any, Any, int]) -> int:
    """``command``, cancelled by SIGTERM (and SIGHUP, see :func:`stop_signals`) as asyncio's
    runner cancels it on SIGINT: its cleanup runs (a harvest records its run as stopped and gives
    its link's lease back, a check removes its temporary files) where the signal's default would
    end the process on the spot. A service command takes them over for its own graceful stop."""
    task = asyncio.current_task()
    assert task is not None
    for sig in stop_signals():
        if sig is not signal.SIGINT:
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel, sig.name)
    return await command


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:
        for line in explain_settings(exc):
            print(f"wiscat: bad setting {line}", file=sys.stderr)
        return 2
    except ValueError as exc:  # e.g. a .env file that cannot be read as settings
        print(f"wiscat: bad settings: {exc}", file=sys.stderr)
        return 2
    configure(settings.log_level, settings.log_format)
    for line in unknown_settings(os.environ):
        log.warning("%s", line)
    try:
        command = args.command
        if command == "link":
            command = f"link {args.link_command}"
        elif command == "checks":
            command = f"checks {args.checks_command}"
        elif command == "registry":
            command = f"registry {args.registry_command}"
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(_stopped_by_signals(COMMANDS[command](settings, args)))
    except (DatabaseError, CannotListen, KeyFileError) as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
        return 2
    except FAILED as exc:  # not a bug of ours: the reason says it, the traceback is for debugging
        log.debug("stopped by the database", exc_info=exc)
        print(f"wiscat: the database failed: {_said(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        # a file that cannot be written or read (a key file, a report): its name and the reason
        # say it all; the traceback is for debugging
        log.debug("stopped by an OS error", exc_info=exc)
        print(f"wiscat: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError as exc:  # SIGTERM or SIGHUP, once the command had tidied up
        sig = signal.Signals[exc.args[0]] if exc.args else signal.SIGTERM
        print(f"wiscat: stopped by {sig.name}", file=sys.stderr)
        return 128 + sig


if __name__ == "__main__":
    sys.exit(main())
