"""What a harvest run carries: the process's context (settings, database, client, metrics,
the peers' Identify) and the run's own report."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from wiscat.harvester.client import OAIClient
from wiscat.harvester.metrics import HarvesterMetrics
from wiscat.harvester.page_workers import PageReaders
from wiscat.shared.db.pool import Pool
from wiscat.shared.model import RunMode, RunStatus
from wiscat.shared.oaipmh.pages import IdentifyInfo
from wiscat.shared.refusals import summary as refusal_summary
from wiscat.shared.settings import Settings

log = logging.getLogger("wiscat.harvester")


@dataclass
class HarvestContext:
    """What every run needs, built once per process."""

    settings: Settings
    pool: Pool
    client: OAIClient
    metrics: HarvesterMetrics = field(default_factory=HarvesterMetrics)
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    # each peer's Identify (by base URL) and when it was read: see _identify
    identified: dict[str, tuple[float, IdentifyInfo]] = field(default_factory=dict)
    # where pages are parsed and hashed (worker processes, or a thread)
    pages: PageReaders = field(default_factory=lambda: PageReaders(0))
    # where each run opens the session that holds its lease (wiscat.shared.db.leases): the
    # server itself (DATABASE_SESSION_URL when set), never a transaction pooler
    database_url: str = ""


@dataclass
class RunReport:
    """What one run did (also stored in ``harvest_runs``)."""

    link: str
    run_id: int
    mode: RunMode
    status: RunStatus = "running"
    from_: datetime | None = None
    until: datetime | None = None
    counts: Counter[str] = field(default_factory=Counter)
    pages: int = 0
    bytes: int = 0
    error_kind: str | None = None
    error: str | None = None
    high_water_mark: datetime | None = None
    seconds: float = 0.0
    taken: list[str] = field(default_factory=list)  # backup synchronisation: what it took
    refusals: Counter[str] = field(default_factory=Counter)  # refused records by reason code

    def summary(self) -> str:
        parts = ", ".join(
            refusal_summary(self.counts[k], self.refusals)
            if k == "refused"
            else f"{k} {self.counts[k]}"
            for k in sorted(self.counts)
        )
        text = f"{self.link} {self.mode} run {self.run_id}: {self.status}; pages {self.pages}"
        if parts:
            text += f"; {parts}"
        if self.error:
            text += f"; {self.error_kind}: {self.error}"
        return text


def run_log(report: RunReport) -> logging.LoggerAdapter[logging.Logger]:
    # link and run as fields of their own in JSON logs (WISCAT_LOG_FORMAT=json)
    return logging.LoggerAdapter(log, {"link": report.link, "run": report.run_id})


#: The attribute set on the log record of a run's summary, at its end: ``wiscat harvest NAME``
#: prints that summary itself, once, and leaves the record out (:func:`run_end_unlogged`).
RUN_END = "run_end"


def run_end_log(report: RunReport) -> logging.LoggerAdapter[logging.Logger]:
    """:func:`run_log`, for the one line that sums a run up at its end."""
    return logging.LoggerAdapter(log, {"link": report.link, "run": report.run_id, RUN_END: True})


@contextlib.contextmanager
def run_end_unlogged() -> Iterator[None]:
    """Runs' summaries are not logged while the block runs (their caller prints them)."""

    def keep(record: logging.LogRecord) -> bool:
        return not getattr(record, RUN_END, False)

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)
