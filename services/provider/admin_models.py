"""The JSON answers of the admin API, as the OpenAPI schema (``/openapi.json``) shows them.

The routes build their answers from the stores' rows (``Link.as_json``, ``Check.as_json``, the
history's rows) and declare these models as their ``response_model``: the schema then says what
each field is, and the Schemathesis run (tests/integration/test_api_schema.py) holds every
answer it gets to it. Times are ISO 8601 with their offset, intervals a number of seconds, and a
URL's password is shown as ``***``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from wiscat.shared.model import RunMode, RunStatus, WriteOutcome

Seconds = float
CheckOutcome = Literal["consistent", "inconsistent", "unchecked"]


class RecordAnswer(BaseModel):
    """A record of the own set, written or deleted."""

    identifier: str
    outcome: WriteOutcome = Field(description="what the write did: added, updated, deleted, ...")


class LinkAnswer(BaseModel):
    """A harvest link and its state."""

    name: str
    base_url: str = Field(description="the peer's base URL, its password shown as ***")
    remote_set: str | None = Field(description="the set asked for; null: the whole catalogue")
    local_set: str = Field(description="the set the records are filed under here")
    metadata_prefix: str
    strategy: str = Field(description="ListRecords, or ListIdentifiers (with GetRecord)")
    every: Seconds = Field(description="seconds between incremental runs")
    full_every: Seconds = Field(description="seconds between full runs")
    overlap: Seconds = Field(description="seconds an incremental run asks before its mark")
    window_slices: int = Field(description="slices of the rolling windowed re-harvest; 0: off")
    enabled: bool
    recovery: bool = Field(description="a recovery link: may write into the own set")
    created_at: datetime
    high_water_mark: datetime | None
    last_full_at: datetime | None
    window_index: int
    next_run_at: datetime
    run_requested: RunMode | None = Field(description="a run asked for, not yet started")
    lease_owner: str | None = Field(description="the harvester worker running it, if any")
    lease_expires: datetime | None
    last_run_id: int | None
    last_success_at: datetime | None
    last_error: str | None
    hints: bool = Field(description="whether it takes its peer's change hints (--no-hints: not)")
    hint_pending: bool = Field(description="a hint arrived that no run has started to serve yet")
    hint_until: datetime | None = Field(description="the earliest change a pending hint named")


class HintSubscription(BaseModel):
    """Whether a link is subscribed to its peer's change hints (docs/links.md)."""

    state: str = Field(
        description="connected, down, not advertised, not yet looked at, off (WISCAT_HINTS=false), "
        "off for this link, link disabled"
    )
    url: str | None = Field(None, description="the peer's stream, where it advertises one")
    connected_since: datetime | None = None
    last_hint_at: datetime | None = None
    last_error: str | None = Field(None, description="why the stream last ended or failed")
    last_error_at: datetime | None = None


class LinkShown(LinkAnswer):
    """A link, its state, and its subscription to its peer's change hints."""

    subscription: HintSubscription


class LinkChanged(LinkAnswer):
    """A link after a change, and which of its fields changed."""

    changed: list[str] = Field(description="the fields changed; empty when nothing was")


class Removed(BaseModel):
    """A link or a check removed."""

    removed: str = Field(description="its name")


class HarvestRequested(BaseModel):
    """A run asked for: the harvester starts it at its next poll."""

    link: str
    requested: RunMode


class RunAnswer(BaseModel):
    """One harvest run (``wiscat link runs``)."""

    id: int
    link: str
    mode: RunMode
    worker: str | None
    from_date: datetime | None
    until_date: datetime | None
    started_at: datetime
    finished_at: datetime | None
    status: RunStatus
    pages: int
    bytes: int
    added: int
    updated: int
    unchanged: int
    deleted: int
    refused: int
    refusals: dict[str, int] = Field(description="the refused records by reason code")
    quarantined: int
    error_kind: str | None
    error: str | None = Field(description="why the run failed or stopped")


class QuarantineAnswer(BaseModel):
    """One quarantined record, without its bytes (``GET /admin/quarantine/{id}`` gives them)."""

    id: int
    link: str | None = Field(description="null once its link was removed")
    run_id: int | None
    page: int | None
    identifier: str | None
    reason: str
    size: int = Field(description="the stored bytes' length")
    received_at: datetime


class RefusedAnswer(BaseModel):
    """A record a link's harvests refused: its latest refusal (``wiscat link refused``)."""

    identifier: str
    reason: Literal["own_set", "older", "deleted", "conflict"] = Field(
        description="own_set: a record of this node's own set; older: an older gmd:dateStamp "
        "than the stored copy's; deleted: deleted here, and not newer than the deleted copy; "
        "conflict: another link's copy has the same gmd:dateStamp and other content"
    )
    text: str = Field(description="the reason as a sentence")
    run_id: int | None = Field(description="null once the run was purged")
    refused_at: datetime


class CheckAnswer(BaseModel):
    """A scheduled consistency check."""

    name: str
    set_spec: str
    source_url: str = Field(description="the authoritative node's base URL")
    peer_urls: list[str]
    sample: int = Field(description="records compared by content at each run")
    every: Seconds = Field(description="seconds between runs")
    enabled: bool
    created_at: datetime
    next_run_at: datetime
    lease_owner: str | None
    lease_expires: datetime | None


class CheckListed(CheckAnswer):
    """A check with its latest report (all null if it never ran)."""

    last_report_id: int | None
    last_outcome: CheckOutcome | None
    last_run_at: datetime | None


class CheckRequested(BaseModel):
    """A check run asked for: the harvester runs it at its next poll."""

    check: str
    requested: bool


class ReportAnswer(BaseModel):
    """A consistency report: its counts per peer, and in ``GET /admin/check-reports/{id}`` the
    identifiers of each category too (docs/checks.md)."""

    id: int
    check_name: str | None
    set_spec: str
    source_url: str
    started_at: datetime
    finished_at: datetime
    outcome: CheckOutcome
    report: dict[str, Any]


class WCMP2InvalidAnswer(BaseModel):
    """A record that cannot be made a valid WCMP2 record (never announced), and why."""

    identifier: str = Field(description="its OAI identifier (fileIdentifier)")
    reasons: Any = Field(description="why it cannot be valid, as the WIS2 renderer wrote them")
    report: Any = Field(description="its conversion report (guessed, dropped, invalid)")
    source_datestamp: datetime = Field(description="the datestamp of the record rendered")
    noted_at: datetime
