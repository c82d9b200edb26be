"""Reading /metrics as Prometheus reads it, and what every wiscat process exports."""

from __future__ import annotations

import platform
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


async def scrape(root: str) -> list[Sample]:
    """Every sample of a /metrics answer, parsed as Prometheus parses it."""
    async with aiohttp.ClientSession() as http, http.get(root + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


async def sample_value(root: str, name: str, **labels: str) -> float:
    """The value of the one sample ``name`` with exactly ``labels`` at ``root``/metrics."""
    found = [s.value for s in await scrape(root) if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{len(found)} samples {name}{labels} at {root}/metrics"
    return found[0]


def assert_process_metrics(samples: list[Sample]) -> None:
    """The process and platform series an operator's node dashboards expect of any exporter."""
    value = {s.name: s.value for s in samples if not s.labels}
    assert 10e6 < value["process_resident_memory_bytes"] < 10e9
    assert value["process_virtual_memory_bytes"] >= value["process_resident_memory_bytes"]
    assert value["process_cpu_seconds_total"] > 0
    assert 0 < value["process_open_fds"] <= value["process_max_fds"]
    # this process started before the scrape, and not before the test session
    assert 0 < time.time() - value["process_start_time_seconds"] < 24 * 3600
    (info,) = [s for s in samples if s.name == "python_info"]
    assert info.value == 1
    assert info.labels["implementation"] == platform.python_implementation()
    assert info.labels["version"] == platform.python_version()
    assert {s.labels["generation"] for s in samples if s.name == "python_gc_collections_total"} == {
        "0",
        "1",
        "2",
    }
