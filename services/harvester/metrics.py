"""The harvester's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class HarvesterMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.runs = Counter(
            "wiscat_harvest_runs",
            "Harvest runs by link, mode and status",
            ["link", "mode", "status"],
            registry=self.registry,
        )
        self.records = Counter(
            "wiscat_harvest_records",
            "Harvested records by link and outcome (added, updated, unchanged, deleted, "
            "refused, quarantined)",
            ["link", "outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "wiscat_harvest_errors",
            "Failed runs by link and kind of error",
            ["link", "kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "wiscat_harvest_run_duration_seconds",
            "Duration of harvest runs",
            ["link", "mode"],
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400),
            registry=self.registry,
        )
        self.bytes = Counter(
            "wiscat_harvest_bytes",
            "Response bytes received per link",
            ["link"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "wiscat_harvest_last_success_timestamp_seconds",
            "Unix time of the last successful run per link",
            ["link"],
            registry=self.registry,
        )
        self.lag = Gauge(
            "wiscat_harvest_lag_seconds",
            "Seconds since the link's last successful run",
            ["link"],
            registry=self.registry,
        )
        self.running = Gauge(
            "wiscat_harvest_running_links",
            "Links being harvested now by this process",
            registry=self.registry,
        )
