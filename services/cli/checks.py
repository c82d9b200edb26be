"""``wiscat check`` (one consistency check now) and ``wiscat checks`` (scheduled ones)."""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wiscat.cli.arguments import DURATIONS, argument, command, count, group
from wiscat.cli.database import migrated_pool, node_exists
from wiscat.cli.output import jsonable, show, table, when
from wiscat.cli.progress import per_second, progress
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import refusals as refusal_store
from wiscat.shared.db.pool import Pool
from wiscat.shared.durations import format_duration, parse_duration
from wiscat.shared.linkspec import (
    NAME,
    NAME_RULE,
    LinkSpecError,
    check_base_url,
    check_peer_urls,
    check_set_spec,
)
from wiscat.shared.refusals import explain
from wiscat.shared.settings import Settings
from wiscat.shared.text import clipped

if TYPE_CHECKING:
    from wiscat.harvester.check import Checker, CheckReport

_url = argument(check_base_url)
_set = argument(functools.partial(check_set_spec, option="set"))


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 86400:  # nan and inf fail too
        raise argparse.ArgumentTypeError(f"{value!r}: seconds, more than 0 and at most 86400")
    return seconds


def _sample(value: str) -> int:
    sample = count(value)
    if sample > check_store.MAX_SAMPLE:
        raise argparse.ArgumentTypeError(f"{value!r}: at most {check_store.MAX_SAMPLE}")
    return sample


@argument
def _every(value: str) -> timedelta:
    every = parse_duration(value)
    if every < check_store.MIN_EVERY:
        raise ValueError(
            f"{value!r}: at least {format_duration(check_store.MIN_EVERY)} between runs"
        )
    return every


def _name(value: str) -> str:
    if not NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{clipped(value, 60)!r}: a check name is {NAME_RULE}")
    return value


PEERS_HELP = "the OAI-PMH base URL of each node that harvests the set"

# The addresses in the examples.
_SOURCE = "https://offenbach.example.org/oai"
_PEER = "https://gisc.example.org/oai"
# Identifiers looked up at once for the notes of `check --details`.
NOTE_BATCH = 5000


def add_parsers(sub: Any) -> None:
    p = command(
        sub,
        "check",
        help="compare a set between its source and peers (ListIdentifiers); exit 0 consistent, "
        "1 inconsistent, 2 could not check",
        handler=cmd_check,
        examples=[
            f"wiscat check --set WIS-GISC-Offenbach --source {_SOURCE} {_PEER}",
            f"wiscat check --set WIS-GISC-Offenbach --source {_SOURCE} {_PEER} --sample 100 "
            "--json report.json",
        ],
        exits={
            0: "consistent: every peer holds what the source lists",
            1: "inconsistent: a peer misses, keeps or differs on records (see the table)",
            2: "could not check: bad arguments, or the source or a peer could not be listed",
        },
    )
    _what_to_compare(p)
    p.add_argument("--json", type=Path, metavar="FILE", help="write the whole report as JSON")
    p.add_argument(
        "--details",
        action="store_true",
        help="list every item of every category; a missing identifier that a link "
        "from the source refused here gets the reason",
    )
    p.add_argument(
        "--sample",
        type=_sample,
        default=0,
        metavar="N",
        help="also compare the content of N random records (GetRecord, canonical hash)",
    )
    p.add_argument("--prefix", default="iso19139", help="metadataPrefix (default iso19139)")
    p.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds to wait for a response (default WISCAT_HARVEST_TIMEOUT_SECONDS, 120)",
    )
    p.add_argument(
        "--retries",
        type=count,
        help="retries of a failing request (default WISCAT_HARVEST_MAX_RETRIES, 5)",
    )

    checks = group(
        sub,
        "checks",
        help="manage scheduled consistency checks",
        examples=[
            f"wiscat checks add offenbach --set WIS-GISC-Offenbach --source {_SOURCE} {_PEER}",
            "wiscat checks reports offenbach",
        ],
    )
    p = command(
        checks,
        "add",
        help="add (or replace) a check the harvester runs on a schedule",
        handler=cmd_checks_add,
        examples=[
            f"wiscat checks add offenbach --set WIS-GISC-Offenbach --source {_SOURCE} {_PEER} "
            "--every 6h"
        ],
        exits={0: "the check was saved", 2: "bad arguments, or the database could not be used"},
    )
    p.add_argument("name", type=_name, help="the check's name (a check of that name is replaced)")
    _what_to_compare(p)
    p.add_argument(
        "--every",
        type=_every,
        default="1d",
        help=f"interval, {DURATIONS} (default 1d, at least 1m)",
    )
    p.add_argument(
        "--sample",
        type=_sample,
        default=0,
        metavar="N",
        help="also compare the content of N random records each run (default 0: none)",
    )
    p.add_argument(
        "--disabled", action="store_true", help="save it disabled: the harvester does not run it"
    )
    p = command(
        checks,
        "list",
        help="list scheduled checks and their latest outcome",
        handler=cmd_checks_list,
        examples=["wiscat checks list", "wiscat checks list --json"],
        exits={0: "listed (none is not an error)"},
    )
    p.add_argument("--json", action="store_true", help="the checks as a JSON list")
    p = command(
        checks,
        "remove",
        help="remove a scheduled check (its reports stay)",
        handler=cmd_checks_remove,
        examples=["wiscat checks remove offenbach"],
        exits={
            0: "the check was removed",
            2: "no check of that name, a bad argument or setting, or the database could not "
            "be used",
        },
    )
    p.add_argument("name", help="the check's name")
    p = command(
        checks,
        "reports",
        help="the latest stored reports",
        handler=cmd_checks_reports,
        examples=["wiscat checks reports", "wiscat checks reports offenbach --limit 3 --json"],
        exits={0: "listed (none is not an error)"},
    )
    p.add_argument("name", nargs="?", help="the check's name (default: every check)")
    p.add_argument("--limit", type=count, default=10, help="how many (default 10)")
    p.add_argument("--json", action="store_true", help="the reports as a JSON list")


