"""The provider's Prometheus metrics, besides those of every service (wiscat.shared.metrics)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from wiscat.shared.metrics import ServiceMetrics


@dataclass
class ProviderMetrics(ServiceMetrics):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.requests = Counter(
            "wiscat_oai_requests",
            "OAI-PMH requests by verb and outcome (ok or the OAI-PMH error code)",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "wiscat_oai_request_duration_seconds",
            "Time to answer an OAI-PMH request, until the last byte is sent",
            ["verb"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.records_served = Counter(
            "wiscat_oai_records_served",
            "Records and headers sent in list and GetRecord responses",
            ["verb"],
            registry=self.registry,
        )
        self.records_with_invalid_characters = Counter(
            "wiscat_oai_records_with_invalid_characters",
            "Stored records sent with characters XML 1.0 does not allow, by outcome: replaced "
            "(each by U+FFFD), withheld (not well-formed even so: the header sent alone), or "
            "unlisted (in the identifier: neither listed nor served)",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ("replaced", "withheld", "unlisted"):
            self.records_with_invalid_characters.labels(outcome)
        self.set_specs_unlisted = Counter(
            "wiscat_oai_set_specs_unlisted",
            "Stored setSpecs left out of an answer because they break OAI-PMH's setSpec "
            "pattern, by where: ListSets, or header (once a page or GetRecord)",
            ["where"],
            registry=self.registry,
        )
        for where in ("ListSets", "header"):
            self.set_specs_unlisted.labels(where)
        self.overloaded = Counter(
            "wiscat_oai_overloaded",
            "List requests answered 503 because too many were in progress",
            registry=self.registry,
        )
        self.read_ahead = Counter(
            "wiscat_oai_pages_read_ahead",
            "List pages asked for by resumptionToken, by whether the page had been read ahead "
            "(used, missed, expired, failed), pages read ahead that nobody asked for "
            "(dropped), and pages not read ahead for want of room (skipped)",
            ["outcome"],
            registry=self.registry,
        )
        self.list_horizon_lag = Gauge(
            "wiscat_oai_list_horizon_lag_seconds",
            "How far the last list begun stopped short of the database clock because of a "
            "write transaction still in progress (0: none was)",
            registry=self.registry,
        )
        self.records = Gauge(
            "wiscat_records",
            "Records held, per set and status (live or deleted)",
            ["set", "status"],
            registry=self.registry,
        )
        # a metric of its own, not a set "*" of wiscat_records: sum(wiscat_records) would count
        # the catalogue twice
        self.catalogue_records = Gauge(
            "wiscat_catalogue_records",
            "Records held in the whole catalogue, by status (live or deleted)",
            ["status"],
            registry=self.registry,
        )
        self.hint_streams = Gauge(
            "wiscat_hint_streams_open",
            "Change-hint streams (/oai/changes) open in this provider process",
            registry=self.registry,
        )
        self.hints_sent = Counter(
            "wiscat_hints_sent",
            "Change-hint events sent, by kind: change, or catch-up (the client is to run its "
            "incremental harvest: a Last-Event-ID it cannot resume from, or a reconnected "
            "listener)",
            ["kind"],
            registry=self.registry,
        )
        for kind in ("change", "catch-up"):
            self.hints_sent.labels(kind)
        self.hint_listener_failures = Counter(
            "wiscat_hint_listener_failures",
            "Times the database session that LISTENs for changes failed (it reconnects with "
            "backoff; the open streams are told to catch up)",
            registry=self.registry,
        )
        self.tombstones_purged = Counter(
            "wiscat_tombstones_purged",
            "Tombstones dropped after the retention period",
            registry=self.registry,
        )
