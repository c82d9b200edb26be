"""What a consistency check prints and writes: the source's line, the detailed lists and the
JSON report (the summary table is the ``wiscat check`` command's), read back from the check's
spools so that a report of any size costs little memory."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from wiscat.harvester.check import CheckReport, ListResult


def source_line(source: ListResult) -> str:
    """What the source's listing found, or why it could not be listed."""
    if source.status != "ok":
        return f"could not be listed: {source.reason}"
    line = (
        f"{source.live:,} live and {source.deleted:,} deleted identifiers in {source.pages} page(s)"
    )
    if source.duplicates:
        line += f", {len(source.duplicates):,} listed more than once"
    return line


def detail_lines(report: CheckReport, notes: Mapping[str, str] | None = None) -> Iterator[str]:
    """Every item of every category of every peer, read back from the spools as the lines are
    written, then the source's duplicates; a missing identifier with a note (why this node
    refused it) gets it on the next line."""
    source = report.source
    notes = notes or {}
    for peer in report.peers:
        for name, found in peer.findings.items():
            if not found.count:
                continue
            yield f"\n{peer.listing.url}: {name} ({found.count:,})"
            for item in found.items():
                yield "  " + _describe(item)
                if name == "missing" and item["identifier"] in notes:
                    yield "    " + notes[item["identifier"]]
    if source.duplicates:
        yield f"\nsource: duplicates ({len(source.duplicates):,})"
        for identifier in source.duplicates:
            yield "  " + identifier


def _describe(item: dict[str, Any]) -> str:
    parts = [item["identifier"]]
    for side in ("source", "peer"):
        if f"{side}_datestamp" in item:
            deleted = " (deleted)" if item[f"{side}_deleted"] else ""
            parts.append(f"{side} {item[f'{side}_datestamp']}{deleted}")
    return "  ".join(parts)


def json_target_problem(path: Path) -> str | None:
    """Why the report could not be written to ``path``, or None: asked before a check that may
    take an hour, not after it."""
    if path.is_dir():
        return "it is a folder"
    folder = path.parent
    if not folder.is_dir():
        return f"there is no folder {folder}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write in {folder}"
    if path.exists() and not os.access(path, os.W_OK):
        return "cannot write over it"
    return None


def write_json(report: CheckReport, path: Path) -> None:
    """The whole report with every item, streamed from the spools (bounded memory). It is
    written beside ``path`` and renamed into place once whole: a check stopped while writing
    leaves no half report (nor spoils the one before)."""
    part = path.with_name(f".{path.name}.part")
    try:
        _write_report(report, part)
        part.replace(path)
    finally:
        part.unlink(missing_ok=True)


def _write_report(report: CheckReport, path: Path) -> None:
    data = report.as_json(items=0)
    peers = data.pop("peers")
    with path.open("w", encoding="utf-8") as out:
        out.write("{\n")
        for key, value in data.items():
            out.write(f" {json.dumps(key)}: {json.dumps(value)},\n")
        out.write(' "peers": [')
        for n, (peer, entry) in enumerate(zip(report.peers, peers, strict=True)):
            del entry["items"]
            entry["truncated"] = False
            out.write(("," if n else "") + "\n  " + json.dumps(entry)[:-1] + ', "items": {')
            for m, (name, found) in enumerate(peer.findings.items()):
                out.write(("," if m else "") + f"\n   {json.dumps(name)}: [")
                for k, item in enumerate(found.items()):
                    out.write(("," if k else "") + "\n    " + json.dumps(item))
                out.write("]")
            out.write("}}")
        out.write("\n ]\n}\n")
