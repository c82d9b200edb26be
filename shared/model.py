"""The catalogue's vocabulary as plain values: links and their runs, record writes, checks.

The ground floor of wiscat: the stores (:mod:`wiscat.shared.db`) take and return these, the
services and the commands pass them around, and a run's plan reasons about them. Nothing here
does I/O or imports the database driver, the HTTP client or the web framework, and of wiscat
only :mod:`wiscat.shared.urls` (an import-linter contract holds it to that), so a harvester's
page workers can make :class:`IncomingRecord` without loading the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from wiscat.shared.urls import safe_url

#: How a run reads its peer (``harvest_runs.mode``): from the high-water mark, everything, one
#: slice of the rolling window, or a backup synchronisation of another GISC's own set.
RunMode = Literal["incremental", "full", "window", "backup"]
#: How a run ended (``harvest_runs.status``): still running, completed, failed, or stopped by a
#: rule (the mass-deletion breaker, its link removed).
RunStatus = Literal["running", "ok", "failed", "stopped"]

#: What a write did to one record (records.sql's ``outcome`` columns): by a harvest or ingest
#: (upsert_records), a deletion (delete_records) or a backup synchronisation (backup_records).
WriteOutcome = Literal[
    "added",
    "updated",
    "unchanged",
    "joined",
    "refused_protected",
    "refused_deleted",
    "refused_older",
    "refused_conflict",
    "deleted",
    "left_set",
    "not_found",
    "remembered",
    "taken",
    "taken_new",
    "same",
    "not_newer",
]


def fields_as_json(row: Any) -> dict[str, Any]:
    """A dataclass row as JSON values: times in ISO 8601, intervals in seconds."""
    out: dict[str, Any] = {}
    for f in fields(row):
        value = getattr(row, f.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, timedelta):
            value = value.total_seconds()
        out[f.name] = value
    return out


@dataclass(frozen=True, slots=True)
class Link:
    """A harvest job and its state (docs/design.md, "link")."""

    name: str
    base_url: str
    remote_set: str | None
    local_set: str
    metadata_prefix: str
    strategy: str
    every: timedelta
    full_every: timedelta
    overlap: timedelta
    window_slices: int
    enabled: bool
    recovery: bool
    created_at: datetime
    high_water_mark: datetime | None
    last_full_at: datetime | None
    window_index: int
    next_run_at: datetime
    run_requested: str | None
    lease_owner: str | None
    lease_expires: datetime | None
    last_run_id: int | None
    last_success_at: datetime | None
    last_error: str | None
    # harvest on a hint (docs/links.md): the operator's switch, a hint no run has served yet,
    # and the earliest change that hint announced
    hints: bool = True
    hint_pending: bool = False
    hint_until: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        """The link as JSON, its URL's password, if any, shown as ``***`` (as everywhere)."""
        return {**fields_as_json(self), "base_url": safe_url(self.base_url)}


@dataclass(frozen=True, slots=True)
class NewLink:
    """A checked link definition (from the command, the admin API or the registry), to store."""

    name: str
    base_url: str
    remote_set: str | None
    local_set: str
    metadata_prefix: str = "iso19139"
    strategy: str = "ListRecords"
    every: timedelta = timedelta(hours=1)
    full_every: timedelta = timedelta(days=7)
    overlap: timedelta = timedelta(0)
    window_slices: int = 24
    enabled: bool = True
    recovery: bool = False
    hints: bool = True  # subscribe to the peer's hints, where it advertises them


@dataclass(frozen=True, slots=True)
class PageCounts:
    """What one harvested page did to the catalogue: bytes received and records by outcome."""

    bytes: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    refused: int = 0
    quarantined: int = 0


class IncomingRecord(NamedTuple):
    """A record ready to store: identifier, gmd:dateStamp, canonical hash, serialized XML and
    the XML IDs it holds (``xml_ids``, as :func:`wiscat.shared.iso19139.record_from_element`
    gives them; None where they are not known: the provider then searches the record for them
    each time it serves it).

    ``xml`` is lxml's serialization of a parsed record
    (:func:`wiscat.shared.iso19139.parse_record`),
    so it holds no character XML 1.0 does not allow: the store's writes say so to the database,
    which then does not check it (migration 0009).

    A named tuple, not a dataclass: a harvester's page workers send pages of these back to
    the harvester, and a tuple unpickles about four times faster than a frozen dataclass.
    """

    identifier: str
    md_datestamp: datetime | None
    content_hash: bytes
    xml: str
    xml_ids: str | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """A scheduled consistency check: which set, from which source, against which peers, how
    often."""

    name: str
    set_spec: str
    source_url: str
    peer_urls: list[str]
    sample: int
    every: timedelta
    enabled: bool
    created_at: datetime
    next_run_at: datetime
    lease_owner: str | None
    lease_expires: datetime | None

    def as_json(self) -> dict[str, Any]:
        """The check as JSON, its URLs' passwords, if any, shown as ``***`` (as everywhere)."""
        return {
            **fields_as_json(self),
            "source_url": safe_url(self.source_url),
            "peer_urls": [safe_url(url) for url in self.peer_urls],
        }
