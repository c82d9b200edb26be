"""The dashboard's line plots stay readable, and small, however many links and runs a node has."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from services.provider.ui import MAX_POINTS, MAX_SERIES, line_plot, thinned

START = datetime(2026, 11, 1, tzinfo=UTC)


def hourly(count: int, value: float, spike_at: int | None = None) -> list[tuple[datetime, float]]:
    return [
        (START + timedelta(hours=n), value * (10 if n == spike_at else 1)) for n in range(count)
    ]


def test_many_links_show_the_highest_and_say_so() -> None:
    # 150 links, each run hourly for a week: 25,200 points; it was a page of megabytes
    series = {f"link-{n:03d}": hourly(168, 1.0 + n) for n in range(150)}
    svg = line_plot("Harvest duration per link (last 7 days)", series, "duration", "none")
    assert len(svg) < 300_000
    assert "Harvest duration per link (last 7 days): the 8 highest of 150 links" in svg
    legend = re.findall(r"&#9632; (link-\d+)", svg)
    assert legend == [f"link-{n:03d}" for n in range(150 - MAX_SERIES, 150)]  # the slowest
    assert svg.count("<circle") == MAX_SERIES * 168


def test_a_long_series_is_thinned_and_keeps_its_spike() -> None:
    values = hourly(5_000, 2.0, spike_at=3_333)
    kept = thinned(values, MAX_POINTS)
    assert len(kept) == MAX_POINTS
    assert max(v for _, v in kept) == 20.0  # the spike survives
    assert kept == sorted(kept)  # still in time order
    assert kept[0][0] >= values[0][0] and kept[-1][0] <= values[-1][0]
    assert thinned(values[:10], MAX_POINTS) == values[:10]


def test_a_few_links_are_all_shown_whole() -> None:
    series = {"alpha": hourly(5, 1.0), "beta": hourly(3, 2.0)}
    svg = line_plot("Lag", series, "lag", "none")
    assert "highest of" not in svg
    assert svg.count("<circle") == 8
