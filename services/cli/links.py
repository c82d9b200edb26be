"""``wiscat link ...``: every action on a harvest link. ``add``, ``list``, ``set`` and
``remove`` manage the links; ``runs`` and ``quarantine`` show what their harvests did and set
aside (as ``GET /admin/runs`` and ``GET /admin/quarantine`` give them); ``test`` asks a link's peer
what its harvests would (:mod:`wiscat.harvester.probe`), before a run finds out."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

from wiscat.cli.arguments import DURATIONS, argument, command, group, limit
from wiscat.cli.database import migrated_pool
from wiscat.cli.link_show import add_parser as add_show_parser
from wiscat.cli.output import show, table, when
from wiscat.shared.db import hints as hint_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import refusals as refusal_store
from wiscat.shared.db.pool import Pool
from wiscat.shared.db.refusals import run_refusals
from wiscat.shared.durations import format_duration, parse_duration
from wiscat.shared.linkspec import LinkSpecError, build_link, changed_link, set_kind
from wiscat.shared.model import IncomingRecord
from wiscat.shared.refusals import explain
from wiscat.shared.refusals import summary as refusal_summary
from wiscat.shared.settings import Settings
from wiscat.shared.urls import safe_url

_DURATION = argument(parse_duration)

# How each harvest strategy is named to an operator.
_BY = {"ListRecords": "ListRecords", "ListIdentifiers": "ListIdentifiers + GetRecord"}

COUNTS = ("added", "updated", "unchanged", "deleted", "refused", "quarantined")

MARKS = {"ok": "ok", "note": "note", "problem": "PROBLEM"}

_NO_LINK = "no link of that name"

# The exit status of a name that names no link: a bad argument, as in ``wiscat harvest``.
NO_SUCH_LINK = 2
_NO_LINK_EXIT = f"{_NO_LINK}, a bad argument or setting, or the database could not be used"


def _id(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) < 2**63:
        raise argparse.ArgumentTypeError(f"{value!r}: a quarantined record's id (a number)")
    return int(value)


def add_parsers(sub: Any) -> None:
    link = group(
        sub,
        "link",
        help="manage harvest links",
        examples=[
            "wiscat link add dwd --url https://offenbach.example.org/oai --set WIS-GISC-Offenbach",
            "wiscat link list",
            "wiscat link runs dwd",
        ],
    )
    _add_manage_parsers(link)
    add_show_parser(link)
    _add_history_parsers(link)
    p = command(
        link,
        "test",
        help="ask the link's peer what a harvest would (Identify, ListMetadataFormats, "
        "ListSets, a first ListIdentifiers page, one GetRecord) and store nothing; exit 1 on a "
        "problem",
        handler=cmd_link_test,
        examples=["wiscat link test dwd", "wiscat link test dwd --json"],
        exits={0: "no problem found (notes are advice)", 1: "a problem found", 2: _NO_LINK_EXIT},
    )
    p.add_argument("name", help="the link's name")
    p.add_argument("--json", action="store_true", help="the findings as a JSON list")


def _add_manage_parsers(link: Any) -> None:
    p = command(
        link,
        "add",
        help="add a link to a peer",
        handler=cmd_link_add,
        examples=[
            "wiscat link add dwd --url https://offenbach.example.org/oai --set WIS-GISC-Offenbach",
            "wiscat link add tokyo --url https://tokyo.example.org/oai --into WIS-GISC-Tokyo "
            "--every 15m --full-every 1d",
        ],
        exits={0: "the link was added", 1: "a link of that name exists", 2: "a bad option"},
    )
    p.add_argument("name", help="the link's name: how commands, logs and metrics call it")
    p.add_argument("--url", required=True, help="the peer's OAI-PMH base URL")
    p.add_argument("--set", help="the remote set to harvest (default: the whole catalogue)")
    p.add_argument(
        "--into",
        help="the local set (default: the remote set's name; required without --set)",
    )
    p.add_argument("--prefix", default="iso19139", help="metadataPrefix (default iso19139)")
    p.add_argument(
        "--every",
        type=_DURATION,
        default="1h",
        help=f"incremental interval, {DURATIONS} (default 1h)",
    )
    p.add_argument(
        "--full-every",
        type=_DURATION,
        default="7d",
        help=f"full re-harvest interval, {DURATIONS} (default 7d)",
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
        "--no-hints",
        action="store_true",
        help="do not subscribe to the peer's change hints: its schedule alone runs it",
    )
    p.add_argument(
        "--recovery",
        action="store_true",
        help="a recovery link: restores the own set from another GISC",
    )
    p = command(
        link,
        "list",
        help="list links and their state",
        handler=cmd_link_list,
        examples=["wiscat link list", "wiscat link list --json"],
        exits={0: "listed (none is not an error)"},
    )
    p.add_argument("--json", action="store_true", help="the links as a JSON list")
    p = command(
        link,
        "remove",
        help="remove a link (its records stay)",
        handler=cmd_link_remove,
        examples=["wiscat link remove dwd"],
        exits={0: "the link was removed", 2: _NO_LINK_EXIT},
    )
    p.add_argument("name", help="the link's name")
    p = command(
        link,
        "set",
        help="change a link; a new peer or set resets its high-water mark",
        handler=cmd_link_set,
        examples=["wiscat link set dwd --every 30m", "wiscat link set dwd --disable"],
        exits={
            0: "the link was changed",
            2: f"{_NO_LINK}, nothing to change, a bad option, or a change its stored records "
            "forbid",
        },
    )
    p.add_argument("name", help="the link's name")
    p.add_argument("--url", help="new OAI-PMH base URL of the peer")
    p.add_argument("--set", help="new remote set ('' for the whole catalogue)")
    p.add_argument("--prefix", help="new metadataPrefix (a new peer, set or prefix resets the HWM)")
    p.add_argument(
        "--strategy",
        choices=["ListRecords", "ListIdentifiers"],
        help="ListIdentifiers + GetRecord gets a page's records one by one: a record that "
        "breaks its ListRecords page is then quarantined alone",
    )
    p.add_argument("--every", type=_DURATION, help=f"new incremental interval, {DURATIONS}")
    p.add_argument("--full-every", type=_DURATION, help="new full re-harvest interval")
    p.add_argument("--overlap", type=_DURATION, help="new overlap")
    p.add_argument("--window-slices", type=int, help="new slices of the windowed re-harvest")
    hints = p.add_mutually_exclusive_group()
    hints.add_argument(
        "--hints",
        action="store_true",
        default=None,
        help="subscribe to the peer's change hints (the default)",
    )
    hints.add_argument(
        "--no-hints",
        dest="hints",
        action="store_false",
        help="do not: its schedule alone runs it",
    )
    state = p.add_mutually_exclusive_group()
    state.add_argument("--enable", action="store_true", help="let the harvester run it again")
    state.add_argument(
        "--disable", action="store_true", help="keep the harvester from running it (it stays)"
    )


def _add_history_parsers(link: Any) -> None:
    p = command(
        link,
        "refused",
        help="the records the link's harvests refused (the latest refusal of each), with why",
        handler=cmd_link_refused,
        examples=["wiscat link refused dwd", "wiscat link refused dwd --json"],
        exits={0: "listed (none is not an error)", 1: _NO_LINK},
    )
    p.add_argument("name", help="the link's name")
    p.add_argument("--limit", type=limit, default=100, help="how many (default 100)")
    p.add_argument("--json", action="store_true", help="the refusals as a JSON list")
    p = command(
        link,
        "runs",
        help="the latest harvest runs (of one link, or of all)",
        handler=cmd_link_runs,
        examples=["wiscat link runs", "wiscat link runs dwd --limit 5"],
        exits={0: "listed (none is not an error)", 2: _NO_LINK_EXIT},
    )
    p.add_argument("name", nargs="?", help="the link's name (default: every link)")
    p.add_argument("--limit", type=limit, default=20, help="how many (default 20)")
    p.add_argument("--json", action="store_true", help="the runs as a JSON list")
    p = command(
        link,
        "quarantine",
        help="the latest quarantined records with their reasons; --raw ID writes one's bytes out",
        handler=cmd_link_quarantine,
        examples=["wiscat link quarantine dwd", "wiscat link quarantine --raw 42 > record.xml"],
        exits={
            0: "listed (none is not an error), or the record written",
            2: f"{_NO_LINK}, no quarantined record ID, a bad argument or setting, or the "
            "database could not be used",
        },
    )
    p.add_argument("name", nargs="?", help="the link's name (default: every link)")
    p.add_argument("--limit", type=limit, default=20, help="how many (default 20)")
    p.add_argument("--json", action="store_true", help="the records as a JSON list")
    p.add_argument(
        "--raw",
        type=_id,
        metavar="ID",
        help="write the stored bytes of quarantined record ID to stdout: the record as read "
        "from its page (or the peer's whole answer, where that could not be read)",
    )


async def cmd_link_add(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link add``: add a link to a peer."""
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
            hints=not args.no_hints,
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


