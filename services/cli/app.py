"""The ``wiscat`` command (docs/commands.md): one entry point for every service and operator task.

The parser is built top-down: each command group's module adds its subcommands, each with
``set_defaults(handler=...)``, and :func:`main` calls the handler the arguments chose. No module
of the package imports this one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from pydantic import ValidationError

from wiscat.cli import backup, checks, harvest, links, records, registry, serve, wis2
from wiscat.cli import settings as settings_command
from wiscat.cli.arguments import COMMON_EXITS
from wiscat.cli.output import said
from wiscat.cli.signals import stopped_by_signals
from wiscat.listen import CannotListen
from wiscat.shared.db.errors import DatabaseError, DatabaseFailed
from wiscat.shared.logs import configure
from wiscat.shared.registry.keyfile import KeyFileError
from wiscat.shared.setting_errors import explain as explain_settings
from wiscat.shared.setting_errors import unknown as unknown_settings
from wiscat.shared.settings import Settings
from wiscat.shared.version import VERSION

log = logging.getLogger("wiscat")

_EPILOG = (
    "examples:\n"
    "  wiscat run                          a whole node, embedded PostgreSQL in ./var\n"
    "  wiscat generate 50 samples/         sample records to try it with\n"
    "  wiscat ingest samples/              load them into the own set\n"
    "  wiscat link add dwd --url https://offenbach.example.org/oai --set WIS-GISC-Offenbach\n"
    "  wiscat COMMAND --help               a command's options, examples and exit statuses\n"
    "\n"
    "exit status:\n"
    "  0    done\n"
    "  1    done, with a failure the command names (each command's --help says which)\n"
    + "".join(f"  {code:<4} {meaning}\n" for code, meaning in sorted(COMMON_EXITS.items()))
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wiscat",
        description="WIS catalogue node: OAI-PMH provider, harvester and tools. Settings come "
        "from WISCAT_* environment variables or ./.env.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"wiscat {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_parsers(sub)
    harvest.add_parsers(sub)
    records.add_parsers(sub)
    links.add_parsers(sub)
    checks.add_parsers(sub)
    registry.add_parsers(sub)
    backup.add_parsers(sub)
    wis2.add_parsers(sub)
    settings_command.add_parsers(sub)
    return parser


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (uvicorn[standard] brings it on Linux and macOS): its
    transports and asyncpg's protocol run several times faster on it than on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


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
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(stopped_by_signals(args.handler(settings, args)))
    # before DatabaseError, of which it is one: not a bug of ours, the reason says it, and the
    # traceback is for debugging
    except DatabaseFailed as exc:
        log.debug("stopped by the database", exc_info=exc)
        print(f"wiscat: the database failed: {said(exc)}", file=sys.stderr)
        return 2
    except (DatabaseError, CannotListen, KeyFileError) as exc:
        print(f"wiscat: {exc}", file=sys.stderr)
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
