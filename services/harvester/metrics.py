"""The harvester's Prometheus metrics, besides those of every service (wiscat.shared.metrics)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from wiscat.shared.metrics import ServiceMetrics


@dataclass
class HarvesterMetrics(ServiceMetrics):
    def __post_init__(self) -> None:
        super().__post_init__()
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
        self.refused = Counter(
            "wiscat_harvest_refused_records",
            "Harvested records refused, by link and reason (own_set, older, deleted, conflict)",
            ["link", "reason"],
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
        self.interval = Gauge(
            "wiscat_link_interval_seconds",
            "The link's harvest interval (--every): one lag alert rule covers every link",
            ["link"],
            registry=self.registry,
        )
        self.enabled = Gauge(
            "wiscat_link_enabled",
            "1 when the link is enabled, 0 when it is disabled",
            ["link"],
            registry=self.registry,
        )
        self.created = Gauge(
            "wiscat_link_created_timestamp_seconds",
            "Unix time the link was added (lag counts from it until a first success)",
            ["link"],
            registry=self.registry,
        )
        self.running = Gauge(
            "wiscat_harvest_running_links",
            "Links being harvested now by this process",
            registry=self.registry,
        )
        self.hint_streams = Gauge(
            "wiscat_hint_subscriptions_open",
            "Peers' streams of change hints this harvester process holds open, one per peer",
            registry=self.registry,
        )
        self.hints = Counter(
            "wiscat_hints_received",
            "Change hints received, by peer (its base URL) and kind (change, catch-up, connected)",
            ["peer", "kind"],
            registry=self.registry,
        )
        self.hint_runs = Counter(
            "wiscat_hint_runs",
            "Runs a hint started (the link was due by a pending hint), by link",
            ["link"],
            registry=self.registry,
        )
        self.hint_latency = Histogram(
            "wiscat_hint_latency_seconds",
            "From a hinted change's datestamp bound (its until) to the end of the run that "
            "stored it, by link",
            ["link"],
            buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600),
            registry=self.registry,
        )
        self.hint_stream_up = Gauge(
            "wiscat_link_hint_stream_connected",
            "For a link whose peer advertises a stream of change hints and that takes them: 1 "
            "when the stream is connected, 0 when it is not",
            ["link"],
            registry=self.registry,
        )
        self.check_items = Gauge(
            "wiscat_check_items",
            "Identifiers found by the latest consistency check, by check, peer and category "
            "(missing, extra, outdated, copied_datestamp, duplicates, altered, datestamp_only)",
            ["check", "peer", "category"],
            registry=self.registry,
        )
        self.check_peer_ok = Gauge(
            "wiscat_check_peer_checked",
            "1 when the latest check could list the peer, 0 when it could not",
            ["check", "peer"],
            registry=self.registry,
        )
        self.check_consistent = Gauge(
            "wiscat_check_consistent",
            "1 when the latest run of the check found the set consistent everywhere",
            ["check"],
            registry=self.registry,
        )
        self.check_last_run = Gauge(
            "wiscat_check_last_run_timestamp_seconds",
            "Unix time the latest run of the check finished",
            ["check"],
            registry=self.registry,
        )
        self.check_interval = Gauge(
            "wiscat_check_interval_seconds",
            "Seconds between runs of each enabled scheduled check (`checks add --every`)",
            ["check"],
            registry=self.registry,
        )
        self.check_created = Gauge(
            "wiscat_check_created_timestamp_seconds",
            "Unix time the check was added (a check that never ran is late from it)",
            ["check"],
            registry=self.registry,
        )
        self.check_duration = Histogram(
            "wiscat_check_duration_seconds",
            "Duration of consistency checks run by this process",
            ["check"],
            buckets=(1, 5, 15, 60, 300, 900, 3600, 14400),
            registry=self.registry,
        )
        self.wis2_published = Counter(
            "wiscat_wis2_published_messages",
            "WIS 2.0 notification messages the broker acknowledged, by relation",
            ["relation"],
            registry=self.registry,
        )
        self.wis2_refused = Counter(
            "wiscat_wis2_refused_messages",
            "WIS 2.0 publishes the broker refused (a PUBACK reason code of 0x80 or more)",
            registry=self.registry,
        )
        self.wis2_backlog = Gauge(
            "wiscat_wis2_outbox_backlog",
            "WIS 2.0 messages queued and not yet acknowledged by the broker",
            registry=self.registry,
        )
        self.wis2_oldest = Gauge(
            "wiscat_wis2_outbox_oldest_seconds",
            "Age of the oldest WIS 2.0 message not yet acknowledged (0: none)",
            registry=self.registry,
        )
        self.wis2_connected = Gauge(
            "wiscat_wis2_broker_connected",
            "1 while the harvester is connected to the WIS 2.0 broker",
            registry=self.registry,
        )
