"""What the provider's and the harvester's Prometheus metrics have in common: a registry of the
service's own (one per app, no global state) holding the build, process and database series."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics

from wiscat.shared.version import register_build_info


@dataclass
class ServiceMetrics:
    """The series every wiscat service exports; a service's metrics extend it with their own."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        # A `_created` gauge per counter and histogram (the time it was made, in the text
        # format a metric of its own without prefix rules or unit) only adds series to store;
        # the switch is the client library's, for the whole process.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        register_build_info(self.registry)
        self.database_up = Gauge(
            "wiscat_database_up",
            "1 when this scrape could read the database, 0 when it could not (the gauges read "
            "from it then keep their last values)",
            registry=self.registry,
        )
