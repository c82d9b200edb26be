"""``wiscat wis2 ...``: the node's records as WIS 2.0 sees them. ``render`` prints one stored
record as WCMP2 (docs/wis2.md) with its conversion report: what was guessed, what was dropped,
and why it cannot be announced."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from wiscat.cli.arguments import command, group
from wiscat.cli.database import migrated_pool
from wiscat.shared.settings import Settings
from wiscat.shared.wcmp2.validation import SCHEMA_FILE, load_schema, schema_errors

# The outbox and the conversion (with its vocabularies and URI grammar) are imported by the
# commands that use them: every other command starts without them.

# the exit status of an identifier that names no live record: a bad argument
NO_SUCH_RECORD = 2


def add_parsers(sub: Any) -> None:
    wis2 = group(
        sub,
        "wis2",
        help="the records as WIS 2.0 discovery metadata (WCMP2)",
        examples=["wiscat wis2 render urn:x-wmo:md:int.wmo.wis::xx.synop.0"],
    )
    p = command(
        wis2,
        "render",
        help="print a stored record as WCMP2 JSON (stdout) and its conversion report (stderr)",
        handler=cmd_wis2_render,
        examples=[
            "wiscat wis2 render urn:x-wmo:md:int.wmo.wis::xx.synop.0",
            "wiscat wis2 render urn:x-wmo:md:int.wmo.wis::xx.synop.0 --json | jq .report",
            "wiscat wis2 render ID --schema wcmp2-bundled.json",
        ],
        exits={
            0: "the record is a valid WCMP2 record",
            1: "the record cannot be made valid (the reasons on stderr)",
            2: "no live record has that identifier, the schema cannot be read, or a bad argument",
        },
    )
    p.add_argument("identifier", metavar="IDENTIFIER", help="the record's fileIdentifier")
    p.add_argument(
        "--schema",
        type=Path,
        metavar="FILE",
        help=f"WMO's WCMP2 JSON schema (wcmp2-bundled.json); default: {SCHEMA_FILE}, where "
        "`pywcmp bundle sync` puts it, when it is there",
    )
    p.add_argument("--json", action="store_true", help="one JSON object: record and report")
    p = command(
        wis2,
        "status",
        help="what is announced, pending, refused, and the records that cannot be made valid",
        handler=cmd_wis2_status,
        examples=["wiscat wis2 status", "wiscat wis2 status --json | jq .failing_messages"],
        exits={0: "nothing refused or failing", 1: "messages are failing (their errors shown)"},
    )
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument(
        "--limit", type=int, default=20, help="failing messages and invalid records shown"
    )
    p = command(
        wis2,
        "republish",
        help="render what changed, then queue an update message of every announced record (or "
        "of those named); the harvester sends them",
        handler=cmd_wis2_republish,
        examples=["wiscat wis2 republish", "wiscat wis2 republish urn:wmo:md:de-dwd:synop.0"],
        exits={0: "queued", 2: "an ID names no announced record, or WIS2_CENTRES is unset"},
    )
    p.add_argument(
        "ids", nargs="*", metavar="ID", help="a fileIdentifier or WCMP2 id (none: every record)"
    )


async def cmd_wis2_render(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat wis2 render``: print a stored record as WCMP2 and its conversion report."""
    from wiscat.shared.db import records as records_store
    from wiscat.shared.iso19139 import RecordError
    from wiscat.shared.wcmp2.convert import convert

    schema_path: Path | None = args.schema
    if schema_path is None and SCHEMA_FILE.expanduser().is_file():
        schema_path = SCHEMA_FILE
    validator = None
    if schema_path is not None:
        try:
            validator = load_schema(schema_path)
        except (OSError, ValueError) as exc:
            print(f"wiscat: cannot read the WCMP2 schema {schema_path}: {exc}", file=sys.stderr)
            return 2
    async with migrated_pool(settings, max_size=1) as pool:
        stored = await records_store.get_record(pool, args.identifier)
    if stored is None or stored.deleted or stored.xml is None:
        said = "is deleted: nothing to render" if stored else "names no record here"
        print(f"wiscat: {args.identifier!r} {said}", file=sys.stderr)
        return NO_SUCH_RECORD
    try:
        conversion = convert(stored.xml, settings.wis2_centres, oai_base_url=settings.base_url)
    except RecordError as exc:  # stored by an older version, or by SQL
        print(f"wiscat: the stored record is no ISO 19139 record: {exc}", file=sys.stderr)
        return 1
    report = conversion.report()
    if validator is not None:
        errors = schema_errors(conversion.record, validator)
        report["invalid"] += errors
        report["valid"] = report["valid"] and not errors
    report["schema"] = str(schema_path) if schema_path else None
    if args.json:
        print(json.dumps({"record": conversion.record, "report": report}, indent=2))
    else:
        print(json.dumps(conversion.record, indent=2, ensure_ascii=False))
    for line in _report_lines(report):
        print(line, file=sys.stderr)
    return 0 if report["valid"] else 1