def _refused_peers(args: argparse.Namespace) -> int:
    """2 (after saying why) when the peers cannot make a useful check, else 0."""
    try:
        check_peer_urls(args.source, args.peers)
    except LinkSpecError as exc:
        print(f"wiscat: check refused: {exc}", file=sys.stderr)
        return 2
    return 0


async def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat check``: compare a set between its source and peers (ListIdentifiers); exit 0
    consistent, 1 inconsistent, 2 could not check."""
    from wiscat.harvester.check import Checker, CheckRequest
    from wiscat.harvester.check_output import json_target_problem, write_json
    from wiscat.harvester.client import OAIClient
    from wiscat.harvester.service import client_settings

    if refused := _refused_peers(args):
        return refused
    if args.json and (problem := json_target_problem(args.json)):
        print(f"wiscat: check refused: --json {args.json}: {problem}", file=sys.stderr)
        return 2
    config = client_settings(settings)
    if args.timeout is not None:
        config = replace(config, read_timeout=args.timeout)
    if args.retries is not None:
        config = replace(config, max_retries=args.retries)
    request = CheckRequest(
        set_spec=args.set_spec,
        source=args.source,
        peers=tuple(args.peers),
        metadata_prefix=args.prefix,
        sample=args.sample,
    )
    async with OAIClient.session(config) as session:
        checker = Checker(OAIClient(session, config), request)
        try:
            async with progress(settings.progress_seconds, functools.partial(_progress, checker)):
                report = await checker.run()
        except BaseException:
            checker.close()
            raise
    notes = await _refusal_notes(settings, report, args.source) if args.details else {}
    with checker:
        for line in _check_lines(report, details=args.details, notes=notes):
            print(line)
        if args.json:
            write_json(report, args.json)
            print(f"report written to {args.json}")
    return report.exit_code


def _progress(checker: Checker, seconds: float) -> str:
    """A progress line: "check: listing: 41,200 identifiers listed (URL 20,600, URL 20,600),
    8,240 a second"."""
    listed = sum(spill.count for _, spill in checker.listing)
    return f"check: {checker.progress()}, {per_second(listed, seconds)}"


# The summary's column of each category.
_COLUMNS = {
    "missing": "MISSING",
    "extra": "EXTRA",
    "outdated": "OUTDATED",
    "copied_datestamp": "COPIED",
    "duplicates": "DUPL.",
    "altered": "ALTERED",
    "datestamp_only": "DS-ONLY",
}


async def _refusal_notes(settings: Settings, report: CheckReport, source: str) -> dict[str, str]:
    """Why this node refused identifiers that a peer misses, where a link from the source keeps
    a refusal of them (``wiscat link refused``): identifier -> the reason. A check run away
    from a node (it needs none: it reads ListIdentifiers alone) has no refusals to tell."""
    notes: dict[str, str] = {}
    if not node_exists(settings):
        return notes
    batches = (
        found.items() for peer in report.peers for name, found in peer.findings.items()
        if name == "missing" and found.count
    )  # fmt: skip
    async with migrated_pool(settings) as pool:
        for items in batches:
            batch: list[str] = []
            for item in items:
                batch.append(item["identifier"])
                if len(batch) == NOTE_BATCH:
                    notes.update(await _notes_of(pool, settings, batch, source))
                    batch = []
            if batch:
                notes.update(await _notes_of(pool, settings, batch, source))
    return notes


