"""The dashboard's line plots stay readable, and small, however many links and runs a node has."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from wiscat.provider.dashboard.plots import (
    FAILED,
    MAX_POINTS,
    MAX_SERIES,
    PALETTE,
    bar_plot,
    history_series,
    line_plot,
    link_keys,
    round_step,
    round_ticks,
    thinned,
)

START = datetime(2026, 11, 1, tzinfo=UTC)


def drawn(
    title: str, series: dict[str, list[tuple[datetime, float]]], y_label: str, **kwargs: Any
) -> str:
    """A line plot of ``series``, each link keyed by its place among the series' names."""
    return line_plot(title, series, y_label, "none", link_keys(series), **kwargs)


def hourly(count: int, value: float, spike_at: int | None = None) -> list[tuple[datetime, float]]:
    return [
        (START + timedelta(hours=n), value * (10 if n == spike_at else 1)) for n in range(count)
    ]


def test_many_links_show_the_highest_and_say_so() -> None:
    # 150 links, each run hourly for a week: 25,200 points; it was a page of megabytes
    series = {f"link-{n:03d}": hourly(168, 1.0 + n) for n in range(150)}
    svg = drawn("Harvest duration per link (last 7 days)", series, "duration")
    assert len(svg) < 300_000
    assert "Harvest duration per link (last 7 days): the 8 highest of 150 links" in svg
    legend = re.findall(r"&#(?:9632|9476); (link-\d+)", svg)
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
    svg = drawn("Lag", series, "lag")
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
    seconds = drawn("Duration", {"tokyo": hourly(3, 9.8)}, "duration")
    assert tick_labels(seconds) == ["0 s", "2 s", "4 s", "6 s", "8 s", "10 s"]
    minutes = drawn("Duration", {"tokyo": hourly(3, 1_000.0)}, "duration")
    assert tick_labels(minutes) == ["0 s", "5 min", "10 min", "15 min", "20 min"]


def legend_colours(svg: str) -> dict[str, str]:
    return dict(
        (name, colour) for colour, name in re.findall(r"color:(#\w+)\">&#9632; ([\w-]+)", svg)
    )


def test_a_link_keeps_its_colour_in_every_plot() -> None:
    # tokyo was red in one plot and blue in the next: colours went by place in each plot's list
    keys = link_keys(["algiers", "beijing", "tokyo"])
    durations = {"tokyo": hourly(3, 5.0), "beijing": hourly(3, 2.0)}
    lags = {"tokyo": hourly(2, 3600.0), "algiers": hourly(2, 60.0), "beijing": hourly(2, 60.0)}
    first = legend_colours(line_plot("Duration", durations, "duration", "none", keys))
    second = legend_colours(line_plot("Lag", lags, "lag", "none", keys))
    assert first["tokyo"] == second["tokyo"] == keys["tokyo"].colour == PALETTE[2]
    assert first["beijing"] == second["beijing"] == keys["beijing"].colour == PALETTE[1]


def lab(colour: str) -> tuple[float, float, float]:
    """``colour`` (#rrggbb, sRGB) in CIELAB (D65)."""
    r, g, b = (int(colour[n : n + 2], 16) / 255 for n in (1, 3, 5))
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    fx, fy, fz = (
        t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in (x, y, z)
    )
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def apart(one: str, other: str) -> float:
    """How far apart two colours look (CIE 1976 ΔE: 2.3 is just noticeable)."""
    return math.dist(lab(one), lab(other))


# the review's names of fifteen GISCs, and one more: bravo and charlie shared a purple, and exeter,
# pretoria and toulouse were drawn in a red close to the failures' (#d62728, 14 from FAILED)
GISCS = [
    "beijing",
    "brasilia",
    "cairo",
    "casablanca",
    "exeter",
    "jeddah",
    "melbourne",
    "moscow",
    "new-delhi",
    "offenbach",
    "pretoria",
    "seoul",
    "tehran",
    "tokyo",
    "toulouse",
    "washington",
]


def test_sixteen_links_get_sixteen_colours_none_near_the_failure_red() -> None:
    assert apart("#d62728", FAILED) < 20 and apart("#ff0000", FAILED) < 48  # what is excluded
    keys = link_keys(reversed(GISCS))
    colours = [keys[name].colour for name in GISCS]
    assert colours == list(PALETTE[:16])  # by place in the sorted list, whatever the order given
    assert len(set(colours)) == 16 and not any(key.dashed for key in keys.values())
    for colour in PALETTE:
        assert apart(colour, FAILED) >= 48, colour
    for n, colour in enumerate(PALETTE):
        for other in PALETTE[n + 1 :]:
            assert apart(colour, other) >= 20, (colour, other)


def test_past_the_palette_lines_are_dashed_and_named_at_their_end() -> None:
    names = [f"link-{n:02d}" for n in range(len(PALETTE) + 2)]
    keys = link_keys(names, others=["gone"])
    assert keys["link-18"].colour == keys["link-00"].colour and keys["link-18"].dashed
    assert not keys["link-17"].dashed
    assert keys["gone"] == keys["link-00"].__class__(PALETTE[20 % len(PALETTE)], dashed=True)
    # link-00 and link-18 share blue in one plot: dashed, and each named at its right end
    series = {"link-00": hourly(3, 5.0), "link-18": hourly(3, 2.0), "link-01": hourly(3, 1.0)}
    svg = line_plot("Duration", series, "duration", "none", keys)
    assert svg.count('stroke-dasharray="6,3"') == 1
    assert re.findall(r'<text class="end"[^>]*>([^<]*)</text>', svg) == ["link-00", "link-18"]
    assert "&#9476; link-18" in svg and "&#9632; link-00" in svg
    # apart, no name at the end
    alone = line_plot("Duration", {"link-00": hourly(3, 5.0)}, "duration", "none", keys)
    assert 'class="end"' not in alone


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
    svg = drawn("Duration", durations, "duration", failed=failed)
    marks = re.findall(r'<path class="failed-run"[^>]*><title>([^<]*)</title>', svg)
    assert marks == [
        "tokyo 2026-11-01 01:00:00Z: 19 s, failed",
        "tokyo 2026-11-01 03:00:00Z: 4 s, failed",
    ]
    assert svg.count("<circle") == 2  # the two ok runs
    assert "&#10005; failed run" in svg
    assert "failed run" not in drawn("Duration", durations, "duration")