async def cmd_wis2_status(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat wis2 status``: counts, failing messages with their errors, invalid records."""
    from wiscat.shared.db import wis2 as outbox

    async with migrated_pool(settings, max_size=1) as pool:
        status = await outbox.status(pool, args.limit)
    if args.json:
        print(json.dumps(status, indent=2, default=str))
        return 1 if status["failing"] else 0
    print(f"broker:     {settings.wis2_broker_url or '(unset: nothing is announced)'}")
    print(f"centres:    {'; '.join(str(r) for r in settings.wis2_centres) or '(unset)'}")
    print(f"announced:  {status['announced']} records ({status['deleted']} deleted)")
    print(f"pending:    {status['pending']} messages, oldest {status['oldest_pending'] or '-'}")
    print(f"failing:    {status['failing']} messages")
    print(f"invalid:    {status['invalid']} records (never announced)")
    print(f"last sent:  {status['last_sent'] or 'never'}")
    print(f"rendered up to: {status['cursor'] or 'nothing yet'}")
    for row in status["failing_messages"]:
        print(
            f"  failing {row['relation']} {row['wcmp2_id']} ({row['attempts']} attempts): "
            f"{row['last_error']}"
        )
    for row in status["invalid_records"]:
        print(f"  invalid {row['identifier']}: {'; '.join(row['reasons'])}")
    return 1 if status["failing"] else 0


async def cmd_wis2_republish(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat wis2 republish``: render, then queue updates of the records named (or all)."""
    from wiscat.shared.db import wis2 as outbox

    if not settings.wis2_centres:
        print("wiscat: WISCAT_WIS2_CENTRES is unset: this node announces nothing", file=sys.stderr)
        return 2
    how = outbox.Rendering(
        settings.own_set,
        settings.wis2_centres,
        settings.base_url,
        settle_seconds=settings.settle_seconds,
    )
    async with migrated_pool(settings, max_size=2) as pool:
        await outbox.render(pool, how)
        queued = await outbox.queue_updates(pool, daily=False, limit=0, only=args.ids or None)
    if args.ids and queued < len(args.ids):
        print(
            f"wiscat: queued {queued} of {len(args.ids)}: the others name no announced record",
            file=sys.stderr,
        )
        return 2
    print(f"queued {queued} update messages; the harvester sends them")
    return 0


def _report_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"{report['fileIdentifier']} as {report['id'] or '(no WCMP2 id)'}"]
    lines += [f"  guessed: {line}" for line in report["guessed"]]
    lines += [f"  dropped: {line}" for line in report["dropped"]]
    if report["schema"] is None:
        lines.append(
            f"  schema: not checked (no WMO schema at {SCHEMA_FILE}; give one with --schema)"
        )
    lines += [f"  cannot be announced: {line}" for line in report["invalid"]]
    lines.append("  valid WCMP2" if report["valid"] else "  NOT a valid WCMP2 record")
    return lines
