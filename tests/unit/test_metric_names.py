"""Every metric a node exports: a ``wiscat_`` name with its unit, and described for operators;
beside them only the client library's standard process and platform series."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from wiscat.harvester.metrics import HarvesterMetrics
from wiscat.provider.metrics import ProviderMetrics

ROOT = Path(__file__).resolve().parents[2]
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
HELP_LINE = re.compile(r"^# HELP (\S+) (.*)$", re.MULTILINE)
DOCUMENTED_NAME = re.compile(r"\bwiscat_[a-z0-9_]*[a-z]\b")
# prometheus_client's ProcessCollector, PlatformCollector and GCCollector
STANDARD = {
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "python_info",
    "python_gc_objects_collected_total",
    "python_gc_objects_uncollectable_total",
    "python_gc_collections_total",
}
# what a metric measures, read from its help text, and the suffix its name must then carry
UNITS = [
    (re.compile(r"\bunix time\b", re.IGNORECASE), "_timestamp_seconds"),
    (re.compile(r"\b(seconds|duration|time to)\b", re.IGNORECASE), "_seconds"),
    (re.compile(r"\bbytes\b", re.IGNORECASE), "_bytes"),
]


def exported(registry: CollectorRegistry) -> dict[str, tuple[str, str]]:
    """Name -> (type, help) of every family, as the text format writes them."""
    text = generate_latest(registry).decode()
    helps = dict(HELP_LINE.findall(text))
    return {name: (kind, helps[name]) for name, kind in TYPE_LINE.findall(text)}


def all_metrics() -> dict[str, tuple[str, str]]:
    """wiscat's own metrics, of both services."""
    every = {**exported(ProviderMetrics().registry), **exported(HarvesterMetrics().registry)}
    return {name: value for name, value in every.items() if name not in STANDARD}


@pytest.mark.parametrize("metrics", [ProviderMetrics, HarvesterMetrics])
def test_each_service_exports_the_standard_process_series(metrics: type) -> None:
    assert set(exported(metrics().registry)) >= STANDARD


def test_names_have_the_prefix_and_their_unit() -> None:
    metrics = all_metrics()
    assert len(metrics) >= 15  # both services counted
    for name, (kind, help_text) in metrics.items():
        assert name.startswith("wiscat_"), name
        assert not name.endswith("_created"), f"{name}: a _created series is exported"
        base = name.removesuffix("_total")
        if kind == "counter":
            assert name.endswith("_total"), name
        if kind == "histogram":
            assert base.endswith(("_seconds", "_bytes")), f"{name}: a histogram without unit"
        for words, suffix in UNITS:
            if words.search(help_text):
                assert base.endswith(suffix), f"{name} ({help_text!r}) does not end in {suffix}"
                break


@pytest.mark.parametrize("document", ["docs/monitoring.md"])
def test_every_metric_is_documented_and_every_documented_one_exists(document: str) -> None:
    names = set(all_metrics())
    text = (ROOT / document).read_text()
    documented = {
        re.sub(r"_(bucket|sum|count)$", "", found) for found in DOCUMENTED_NAME.findall(text)
    }
    assert names - documented == set(), f"not described in {document}"
    assert documented - names == set(), f"{document} names metrics that do not exist"
