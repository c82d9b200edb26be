"""The installed wiscat's version: ``wiscat --version``, the User-Agent of its requests, and the
``wiscat_build_info`` metric (which version each node of a fleet runs), exported with the
process's own series."""

from __future__ import annotations

from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
)

try:
    VERSION = metadata.version("wiscat")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "unknown"


def register_build_info(registry: CollectorRegistry) -> None:
    """``wiscat_build_info{version="..."} 1`` in ``registry``, with the series every exporter
    has: ``process_*`` (memory, CPU, file descriptors, start time), ``python_info`` and
    ``python_gc_*``, which the client library puts only in its global registry."""
    Info("wiscat_build", "The wiscat version this process runs", registry=registry).info(
        {"version": VERSION}
    )
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