async def cmd_link_list(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link list``: list links and their state."""
    async with migrated_pool(settings) as pool:
        found = await link_store.all_links(pool)
        streams = await hint_store.all_streams(pool)
    hinted = {
        link.name: hint_store.subscription(link, streams.get(link.base_url), settings.hints)
        for link in found
    }
    if args.json:
        print(
            json.dumps(
                [{**link.as_json(), "subscription": hinted[link.name]} for link in found],
                indent=2,
            )
        )
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
            hinted[link.name]["state"],
            safe_url(link.base_url)
            + (f" prefix {link.metadata_prefix}" if link.metadata_prefix != "iso19139" else "")
            + (f" by {_BY[link.strategy]}" if link.strategy != "ListRecords" else "")
            + (f"  [{link.last_error}]" if link.last_error else ""),
        ]
        for link in found
    ]
    headers = [
        "NAME",
        "ENABLED",
        "SET",
        "INTO",
        "EVERY/FULL",
        "HWM",
        "LAST OK",
        "HINTS",
        "URL / LAST ERROR",
    ]
    print("\n".join(table(headers, rows)))
    return 0


async def cmd_link_remove(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link remove``: remove a link (its records stay)."""
    async with migrated_pool(settings) as pool:
        removed = await link_store.remove_link(pool, args.name)
    if not removed:
        print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
        return NO_SUCH_LINK
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
    "hints",
)


