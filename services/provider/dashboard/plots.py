"""The dashboard's plots, drawn as inline SVG on the server (no asset, no script): records arriving
per day, and per link the duration of each run (failed ones marked) and its lag.

Each link keeps one colour (:func:`link_keys`) in every plot and in the links table; y axes
count in round steps (:func:`round_ticks`).
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# A link's colour goes by its place among the links (:func:`link_keys`). Eighteen colours that
# differ from each other (at least 20 apart in CIELAB) and from FAILED (at least 48; pure red is
# 40): red means a failed run, so no link is drawn in it. Tableau's ten without red and brown lead.
PALETTE = (
    "#1f77b4",  # blue
    "#ff7f0e",  # orange
    "#2ca02c",  # green
    "#9467bd",  # purple
    "#17becf",  # cyan
    "#bcbd22",  # olive
    "#e377c2",  # pink
    "#7f7f7f",  # grey
    "#000000",  # black
    "#0b5e3a",  # dark green
    "#4b0082",  # indigo
    "#8c6d31",  # ochre
    "#393b79",  # navy
    "#b8860b",  # dark gold
    "#00a087",  # teal
    "#2f4f4f",  # slate
    "#637939",  # moss
    "#7b4173",  # plum
)
FAILED = "#b00020"  # a failed run's mark in the duration plot


def e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2g} s"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# -- plots ---------------------------------------------------------------------------------------

W, H, LEFT, BOTTOM, TOP, RIGHT = 600, 220, 56, 28, 12, 12


def _ticks(low: float, high: float) -> list[float]:
    return [low + (high - low) * i / 4 for i in range(5)]


@dataclass(frozen=True)
class Key:
    """How a link is drawn: its colour, and, once the palette has gone round, dashed."""

    colour: str
    dashed: bool = False

    @property
    def sign(self) -> str:
        """Its sign in a legend and in the links table: a square, or a dashed line."""
        return "&#9476;" if self.dashed else "&#9632;"


def link_keys(links: Iterable[str], others: Iterable[str] = ()) -> dict[str, Key]:
    """Each link's key, the same in every plot and in the links table: by its place among
    ``links`` (sorted), then ``others`` (links removed since, still in the history). Past the
    palette, colours come round again with dashed lines, and a plot names such lines at their
    right end."""
    current = sorted(set(links))
    names = current + sorted(set(others) - set(current))
    return {
        name: Key(PALETTE[n % len(PALETTE)], dashed=n >= len(PALETTE))
        for n, name in enumerate(names)
    }


def round_step(span: float, unit: float = 1.0, most: int = 5) -> float:
    """The smallest step of 1, 2 or 5 times a power of ten (of ``unit``) that covers ``span`` in
    at most ``most`` steps: ticks an eye reads (0, 50, 100, not 0, 88, 175, 262)."""
    rough = max(span / unit / most, 1e-9)
    power = 10.0 ** math.floor(math.log10(rough))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= rough * (1 - 1e-9):
            return factor * power * unit
    raise AssertionError("unreachable")  # 10 * power >= rough always


def round_ticks(high: float, unit: float = 1.0, least: float = 0.0) -> list[float]:
    """Ticks from 0 by a round step (:func:`round_step`, and at least ``least``: 1 for counts),
    the last at or above ``high``: the top of the axis."""
    high = high if high > 0 else unit
    step = max(round_step(high, unit), least)
    count = math.ceil(high / step - 1e-9)
    # 3 * 0.1 is 0.30000000000000004: the labels must read 0.3
    return [float(f"{step * n:.12g}") for n in range(count + 1)]


def duration_unit(high: float) -> float:
    """The unit round duration ticks count in: seconds, minutes or hours (200 s is not a round
    number of minutes; 5 min is)."""
    return 1.0 if high < 120 else 60.0 if high < 7200 else 3600.0


def bar_plot(title: str, bars: Sequence[tuple[str, int]], y_label: str) -> str:
    """Bars with labels under them (every few), a y axis from 0 in round steps."""
    ticks = round_ticks(max([value for _, value in bars] + [1]), least=1.0)
    top = ticks[-1]
    inner_w, inner_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    step = inner_w / max(len(bars), 1)
    parts = []
    for index, (label, value) in enumerate(bars):
        height = inner_h * value / top
        x = LEFT + index * step
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{TOP + inner_h - height:.1f}" width="{max(step - 2, 1):.1f}"'
            f' height="{height:.1f}" fill="{PALETTE[0]}"><title>{e(label)}: {value}</title></rect>'
        )
        if index % max(len(bars) // 6, 1) == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{H - 10}" text-anchor="middle">{e(label)}</text>'
            )
    return _frame(title, parts, ticks, y_label, "day (UTC)", legend=[])


# A plot shows at most this many series (the highest), and at most this many points of each: a node
# with 150 links, each run hourly, made a page of megabytes (a circle per run and link) that
# browsers drew slowly and no one could read.
MAX_SERIES = 8
MAX_POINTS = 200


def _highest(
    series: dict[str, list[tuple[datetime, float]]], limit: int
) -> dict[str, list[tuple[datetime, float]]]:
    """The ``limit`` series that reach the highest values (the slowest links, the longest lags):
    those worth a look."""
    ranked = sorted(series.items(), key=lambda item: (-max(v for _, v in item[1]), item[0]))
    return dict(ranked[:limit])


def thinned(values: list[tuple[datetime, float]], limit: int) -> list[tuple[datetime, float]]:
    """At most ``limit`` points of ``values`` (in time order): of each run of consecutive points,
    the highest, so that a spike is never thinned away."""
    if len(values) <= limit:
        return values
    step = len(values) / limit
    return [
        max(values[int(n * step) : int((n + 1) * step)], key=lambda point: point[1])
        for n in range(limit)
    ]


def line_plot(
    title: str,
    series: dict[str, list[tuple[datetime, float]]],
    y_label: str,
    empty: str,
    keys: Mapping[str, Key],
    y_format: Any = duration,
    failed: dict[str, set[datetime]] | None = None,
) -> str:
    """One line per series over time, in the link's key (``keys``); points carry a tooltip, those
    ``failed`` names (the runs that failed) are drawn as a cross. Many series: the
    :data:`MAX_SERIES` highest, as the title says; long ones thinned to :data:`MAX_POINTS`."""
    failed = failed or {}
    series = {name: values for name, values in series.items() if values}
    if len(series) > MAX_SERIES:
        title = f"{title}: the {MAX_SERIES} highest of {len(series)} links"
        series = _highest(series, MAX_SERIES)
    series = {name: thinned(values, MAX_POINTS) for name, values in series.items()}
    points = [p for values in series.values() for p in values]
    if not points:
        return (
            f'<figure><figcaption>{e(title)}</figcaption><p class="muted">{e(empty)}</p></figure>'
        )
    t0 = min(t for t, _ in points).timestamp()
    t1 = max(t for t, _ in points).timestamp()
    if t1 - t0 < 60:  # one point, or a few close together: centre them in a minute
        t0, t1 = (t0 + t1) / 2 - 30, (t0 + t1) / 2 + 30
    clock = "%H:%M:%S" if t1 - t0 < 600 else "%m-%d %H:%M"
    highest = max(v for _, v in points)
    ticks = round_ticks(highest, duration_unit(highest) if y_format is duration else 1.0)
    top = ticks[-1]
    inner_w, inner_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def xy(t: datetime, v: float) -> tuple[float, float]:
        return (
            LEFT + inner_w * (t.timestamp() - t0) / (t1 - t0),
            TOP + inner_h * (1 - v / top),
        )

    parts = []
    legend = []
    any_failed = False
    # past the palette, two shown lines may share a colour: each such line says its name
    shared = Counter(keys[name].colour for name in series)
    for name, values in sorted(series.items()):
        key = keys[name]
        color = key.colour
        legend.append((name, key))
        coords = [xy(t, v) for t, v in values]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            dashes = ' stroke-dasharray="6,3"' if key.dashed else ""
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"'
                f"{dashes}/>"
            )
        if shared[color] > 1:
            x, y = coords[-1]
            parts.append(
                f'<text class="end" x="{x - 4:.1f}" y="{y - 5:.1f}" text-anchor="end"'
                f' style="fill:{color}">{e(name)}</text>'
            )
        for (x, y), (t, v) in zip(coords, values, strict=True):
            if t in failed.get(name, ()):
                any_failed = True
                parts.append(
                    f'<path class="failed-run" d="M{x - 4:.1f},{y - 4:.1f}l8,8m0,-8l-8,8"'
                    f' stroke="{FAILED}" stroke-width="2.5">'
                    f"<title>{e(name)} {when(t)}: {e(y_format(v))}, failed</title></path>"
                )
            else:
                parts.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}">'
                    f"<title>{e(name)} {when(t)}: {e(y_format(v))}</title></circle>"
                )
    for i, tick in enumerate(_ticks(t0, t1)):
        if i % 2 == 0:
            x = LEFT + inner_w * (tick - t0) / (t1 - t0)
            label = datetime.fromtimestamp(tick, UTC).strftime(clock)
            anchor = ("start", "middle", "end")[i // 2]
            parts.append(f'<text x="{x:.1f}" y="{H - 10}" text-anchor="{anchor}">{label}</text>')
    marks = [("failed run", FAILED, "&#10005;")] if any_failed else []
    return _frame(title, parts, ticks, y_label, "time (UTC)", legend, y_format, marks)


def _frame(
    title: str,
    parts: list[str],
    ticks: list[float],
    y_label: str,
    x_label: str,
    legend: list[tuple[str, Key]],
    y_format: Any = lambda v: f"{v:,.0f}",
    marks: Sequence[tuple[str, str, str]] = (),
) -> str:
    """The axes, the y ticks (``ticks``, from 0 to the top of the axis) and the legend around a
    plot's ``parts``."""
    inner_h = H - TOP - BOTTOM
    top = ticks[-1] or 1
    axes = [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + inner_h}" stroke="#999"/>',
        f'<line x1="{LEFT}" y1="{TOP + inner_h}" x2="{W - RIGHT}" y2="{TOP + inner_h}"'
        ' stroke="#999"/>',
        f'<text x="12" y="{TOP + inner_h / 2}" transform="rotate(-90 12 {TOP + inner_h / 2})"'
        f' text-anchor="middle">{e(y_label)}</text>',
    ]
    for tick in ticks:
        y = TOP + inner_h * (1 - tick / top)
        axes.append(
            f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{e(y_format(tick))}</text>"
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#eee"/>'
        )
    keys = "".join(
        f'<span style="color:{key.colour}">{key.sign} {e(name)}</span> ' for name, key in legend
    ) + "".join(
        f'<span style="color:{color}">{sign} {e(name)}</span> ' for name, color, sign in marks
    )
    return (
        f"<figure><figcaption>{e(title)}</figcaption>"
        f'<svg class="plot" role="img" width="{W}" height="{H}" viewBox="0 0 {W} {H}">'
        f"<title>{e(title)}</title>{''.join(axes)}{''.join(parts)}</svg>"
        f'<div>{keys}<span class="muted">x: {e(x_label)}</span></div></figure>'
    )


def history_series(
    runs: list[dict[str, Any]],
) -> tuple[
    dict[str, list[tuple[datetime, float]]],
    dict[str, list[tuple[datetime, float]]],
    dict[str, set[datetime]],
]:
    """Per link: the duration of each run, its lag when each successful run ended (the time
    since the one before; what a harvester of this node could have missed), and when the runs
    that failed (or stopped) ended."""
    durations: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    lags: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    failed: dict[str, set[datetime]] = defaultdict(set)
    previous_ok: dict[str, datetime] = {}
    for run in runs:
        finished = run["finished_at"]
        durations[run["link"]].append((finished, float(run["seconds"])))
        if run["status"] != "ok":
            failed[run["link"]].add(finished)
        elif run["mode"] != "window":
            if run["link"] in previous_ok:
                lag = (finished - previous_ok[run["link"]]).total_seconds()
                lags[run["link"]].append((finished, lag))
            previous_ok[run["link"]] = finished
    return dict(durations), dict(lags), dict(failed)
