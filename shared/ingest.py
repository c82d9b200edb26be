"""Local ingest into the node's own set: files, folders, single documents, and local deletions.

A bad document never stops the good ones: each file is parsed on its own, the good records of a
folder are written in batches (one statement each), and each bad file is reported with its reason.
Nothing of a bad document is stored.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.iso19139 import MAX_RECORD_BYTES, Record, RecordError, parse_record
from wiscat.shared.model import IncomingRecord

log = logging.getLogger("wiscat.ingest")

BATCH = 200


@dataclass
class IngestReport:
    """What an ingest did: outcome counts, each bad file with its reason, and each file whose
    record was refused because the stored copy is newer (invariant 5)."""

    counts: Counter[str] = field(default_factory=Counter)
    refused: list[tuple[str, str]] = field(default_factory=list)
    older: list[tuple[str, str]] = field(default_factory=list)
    # progress: the files listed (None until every path is listed), and those read so far
    files: int | None = None
    read: int = 0

    def summary(self) -> str:
        """The counts on one line, as ``wiscat records ingest`` prints them."""
        parts = [f"{name} {self.counts[name]}" for name in sorted(self.counts)]
        parts.append(f"bad {len(self.refused)}")
        return ", ".join(parts)


def incoming(record: Record) -> IncomingRecord:
    """The parsed ``record`` as the database writes it."""
    return IncomingRecord(
        record.identifier, record.md_datestamp, record.content_hash, record.xml, record.xml_ids
    )


def xml_files(folder: Path) -> list[Path]:
    """Every ``*.xml`` under ``folder`` (any case of the suffix) but folders, in a stable order.

    That is regular files, and also what cannot be read as one (a link to nothing, a named
    pipe): the ingest lists those as refused, with the reason, rather than passing over a file
    the operator may expect to be loaded. Links to folders are not followed (no loops).
    """
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() == ".xml" and not p.is_dir())


#: The path that names standard input (``curl ... | wiscat ingest -``); ``./-`` is a file.
STDIN = "-"


def read_file(path: Path) -> bytes:
    """The bytes of one record file, read only if it is a regular file no larger than a record
    can be (a named pipe would block the ingest, a device such as /dev/zero never end); or of
    standard input, for :data:`STDIN`, up to that size."""
    if str(path) == STDIN:
        data = sys.stdin.buffer.read(MAX_RECORD_BYTES + 1)
        if len(data) > MAX_RECORD_BYTES:
            raise RecordError(f"larger than {MAX_RECORD_BYTES} bytes: not one metadata record")
        return data
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise RecordError(f"a link to nothing: {os.readlink(path)} does not exist") from None
        raise
    if not stat.S_ISREG(info.st_mode):
        raise RecordError("not a regular file")
    too_large = RecordError(f"larger than {MAX_RECORD_BYTES} bytes: not one metadata record")
    if info.st_size > MAX_RECORD_BYTES:
        raise too_large  # unread
    with path.open("rb") as file:
        data = file.read(MAX_RECORD_BYTES + 1)  # it may have grown since
    if len(data) > MAX_RECORD_BYTES:
        raise too_large
    return data


async def ensure_own_set(db: store.Executor, own_set: str) -> None:
    """Create the node's own set if it does not exist yet."""
    await store.ensure_set(db, own_set, f"Records of {own_set}'s area of responsibility", "own")


def older(record: Record) -> str:
    """Why ``record`` was refused as older than the stored copy (invariant 5)."""
    if record.md_datestamp is None:
        return "it has no gmd:dateStamp and the stored copy has one"
    return "its gmd:dateStamp is older than the stored copy's"


async def write_local(
    pool: Pool, own_set: str, batch: Sequence[tuple[Path, Record]], report: IngestReport
) -> None:
    """Write ``batch`` to the own set in one transaction and add what it did to ``report``."""
    async with pool.acquire() as conn, conn.transaction():
        result = await store.upsert_records(conn, own_set, [incoming(r) for _, r in batch])
    report.counts.update(result.counts)
    refused = set(result.identifiers("refused_older"))
    for path, record in batch:
        if record.identifier in refused:
            report.older.append((str(path), older(record)))
            log.debug("refused %s (%s): %s", path, record.identifier, older(record))


def _same_file(first: str, path: Path) -> bool:
    if first == str(path):
        return True
    try:
        return os.path.samefile(first, path)
    except OSError:  # gone since it was read
        return False


async def ingest_paths(
    pool: Pool, own_set: str, paths: Sequence[Path], report: IngestReport | None = None
) -> IngestReport:
    """Load ISO 19139 files or folders into the own set, in transactions of :data:`BATCH`
    files; ``report`` (a new one if None) holds the outcome, so far if the database fails."""
    report = report if report is not None else IngestReport()
    await ensure_own_set(pool, own_set)
    batch: list[tuple[Path, Record]] = []
    # Which file each identifier came from: two files of one identifier (a copied record whose
    # fileIdentifier was not changed) would have the later overwrite the earlier in silence.
    read_from: dict[str, str] = {}
    listed = [
        (given, xml_files(given) if given.is_dir() and str(given) != STDIN else [given])
        for given in paths
    ]
    report.files = sum(len(files) for _, files in listed)
    # What is refused is the report's, which the caller shows once: logged at DEBUG only.
    for given, files in listed:
        if not files:
            report.refused.append((str(given), "a folder without any .xml file"))
            log.debug("refused %s: a folder without any .xml file", given)
        for path in files:
            report.read += 1
            try:
                record = parse_record(read_file(path))
            except (RecordError, OSError) as exc:
                report.refused.append((str(path), str(exc)))
                log.debug("refused %s: %s", path, exc)
                continue
            first = read_from.get(record.identifier)
            if first is None:
                read_from[record.identifier] = str(path)
            elif _same_file(first, path):
                continue  # the same file again: given twice, or a folder and a file in it
            else:
                reason = f"the same gmd:fileIdentifier as {first}, read before it in this ingest"
                report.refused.append((str(path), reason))
                log.debug("refused %s: %s", path, reason)
                continue
            batch.append((path, record))
            if len(batch) >= BATCH:
                await write_local(pool, own_set, batch, report)
                batch = []
    if batch:
        await write_local(pool, own_set, batch, report)
    return report


async def put_record(pool: Pool, own_set: str, record: Record) -> str:
    """Store one parsed record in the own set; returns its outcome (added, updated, ...)."""
    await ensure_own_set(pool, own_set)
    async with pool.acquire() as conn, conn.transaction():
        result = await store.upsert_records(conn, own_set, [incoming(record)])
    return result.outcomes[record.identifier]


async def delete_local(pool: Pool, own_set: str, identifiers: Sequence[str]) -> store.WriteResult:
    """Delete records of the own set (tombstones)."""
    await ensure_own_set(pool, own_set)
    async with pool.acquire() as conn, conn.transaction():
        return await store.delete_records(conn, own_set, identifiers)