async def cmd_link_set(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link set``: change a link; a new peer or set resets its high-water mark."""
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
            return NO_SUCH_LINK
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
                hints=args.hints,
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
            return NO_SUCH_LINK
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
        if "hints" in changed:
            print(
                f"link {link.name} "
                + ("takes its peer's change hints" if link.hints else "takes no change hints")
            )
        if args.enable or args.disable:
            await link_store.set_enabled(pool, link.name, bool(args.enable))
            print(f"link {link.name} {'enabled' if args.enable else 'disabled'}")
    return 0


async def _no_such_link(pool: Pool, name: str | None) -> bool:
    if name is None or await link_store.get_link(pool, name) is not None:
        return False
    print(f"wiscat: no link named {name!r}", file=sys.stderr)
    return True


def _run_lines(run: dict[str, Any]) -> Iterator[str]:
    took = "running"
    if run["finished_at"] is not None:
        took = f"{(run['finished_at'] - run['started_at']).total_seconds():.1f} s"
    counts = ", ".join(
        refusal_summary(run[name], run_refusals(run))
        if name == "refused"
        else f"{name} {run[name]}"
        for name in COUNTS
        if run[name]
    )
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
    """``wiscat link runs``: the latest harvest runs (of one link, or of all)."""
    async with migrated_pool(settings) as pool:
        if await _no_such_link(pool, args.name):
            return NO_SUCH_LINK
        runs = await link_store.recent_runs(pool, args.name, args.limit)
    return show(runs, args.json, "no runs", _run_lines)


async def cmd_link_refused(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link refused``: the records a link's harvests refused, with their reasons."""
    async with migrated_pool(settings) as pool:
        if await _no_such_link(pool, args.name):
            return NO_SUCH_LINK
        rows = await refusal_store.refused_of_link(pool, args.name, args.limit)
    for row in rows:
        row["text"] = explain(row["reason"], settings.own_set)
    if args.json or not rows:
        return show(rows, args.json, f"link {args.name}: nothing refused", lambda row: ())
    body = [
        [row["identifier"], str(row["run_id"] or "-"), when(row["refused_at"]), row["text"]]
        for row in rows
    ]
    print("\n".join(table(["IDENTIFIER", "RUN", "WHEN", "REASON"], body)))
    return 0


async def cmd_link_quarantine(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link quarantine``: the latest quarantined records with their reasons; --raw ID
    writes one's bytes out."""
    async with migrated_pool(settings) as pool:
        if args.raw is not None:
            record = await link_store.quarantined_record(pool, args.raw)
            if record is None:
                print(
                    f"wiscat: no quarantined record {args.raw} (purged, or never was)",
                    file=sys.stderr,
                )
                return NO_SUCH_LINK
            sys.stdout.buffer.write(record["raw"])
            sys.stdout.flush()
            return 0
        if await _no_such_link(pool, args.name):
            return NO_SUCH_LINK
        rows = await link_store.recent_quarantine(pool, args.name, args.limit)
    return show(rows, args.json, "nothing quarantined", _quarantined_lines)


async def cmd_link_test(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link test``: ask the link's peer what a harvest would (Identify,
    ListMetadataFormats, ListSets, a first ListIdentifiers page, one GetRecord) and store nothing;
    exit 1 on a problem."""
    from wiscat.harvester.client import OAIClient
    from wiscat.harvester.plan import protected_set
    from wiscat.harvester.probe import Outcome, probe_link
    from wiscat.harvester.service import client_settings
    from wiscat.harvester.writes import would_refuse

    async with migrated_pool(settings) as pool:
        link = await link_store.get_link(pool, args.name)
        if link is None:
            print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
            return NO_SUCH_LINK
        protected = protected_set(link, settings.own_set)

        async def judge(record: IncomingRecord) -> tuple[Outcome, str] | None:
            # the harvester's own write, rolled back: what a run would do with the record now
            assert link is not None
            reason = await would_refuse(pool, link, record, protected)
            if reason is None:
                return None
            # a record of the own set is never the link's; an older copy is only a note
            outcome: Outcome = "problem" if reason in ("own_set", "conflict") else "note"
            return outcome, explain(reason, settings.own_set)

        # one retry at most: an operator waits for the answer, and runs it again if need be
        config = client_settings(settings)
        config = replace(config, max_retries=min(config.max_retries, 1))
        async with OAIClient.session(config) as session:
            findings = await probe_link(OAIClient(session, config), settings, link, judge)
    if args.json:
        print(json.dumps([asdict(finding) for finding in findings], indent=2))
    else:
        print(
            f"link {link.name}: {safe_url(link.base_url)} set={link.remote_set or '(all)'} "
            f"prefix={link.metadata_prefix}"
        )
        rows = [[finding.step, MARKS[finding.outcome], finding.text] for finding in findings]
        print("\n".join(table(["STEP", "RESULT", "FINDING"], rows)))
    return 1 if any(finding.outcome == "problem" for finding in findings) else 0
