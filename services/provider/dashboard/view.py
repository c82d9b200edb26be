"""The dashboard's view model: what the database holds, read once per page and turned into
plain data (dataclasses, lists, dicts), so that rendering computes nothing and asks nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from wiscat.provider.dashboard.markup import COUNTS
from wiscat.provider.dashboard.plots import Key, history_series, link_keys
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import overview
from wiscat.shared.db import registry as registry_store
from wiscat.shared.db import wis2_serving as wis2_store
from wiscat.shared.db.hints import hint_state
from wiscat.shared.db.pool import Pool
from wiscat.shared.urls import safe_url

Series = dict[str, list[tuple[datetime, float]]]


@dataclass(frozen=True)
class LinkView:
    """One link with its last run, as the links table and the status strip show it."""

    name: str
    base_url: str  # without its user and password
    mapping: str  # "remote set → local set"
    enabled: bool
    status: str | None  # of its last run; None: never run
    started_at: datetime | None
    finished_at: datetime | None
    lag: float | None  # seconds since its last successful run; None: none yet
    age: float  # seconds since it was added
    late: bool  # its lag (its age, before a success) is past twice its interval
    counts: dict[str, int | None]
    last_error: str
    refusals: dict[str, int] = field(default_factory=dict)  # the last run's, by reason code
    hints: str = ""  # its subscription to its peer's change hints, in a few words

    @property
    def last_run(self) -> datetime | None:
        return self.finished_at or self.started_at

    @property
    def failing(self) -> bool:
        """Enabled, and its last run failed or was stopped."""
        return self.enabled and self.status in ("failed", "stopped")

    @property
    def waiting(self) -> bool:
        """Enabled, and no run of it has succeeded yet (never run, or its first run still
        running, retrying perhaps)."""
        return self.enabled and self.lag is None


@dataclass(frozen=True)
class ReportLine:
    """One peer of one consistency report."""

    finished_at: datetime | None
    check_name: str
    set_spec: str
    outcome: str  # the report's
    peer_url: str
    found: str  # the peer's counts, "consistent", or why it was not checked


@dataclass(frozen=True)
class RegistryView:
    """The registry network this node is in, or ``network`` None when it is in none."""

    network: str | None
    blocks: int = 0  # after genesis
    waiting: int = 0  # transactions waiting for a block
    urls: list[tuple[str, str]] = field(default_factory=list)  # base URL, accepted
    peers: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class DashboardView:
    """Everything the dashboard page shows, as of ``now``."""

    now: datetime
    links: list[LinkView]
    sets: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    quarantine: list[dict[str, Any]]
    reports: list[ReportLine]
    latest_report: dict[str, Any] | None
    days: list[tuple[str, int]]  # records arriving per day, the last 30
    durations: Series
    lags: Series
    failed: dict[str, set[datetime]]
    keys: dict[str, Key]  # each link's colour, in the table and the plots
    registry: RegistryView
    wis2: wis2_store.Counts  # the WIS 2.0 bridge's records and outbox
    wis2_invalid: list[dict[str, Any]]  # the newest records that cannot be made WCMP2, and why

    @property
    def failing(self) -> list[str]:
        """The enabled links whose last run failed or was stopped."""
        return [link.name for link in self.links if link.failing]

    @property
    def lagging(self) -> list[str]:
        """The enabled links, not failing, that lag: no success for twice their interval (since
        they were added, when none yet)."""
        return [link.name for link in self.links if link.late and link.enabled and not link.failing]

    @property
    def waiting(self) -> list[str]:
        """The enabled links, neither failing nor lagging, that have not succeeded yet."""
        return [
            link.name for link in self.links if link.waiting and not (link.failing or link.late)
        ]


def hints_text(row: dict[str, Any], hints_on: bool) -> str:
    """The link's subscription: its state, since when, its last hint and its last error."""
    stream = (row["hint_known"], row["hint_url"] is not None, bool(row["hint_connected_since"]))
    state = text = hint_state(hints_on, (row["hints"], row["enabled"]), stream)
    if state == "connected":
        text += f" since {row['hint_connected_since']:%Y-%m-%d %H:%M:%S}"
    if state in ("connected", "down") and row["last_hint_at"]:
        text += f", last hint {row['last_hint_at']:%Y-%m-%d %H:%M:%S}"
    if state in ("connected", "down") and row["hint_error"]:
        text += f"; last error {row['hint_error_at']:%Y-%m-%d %H:%M:%S}: {row['hint_error']}"
    return text