async def _notes_of(
    pool: Pool, settings: Settings, identifiers: list[str], source: str
) -> dict[str, str]:
    found = await refusal_store.refusals_of(pool, identifiers, source)
    return {
        identifier: f"refused here by link {row['link']} (run {row['run_id'] or '-'}, "
        f"{when(row['refused_at'])}): {explain(row['reason'], settings.own_set)}"
        for identifier, (row, *_) in found.items()
    }


def _what_to_compare(p: argparse.ArgumentParser) -> None:
    """The arguments ``check`` and ``checks add`` share: the set, its source and the peers."""
    p.add_argument(
        "--set", required=True, dest="set_spec", type=_set, metavar="SET", help="the set to compare"
    )
    p.add_argument(
        "--source",
        required=True,
        type=_url,
        metavar="URL",
        help="the OAI-PMH base URL of the set's authoritative provider",
    )
    p.add_argument("peers", nargs="+", type=_url, metavar="PEER_URL", help=PEERS_HELP)


def _check_lines(
    report: CheckReport, *, details: bool, notes: Mapping[str, str] | None = None
) -> Iterator[str]:
    """The source's line, a row per peer with a column per category, the outcome; with
    ``details``, every item."""
    from wiscat.harvester.check import DATESTAMP_CATEGORIES, SAMPLE_CATEGORIES
    from wiscat.harvester.check_output import detail_lines, source_line

    source = report.source
    yield f"set {report.set_spec}, source {source.url}: " + source_line(source)
    categories = DATESTAMP_CATEGORIES + (SAMPLE_CATEGORIES if report.sample else ())
    rows = []
    for peer in report.peers:
        listing = peer.listing
        if not peer.checked:
            status = f"could not check: {listing.reason}"
        elif source.status != "ok":
            status = "not compared (the source could not be listed)"
        else:
            status = "consistent" if peer.consistent else "INCONSISTENT"
        if peer.checked and source.status == "ok":
            counts = [f"{listing.identifiers:,}"]
            counts += [f"{peer.findings[name].count:,}" for name in categories]
        else:
            counts = ["-"] * (1 + len(categories))
        rows.append([listing.url, *counts, status])
    headers = ["PEER", "LISTED", *(_COLUMNS[name] for name in categories), "STATUS"]
    yield from table(headers, rows, right=range(1, 2 + len(categories)))
    if report.sample:
        yield f"content compared for a sample of {report.sample} live identifier(s)"
    yield f"outcome: {report.outcome}"
    if details:
        yield from detail_lines(report, notes)


async def cmd_checks_add(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat checks add``: add (or replace) a check the harvester runs on a schedule."""
    if refused := _refused_peers(args):
        return refused
    async with migrated_pool(settings) as pool:
        check = await check_store.save_check(
            pool,
            args.name,
            args.set_spec,
            args.source,
            list(args.peers),
            sample=args.sample,
            every=args.every,
            enabled=not args.disabled,
        )
    print(
        f"check {check.name}: set {check.set_spec} from {check.source_url} against "
        f"{len(check.peer_urls)} peer(s), every {format_duration(check.every)}"
    )
    return 0


async def cmd_checks_list(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat checks list``: list scheduled checks and their latest outcome."""
    async with migrated_pool(settings) as pool:
        found = await check_store.all_checks(pool)
    if args.json:
        out = [{**check.as_json(), **jsonable(last)} for check, last in found]
        print(json.dumps(out, indent=2))
        return 0
    if not found:
        print("no checks")
        return 0
    rows = []
    for check, last in found:
        rows.append(
            [
                check.name,
                check.set_spec,
                format_duration(check.every),
                when(last["last_run_at"]),
                last["last_outcome"] or "-",
                " ".join(check.peer_urls),
            ]
        )
    print("\n".join(table(["NAME", "SET", "EVERY", "LAST RUN", "OUTCOME", "PEERS"], rows)))
    return 0


async def cmd_checks_remove(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat checks remove``: remove a scheduled check (its reports stay)."""
    async with migrated_pool(settings) as pool:
        removed = await check_store.remove_check(pool, args.name)
    if not removed:
        print(f"wiscat: no check named {args.name!r}", file=sys.stderr)
        return 2
    print(f"removed check {args.name} (its reports stay)")
    return 0


async def cmd_checks_reports(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat checks reports``: the latest stored reports."""
    async with migrated_pool(settings) as pool:
        reports = await check_store.recent_reports(pool, args.name, args.limit)
    return show(reports, args.json, "no reports", _report_lines)


def _report_lines(row: dict[str, Any]) -> Iterator[str]:
    yield (
        f"#{row['id']} {when(row['finished_at'])} {row['check_name'] or '-'} "
        f"{row['set_spec']}: {row['outcome']}"
    )
    for peer in row["report"]["peers"]:
        counts = ", ".join(f"{k} {v}" for k, v in peer["counts"].items() if v)
        state = peer["reason"] if peer["status"] != "ok" else (counts or "consistent")
        yield f"    {peer['url']}: {state}"
