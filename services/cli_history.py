"""``wiscat link runs`` and ``wiscat link quarantine``: what the harvests of a link did, and the
records it set aside, as ``GET /admin/runs`` and ``GET /admin/quarantine`` give them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from services.cli_output import show, when
from shared.db import links as link_store
from shared.db.pool import Pool
from shared.settings import Settings

COUNTS = ("added", "updated", "unchanged", "deleted", "refused", "quarantined")


def _limit(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 1000:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number, 1 to 1000")
    return int(value)


def _id(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) < 2**63:
        raise argparse.ArgumentTypeError(f"{value!r}: a quarantined record's id (a number)")
    return int(value)


def add_parsers(link: Any) -> None:
    """Add ``runs`` and ``quarantine`` to the subcommands of ``wiscat link``."""
    p = link.add_parser("runs", help="the latest harvest runs (of one link, or of all)")
    p.add_argument("name", nargs="?")
    p.add_argument("--limit", type=_limit, default=20, help="how many (default 20)")
    p.add_argument("--json", action="store_true")
    p = link.add_parser(
        "quarantine",
        help="the latest quarantined records with their reasons; --raw ID writes one's bytes out",
    )
    p.add_argument("name", nargs="?")
    p.add_argument("--limit", type=_limit, default=20, help="how many (default 20)")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--raw",
        type=_id,
        metavar="ID",
        help="write the stored bytes of quarantined record ID to stdout: the record as read "
        "from its page (or the peer's whole answer, where that could not be read)",
    )


async def _no_such_link(pool: Pool, name: str | None) -> bool:
    if name is None or await link_store.get_link(pool, name) is not None:
        return False
    print(f"wiscat: no link named {name!r}", file=sys.stderr)
    return True


def _run_lines(run: dict[str, Any]) -> Iterator[str]:
    took = "running"
    if run["finished_at"] is not None:
        took = f"{(run['finished_at'] - run['started_at']).total_seconds():.1f} s"
    counts = ", ".join(f"{name} {run[name]}" for name in COUNTS if run[name])
    yield (
        f"#{run['id']} {when(run['started_at'])} {run['link']} {run['mode']}: "
        f"{run['status']} ({took}); pages {run['pages']}" + (f"; {counts}" if counts else "")
    )
    if run["error"]:
        yield f"    {run['error_kind']}: {run['error']}"


def _quarantined_lines(row: dict[str, Any]) -> Iterator[str]:
    page = f" page {row['page']}" if row["page"] is not None else ""
    yield (
        f"#{row['id']} {when(row['received_at'])} {row['link'] or '(a removed link)'}{page} "
        f"{row['identifier'] or '(no identifier)'} ({row['size']} bytes)"
    )
    yield f"    {row['reason']}"


async def cmd_link_runs(settings: Settings, args: argparse.Namespace) -> int:
    from services.cli import migrated_pool

    async with migrated_pool(settings) as pool:
        if await _no_such_link(pool, args.name):
            return 1
        runs = await link_store.recent_runs(pool, args.name, args.limit)
    return show(runs, args.json, "no runs", _run_lines)


async def cmd_link_quarantine(settings: Settings, args: argparse.Namespace) -> int:
    from services.cli import migrated_pool

    async with migrated_pool(settings) as pool:
        if args.raw is not None:
            record = await link_store.quarantined_record(pool, args.raw)
            if record is None:
                print(
                    f"wiscat: no quarantined record {args.raw} (purged, or never was)",
                    file=sys.stderr,
                )
                return 1
            sys.stdout.buffer.write(record["raw"])
            sys.stdout.flush()
            return 0
        if await _no_such_link(pool, args.name):
            return 1
        rows = await link_store.recent_quarantine(pool, args.name, args.limit)
    return show(rows, args.json, "nothing quarantined", _quarantined_lines)


COMMANDS = {"link runs": cmd_link_runs, "link quarantine": cmd_link_quarantine}