def link_view(row: dict[str, Any], now: datetime, hints_on: bool = True) -> LinkView:
    success = row["last_success_at"]
    lag = (now - success).total_seconds() if success else None
    age = (now - row["created_at"]).total_seconds()
    return LinkView(
        name=row["name"],
        base_url=safe_url(row["base_url"]),
        mapping=f"{row['remote_set'] or '(all)'} → {row['local_set']}",
        enabled=row["enabled"],
        status=row["status"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        lag=lag,
        age=age,
        late=(age if lag is None else lag) > 2 * row["every"].total_seconds(),
        counts={name: row[name] for name in COUNTS},
        last_error=row["last_error"] or "",
        refusals=json.loads(row["refusals"]) if row["refusals"] else {},
        hints=hints_text(row, hints_on),
    )


def report_lines(reports: list[dict[str, Any]]) -> list[ReportLine]:
    lines = []
    for report in reports:
        for peer in report["report"]["peers"]:
            counts = ", ".join(f"{k} {v}" for k, v in peer.get("counts", {}).items() if v)
            lines.append(
                ReportLine(
                    finished_at=report["finished_at"],
                    check_name=report["check_name"] or "-",
                    set_spec=report["set_spec"],
                    outcome=report["outcome"],
                    peer_url=peer["url"],
                    found=peer["reason"] if peer["status"] != "ok" else (counts or "consistent"),
                )
            )
    return lines


def arrival_days(arrivals: list[dict[str, Any]], now: datetime) -> list[tuple[str, int]]:
    """Records arriving on each of the last 30 days ("11-28", 40), none missing."""
    counts = {row["day"].date(): row["records"] for row in arrivals}
    start = now.date() - timedelta(days=29)
    return [
        ((start + timedelta(days=n)).strftime("%m-%d"), counts.get(start + timedelta(days=n), 0))
        for n in range(30)
    ]


async def registry_view(pool: Pool, network: str | None) -> RegistryView:
    urls = [(tx.base_url, tx.created_at) for tx in await registry_store.accepted_urls(pool)]
    if network is None:
        return RegistryView(None, urls=urls)
    tip = await registry_store.chain_tip(pool)
    peers = [
        {
            "url": peer.url,
            "source": peer.source,
            "last_ok_at": peer.last_ok_at,
            "failures": peer.failures,
            "last_error": peer.last_error or "",
        }
        for peer in await registry_store.all_peers(pool)
    ]
    return RegistryView(
        network,
        blocks=tip.height if tip else 0,
        waiting=await registry_store.pool_size(pool),
        urls=urls,
        peers=peers,
    )


async def load(
    pool: Pool, network: str | None, now: datetime, hints_on: bool = True
) -> DashboardView:
    """The dashboard as of ``now``; ``network``: the registry network this node is in;
    ``hints_on``: WISCAT_HINTS."""
    reports = await check_store.recent_reports(pool, None, 10)
    durations, lags, failed = history_series(await overview.run_history(pool, 7))
    links = [link_view(row, now, hints_on) for row in await overview.links_overview(pool)]
    return DashboardView(
        now=now,
        links=links,
        sets=await overview.sets_overview(pool),
        runs=await link_store.recent_runs(pool, None, 20),
        quarantine=await link_store.recent_quarantine(pool, None, 20),
        reports=report_lines(reports),
        latest_report=reports[0] if reports else None,
        days=arrival_days(await overview.arrivals_per_day(pool, 30), now),
        durations=durations,
        lags=lags,
        failed=failed,
        keys=link_keys([link.name for link in links], [*durations, *lags]),
        registry=await registry_view(pool, network),
        wis2=await wis2_store.counts(pool),
        wis2_invalid=await wis2_store.invalid_records(pool, 10),
    )
