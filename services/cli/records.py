"""The own set's records from the command line: ``wiscat ingest``, ``delete``, and ``generate``
(sample records to try a node with)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
from pathlib import Path
from typing import Any

from wiscat.cli.arguments import command
from wiscat.cli.database import migrated_pool
from wiscat.cli.output import said
from wiscat.cli.progress import per_second, progress
from wiscat.shared import ingest
from wiscat.shared.db.errors import DatabaseFailed
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.settings import Settings

log = logging.getLogger("wiscat")

# At most this many records a ``generate``: enough for any trial, not a disk filled by a typo.
MAX_GENERATED = 1_000_000


def add_parsers(sub: Any) -> None:
    p = command(
        sub,
        "ingest",
        help="load ISO 19139 files or folders into the own set",
        handler=cmd_ingest,
        examples=[
            "wiscat ingest records/",
            "wiscat ingest a.xml b.xml",
            "curl -s https://example.org/record.xml | wiscat ingest -",
        ],
        exits={
            0: "every file was stored (added, updated or unchanged)",
            1: "some files were refused (each named on stderr with its reason); the others "
            "were stored",
            2: "a path does not exist, '-' cannot be read, or the database failed (what was "
            "stored before stays stored)",
        },
    )
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="a file, a folder (its *.xml), or - (stdin)"
    )
    p = command(
        sub,
        "delete",
        help="delete records of the own set (tombstones)",
        handler=cmd_delete,
        examples=[
            "wiscat delete urn:x-wmo:md:int.wmo.wis::xx.synop.0",
            "cut -f1 gone.txt | wiscat delete -",
        ],
        exits={
            0: "every identifier was deleted",
            1: "some identifiers had no live record in the own set (named on stderr)",
            2: "'-' cannot be read, or the database could not be used",
        },
    )
    p.add_argument(
        "identifiers",
        nargs="+",
        metavar="IDENTIFIER",
        help="an identifier, or - (stdin, one a line)",
    )
    p = command(
        sub,
        "generate",
        help="write N sample WMO Core 1.3 records (ISO 19139) into a folder, to try "
        "`wiscat ingest` and a harvest with; the same N gives the same files",
        handler=cmd_generate,
        examples=["wiscat generate 50 samples/ && wiscat ingest samples/"],
        exits={
            0: "the records were written",
            1: "a file of that name exists in the folder: nothing was written",
            2: "bad arguments, or the folder cannot be written",
        },
    )
    p.add_argument("count", type=_record_count, metavar="N", help="how many records")
    p.add_argument("folder", type=Path, metavar="DIR", help="the folder (made if need be)")
    p.add_argument(
        "--start", type=_record_count, default=0, metavar="K", help="number the records from K"
    )
    p.add_argument(
        "--centre",
        default="xx",
        type=_centre,
        help="the centre the identifiers name (default xx: urn:x-wmo:md:int.wmo.wis::xx....)",
    )


def _record_count(value: str) -> int:
    if not value.isdigit() or int(value) > MAX_GENERATED:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number, 0 to {MAX_GENERATED}")
    return int(value)


def _centre(value: str) -> str:
    if not value.isascii() or not value.isalnum() or len(value) > 20:
        raise argparse.ArgumentTypeError(f"{value!r}: letters and digits, at most 20")
    return value.lower()


async def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat ingest``: load ISO 19139 files or folders into the own set."""
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if str(p) != ingest.STDIN and not p.exists()]
    if missing:
        print(f"no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if ingest.STDIN in args.paths and (refused := _stdin_refused(args.paths, "a record")):
        return refused
    report = ingest.IngestReport()
    failed: str | None = None
    async with (
        migrated_pool(settings, max_size=2) as pool,
        progress(settings.progress_seconds, functools.partial(_ingest_progress, report)),
    ):
        try:
            await ingest.ingest_paths(pool, settings.own_set, paths, report)
        except DatabaseFailed as exc:  # a file's own errors are the report's
            log.debug("ingest stopped by the database", exc_info=exc)
            failed = f"the database failed during the ingest: {said(exc)}"
        except asyncio.CancelledError:  # Ctrl-C, SIGTERM, a closed terminal
            _print_ingest_stopped(settings, report, "the ingest was asked to stop")
            raise
    if failed is not None:
        # told once the pool is closed: what it logs as it gives up comes before, not after
        _print_ingest_stopped(settings, report, failed)
        return 2
    _print_ingest(settings, report)
    return 1 if report.refused or report.older else 0


def _ingest_progress(report: ingest.IngestReport, seconds: float) -> str:
    """A progress line: "ingest: read 41,200 of 100,000 files (1,840 a second), stored 41,000,
    bad 3"."""
    if report.files is None:
        return "ingest: listing the files"
    stored = sum(report.counts.values())
    return (
        f"ingest: read {report.read:,} of {report.files:,} files "
        f"({per_second(report.read, seconds)}), stored {stored:,}, bad {len(report.refused):,}"
    )


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


def _print_ingest(settings: Settings, report: ingest.IngestReport) -> None:
    for path, reason in report.refused:
        print(f"bad: {path}: {reason}", file=sys.stderr)
    for path, reason in report.older:
        print(f"refused: {path}: {reason}", file=sys.stderr)
    print(f"{settings.own_set}: {report.summary()}")


async def cmd_delete(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat delete``: delete records of the own set (tombstones)."""
    identifiers = list(args.identifiers)
    if ingest.STDIN in identifiers:  # one identifier a line: more than a command line holds
        if refused := _stdin_refused(identifiers, "identifiers (one a line)"):
            return refused
        piped = [line.strip() for line in sys.stdin.read().splitlines()]
        identifiers = [i for i in identifiers if i != ingest.STDIN] + [i for i in piped if i]
    async with migrated_pool(settings, max_size=2) as pool:
        result = await ingest.delete_local(pool, settings.own_set, identifiers)
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


def sample_file_name(n: int, centre: str) -> str:
    """The file ``generate`` writes record ``n`` of ``centre`` to."""
    return f"{centre}-{n:07d}.xml"


async def cmd_generate(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat generate``: write N sample WMO Core 1.3 records (ISO 19139) into a folder, to try
    `wiscat ingest` and a harvest with; the same N gives the same files."""
    return await asyncio.to_thread(_generate, args)


def _generate(args: argparse.Namespace) -> int:
    folder: Path = args.folder
    numbers = range(args.start, args.start + args.count)
    names = [sample_file_name(n, args.centre) for n in numbers]
    if folder.is_dir() and (taken := [name for name in names if (folder / name).exists()]):
        more = f" and {len(taken) - 1} more" if len(taken) > 1 else ""
        print(
            f"wiscat: {folder / taken[0]}{more} exist(s); nothing written (choose another "
            "folder, or --start past them)",
            file=sys.stderr,
        )
        return 1
    folder.mkdir(parents=True, exist_ok=True)
    for n, name in zip(numbers, names, strict=True):
        # written whole, then renamed: an interrupted run leaves no half record for an ingest
        target = folder / name
        part = folder / f".{name}.part"
        part.write_bytes(generate_record(n, centre=args.centre))
        os.replace(part, target)
    if args.count:
        first, last = (
            identifier_for(numbers[0], args.centre),
            identifier_for(numbers[-1], args.centre),
        )
        print(f"wrote {args.count} record(s) to {folder} ({first} .. {last})")
    else:
        print(f"wrote 0 records to {folder}")
    print(f"load them into the own set: wiscat ingest {folder}")
    return 0
