"""The dashboard's line plots stay readable, and small, however many links and runs a node has."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from wiscat.provider.dashboard.plots import (
    MAX_POINTS,
    MAX_SERIES,
    PALETTE,
    bar_plot,
    history_series,
    line_plot,
    link_colour,
    round_step,
    round_ticks,
    thinned,
)

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


def tick_labels(svg: str) -> list[str]:
    return re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', svg)


def test_axes_count_in_round_steps() -> None:
    # the review's figures: ticks of 262, 175, 88 and 9.8 s, 4.9 s
    assert round_ticks(262) == [0, 100, 200, 300]
    assert round_ticks(9.8) == [0, 2, 4, 6, 8, 10]
    assert round_ticks(0.3) == [0, 0.1, 0.2, 0.3]
    assert round_ticks(3, least=1) == [0, 1, 2, 3]  # counts: no 0.5 record
    assert round_ticks(0) == [0, 0.2, 0.4, 0.6, 0.8, 1]  # nothing yet: an axis all the same
    assert round_step(7_000) == 2_000 and round_step(49) == 10 and round_step(51) == 20
    assert round_ticks(200, unit=60) == [0, 60, 120, 180, 240]  # whole minutes
    bars = bar_plot("Records", [("11-01", 262), ("11-02", 40)], "records")
    assert tick_labels(bars) == ["0", "100", "200", "300"]
    seconds = line_plot("Duration", {"tokyo": hourly(3, 9.8)}, "duration", "none")
    assert tick_labels(seconds) == ["0 s", "2 s", "4 s", "6 s", "8 s", "10 s"]
    minutes = line_plot("Duration", {"tokyo": hourly(3, 1_000.0)}, "duration", "none")
    assert tick_labels(minutes) == ["0 s", "5 min", "10 min", "15 min", "20 min"]


def legend_colours(svg: str) -> dict[str, str]:
    return dict(
        (name, colour) for colour, name in re.findall(r"color:(#\w+)\">&#9632; ([\w-]+)", svg)
    )


def test_a_link_keeps_its_colour_in_every_plot() -> None:
    # tokyo was red in one plot and blue in the next: colours went by place in each plot's list
    durations = {"tokyo": hourly(3, 5.0), "beijing": hourly(3, 2.0)}
    lags = {"tokyo": hourly(2, 3600.0), "algiers": hourly(2, 60.0), "beijing": hourly(2, 60.0)}
    first = legend_colours(line_plot("Duration", durations, "duration", "none"))
    second = legend_colours(line_plot("Lag", lags, "lag", "none"))
    assert first["tokyo"] == second["tokyo"] == link_colour("tokyo")
    assert first["beijing"] == second["beijing"] == link_colour("beijing")
    assert link_colour("tokyo") in PALETTE
    # spread over the palette, not all one colour
    assert len({link_colour(f"link-{n}") for n in range(100)}) == len(PALETTE)


def test_failed_runs_are_marked_in_the_duration_plot() -> None:
    runs = [
        {"link": "tokyo", "mode": "incremental", "status": status, "finished_at": at, "seconds": s}
        for status, at, s in [
            ("ok", START, 2.0),
            ("failed", START + timedelta(hours=1), 19.0),  # the review's DNS failure
            ("ok", START + timedelta(hours=2), 2.5),
            ("stopped", START + timedelta(hours=3), 4.0),
        ]
    ]
    durations, lags, failed = history_series(runs)
    assert failed == {"tokyo": {START + timedelta(hours=1), START + timedelta(hours=3)}}
    assert lags == {"tokyo": [(START + timedelta(hours=2), 7200.0)]}
    svg = line_plot("Duration", durations, "duration", "none", failed=failed)
    marks = re.findall(r'<path class="failed-run"[^>]*><title>([^<]*)</title>', svg)
    assert marks == [
        "tokyo 2026-11-01 01:00:00Z: 19 s, failed",
        "tokyo 2026-11-01 03:00:00Z: 4 s, failed",
    ]
    assert svg.count("<circle") == 2  # the two ok runs
    assert "&#10005; failed run" in svg
    assert "failed run" not in line_plot("Duration", durations, "duration", "none")
