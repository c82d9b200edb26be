"""The installed wiscat's version: ``wiscat --version``, the User-Agent of its requests, and the
``wiscat_build_info`` metric (which version each node of a fleet runs)."""

from __future__ import annotations

from importlib import metadata

from prometheus_client import CollectorRegistry, Info

try:
    VERSION = metadata.version("wiscat")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "unknown"


def register_build_info(registry: CollectorRegistry) -> None:
    """``wiscat_build_info{version="..."} 1`` in ``registry``."""
    Info("wiscat_build", "The wiscat version this process runs", registry=registry).info(
        {"version": VERSION}
    )
