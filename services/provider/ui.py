"""The operator's dashboard at ``/``: one server-rendered page, no external asset.

It shows the node (records per set, deletions, last change), its links (last run, outcome, lag,
counts, last error, and a "harvest now" button that calls the admin API with the admin token the
operator types in), recent harvest runs, quarantined records, the latest consistency reports and
the registry (its network, chain, peers and URLs); and three plots drawn here as inline SVG:
records arriving per day, harvest duration per link, and lag per link over time. It must read on
a laptop screen (1366 pixels wide) without scrolling sideways, hence few, wrapping columns.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from services.provider.registry import RegistryState
from services.provider.state import State
from shared.db import checks as check_store
from shared.db import links as link_store
from shared.db import overview
from shared.db import registry as registry_store
from shared.db.pool import Pool
from shared.urls import safe_url

router = APIRouter()

# a link's last-run counts, in the order the links table lists them
COUNTS = ("added", "updated", "unchanged", "deleted", "refused", "quarantined")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1280px;padding:0 16px;color:#222}
h1{font-size:22px;margin:16px 0 4px}
h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;margin-bottom:8px}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.lag,td.time,td.counts{white-space:nowrap}
.sub{display:block;color:#777;font-size:12px}
.ok{color:#176b1e;font-weight:600}
.failed,.stopped,.inconsistent,.unchecked{color:#b00020;font-weight:600}
.running{color:#a15c00}.muted{color:#777}
.err{color:#b00020;min-width:16em;max-width:420px;overflow-wrap:anywhere}
.plots{display:flex;flex-wrap:wrap;gap:16px}.plots figure{margin:0}
figcaption{font-weight:600;margin-bottom:4px}svg text{font:11px system-ui,sans-serif;fill:#444}
button{cursor:pointer}#token{width:220px}#answer{margin-left:8px}
"""

SCRIPT = """
const box = document.getElementById('token');
box.value = sessionStorage.getItem('wiscat-admin-token') || '';
box.addEventListener('change', () => sessionStorage.setItem('wiscat-admin-token', box.value));
for (const button of document.querySelectorAll('button.harvest')) {
  button.addEventListener('click', async () => {
    const answer = document.getElementById('answer');
    const link = button.dataset.link;
    const response = await fetch('/admin/links/' + encodeURIComponent(link) + '/harvest', {
      method: 'POST', headers: {'Authorization': 'Bearer ' + box.value}});
    const body = await response.json().catch(() => ({}));
    answer.textContent = response.ok
      ? 'harvest of ' + link + ' requested (' + body.requested + ')'
      : 'refused (' + response.status + '): ' + (body.detail || '');
    answer.className = response.ok ? 'ok' : 'failed';
    if (response.ok) { button.disabled = true; button.textContent = 'requested'; }
  });
}
"""


# What the page may do, should a value ever reach it unescaped: run its own script only, fetch
# only from this node, and be framed by no other page (its "harvest now" button takes the admin
# token); its styles are inline.
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src 'sha256-{_SCRIPT_HASH}'; style-src 'unsafe-inline'; "
        "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


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


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{e(empty)}</p>'
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def td(value: object, cls: str = "") -> str:
    attribute = f' class="{cls}"' if cls else ""
    return f"<td{attribute}>{e(value)}</td>"


def num(value: object) -> str:
    return td("-" if value is None else f"{value:,}", "n")


def status(value: str | None) -> str:
    return td(value or "never run", value or "muted")


def stamp(value: datetime | None) -> str:
    return td(when(value), "time")


def counts_cell(values: dict[str, int | None]) -> str:
    """A run's non-zero counts in one cell ("added 40, refused 2"): six columns of mostly zeros
    would not fit a laptop screen next to the error."""
    shown = ", ".join(f"{name} {value:,}" for name, value in values.items() if value)
    return td(shown or "none", "counts" if shown else "counts muted")


# -- plots ---------------------------------------------------------------------------------------

W, H, LEFT, BOTTOM, TOP, RIGHT = 600, 220, 56, 28, 12, 12


def _ticks(low: float, high: float) -> list[float]:
    return [low + (high - low) * i / 4 for i in range(5)]


def bar_plot(title: str, bars: Sequence[tuple[str, int]], y_label: str) -> str:
    """Bars with labels under them (every few), a y axis from 0."""
    top = max([value for _, value in bars] + [1])
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
    return _frame(title, parts, 0, top, y_label, "day (UTC)", legend=[])


# A plot shows at most one series per colour, and at most this many points of each: a node
# with 150 links, each run hourly, made a page of megabytes (a circle per run and link) that
# browsers drew slowly and no one could read.
MAX_SERIES = len(PALETTE)
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
    y_format: Any = duration,
) -> str:
    """One line per series over time; points carry a tooltip. Many series: the
    :data:`MAX_SERIES` highest, as the title says; long ones thinned to :data:`MAX_POINTS`."""
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
    top = max(max(v for _, v in points), 1.0)
    inner_w, inner_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def xy(t: datetime, v: float) -> tuple[float, float]:
        return (
            LEFT + inner_w * (t.timestamp() - t0) / (t1 - t0),
            TOP + inner_h * (1 - v / top),
        )

    parts = []
    legend = []
    for index, (name, values) in enumerate(sorted(series.items())):
        color = PALETTE[index % len(PALETTE)]
        legend.append((name, color))
        coords = [xy(t, v) for t, v in values]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>'
            )
        for (x, y), (t, v) in zip(coords, values, strict=True):
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
    return _frame(title, parts, 0, top, y_label, "time (UTC)", legend, y_format)


def _frame(
    title: str,
    parts: list[str],
    low: float,
    high: float,
    y_label: str,
    x_label: str,
    legend: list[tuple[str, str]],
    y_format: Any = lambda v: f"{v:,.0f}",
) -> str:
    inner_h = H - TOP - BOTTOM
    axes = [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + inner_h}" stroke="#999"/>',
        f'<line x1="{LEFT}" y1="{TOP + inner_h}" x2="{W - RIGHT}" y2="{TOP + inner_h}"'
        ' stroke="#999"/>',
        f'<text x="12" y="{TOP + inner_h / 2}" transform="rotate(-90 12 {TOP + inner_h / 2})"'
        f' text-anchor="middle">{e(y_label)}</text>',
    ]
    for tick in _ticks(low, high):
        y = TOP + inner_h * (1 - (tick - low) / (high - low or 1))
        axes.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{e(y_format(tick))}</text>'
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#eee"/>'
        )
    keys = "".join(
        f'<span style="color:{color}">&#9632; {e(name)}</span> ' for name, color in legend
    )
    return (
        f"<figure><figcaption>{e(title)}</figcaption>"
        f'<svg class="plot" role="img" width="{W}" height="{H}" viewBox="0 0 {W} {H}">'
        f"<title>{e(title)}</title>{''.join(axes)}{''.join(parts)}</svg>"
        f'<div>{keys}<span class="muted">x: {e(x_label)}</span></div></figure>'
    )


def history_series(
    runs: list[dict[str, Any]],
) -> tuple[dict[str, list[tuple[datetime, float]]], dict[str, list[tuple[datetime, float]]]]:
    """Per link: the duration of each run, and its lag when each successful run ended (the time
    since the one before; what a harvester of this node could have missed)."""
    durations: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    lags: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    previous_ok: dict[str, datetime] = {}
    for run in runs:
        finished = run["finished_at"]
        durations[run["link"]].append((finished, float(run["seconds"])))
        if run["status"] == "ok" and run["mode"] != "window":
            if run["link"] in previous_ok:
                lag = (finished - previous_ok[run["link"]]).total_seconds()
                lags[run["link"]].append((finished, lag))
            previous_ok[run["link"]] = finished
    return dict(durations), dict(lags)


# -- the page ------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def dashboard(request: Request, state: State) -> HTMLResponse:
    settings = state.settings
    pool = state.pool
    now = datetime.now(UTC)
    sets = await overview.sets_overview(pool)
    links = await overview.links_overview(pool)
    runs = await link_store.recent_runs(pool, None, 20)
    quarantine = await link_store.recent_quarantine(pool, None, 20)
    reports = await check_store.recent_reports(pool, None, 10)
    arrivals = await overview.arrivals_per_day(pool, 30)
    durations, lags = history_series(await overview.run_history(pool, 7))
    registry = await registry_section(request, pool)

    set_rows = [
        [
            td(s["spec"]),
            td(s["kind"]),
            num(s["live"]),
            num(s["deleted"]),
            stamp(s["last_change"]),
        ]
        for s in sets
    ]
    link_rows = []
    for link in links:
        lag = (now - link["last_success_at"]).total_seconds() if link["last_success_at"] else None
        late = lag is not None and lag > 2 * link["every"].total_seconds()
        mapping = f"{link['remote_set'] or '(all)'} → {link['local_set']}"
        link_rows.append(
            [
                td(link["name"]),
                f'<td>{e(safe_url(link["base_url"]))}<span class="sub">{e(mapping)}</span></td>',
                td("yes" if link["enabled"] else "no"),
                stamp(link["finished_at"] or link["started_at"]),
                status(link["status"]),
                td(duration(lag), "lag failed" if late else "lag"),
                counts_cell({name: link[name] for name in COUNTS}),
                td(link["last_error"] or "", "err"),
                f'<td><button class="harvest" data-link="{e(link["name"])}">'
                "harvest now</button></td>",
            ]
        )
    run_rows = [
        [
            td(run["id"]),
            td(run["link"]),
            td(run["mode"]),
            status(run["status"]),
            stamp(run["started_at"]),
            td(
                duration((run["finished_at"] - run["started_at"]).total_seconds())
                if run["finished_at"]
                else "running",
                "time",
            ),
            num(run["pages"]),
            counts_cell({name: run[name] for name in COUNTS}),
            td(run["error"] or "", "err"),
        ]
        for run in runs
    ]
    quarantine_rows = [
        [
            td(q["id"], "n"),
            stamp(q["received_at"]),
            td(q["link"] or "(a removed link)"),
            td(q["identifier"]),
            td(q["reason"], "err"),
        ]
        for q in quarantine
    ]
    report_rows = []
    for report in reports:
        for peer in report["report"]["peers"]:
            counts = ", ".join(f"{k} {v}" for k, v in peer.get("counts", {}).items() if v)
            outcome = peer["reason"] if peer["status"] != "ok" else (counts or "consistent")
            report_rows.append(
                [
                    stamp(report["finished_at"]),
                    td(report["check_name"] or "-"),
                    td(report["set_spec"]),
                    td(report["outcome"], report["outcome"]),
                    td(peer["url"]),
                    td(outcome, "" if outcome == "consistent" else "err"),
                ]
            )
    day_bars = _days(arrivals, now)

    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wiscat {e(settings.gisc_name)}</title><link rel="icon" href="data:,">
<style>{STYLE}</style></head>
<body>
<h1>wiscat node {e(settings.gisc_name)}</h1>
<p>Own set <b>{e(settings.own_set)}</b> · <a href="/oai?verb=Identify">OAI-PMH</a> ·
<a href="/metrics">metrics</a> · <a href="/wis/monitor.json">WIS monitoring</a> ·
<a href="/urls">registry URLs</a> · page made {e(when(now))}</p>

<h2>Catalogue</h2>
{table(["set", "kind", "live", "deleted", "last change"], set_rows, "no sets yet")}

<h2>Plots</h2>
<div class="plots">
{bar_plot("Records arriving per day (last 30 days)", day_bars, "records")}
{line_plot("Harvest duration per link (last 7 days)", durations, "duration", "no runs yet")}
{
        line_plot(
            "Lag per link: time since the previous successful run",
            lags,
            "lag",
            "no link has two successful runs yet",
        )
    }
</div>

<h2>Links</h2>
<p>Admin token <input id="token" type="password" autocomplete="off"
placeholder="WISCAT_ADMIN_TOKEN"> for "harvest now"<span id="answer"></span></p>
{
        table(
            [
                "link",
                "peer and sets",
                "enabled",
                "last run",
                "outcome",
                "lag",
                "last run's records",
                "last error",
                "",
            ],
            link_rows,
            "no links: add one with `wiscat link add`",
        )
    }

<h2>Recent harvest runs</h2>
{
        table(
            [
                "run",
                "link",
                "mode",
                "status",
                "started",
                "took",
                "pages",
                "records",
                "error",
            ],
            run_rows,
            "no runs yet",
        )
    }

<h2>Quarantined records</h2>
<p class="muted">A record's stored bytes: <code>wiscat link quarantine --raw ID</code>, or
<code>GET /admin/quarantine/ID</code> with the admin token.</p>
{table(["id", "received", "link", "identifier", "reason"], quarantine_rows, "nothing quarantined")}

<h2>Consistency reports</h2>
{
        table(
            ["finished", "check", "set", "outcome", "peer", "found"],
            report_rows,
            "no reports: see `wiscat checks add`",
        )
    }

<h2>Registry</h2>
{registry}
<script>{SCRIPT}</script>
</body></html>"""
    return HTMLResponse(page, headers=HEADERS)


async def registry_section(request: Request, pool: Pool) -> str:
    """The registry network this node is in (if any): its chain, its peers, and the URLs."""
    state: RegistryState | None = getattr(request.app.state, "registry", None)
    node = state.node if state else None
    urls = await registry_store.accepted_urls(pool)
    url_rows = [[td(tx.base_url), td(tx.created_at, "time")] for tx in urls]
    if node is None:
        summary = (
            '<p class="muted">This node is in no registry network '
            "(<code>WISCAT_REGISTRY_KEY_FILE</code> is unset).</p>"
        )
        peers = ""
    else:
        tip = await registry_store.chain_tip(pool)
        waiting = await registry_store.pool_size(pool)
        summary = (
            f"<p>Network <b>{e(node.network.name)}</b>: {tip.height if tip else 0} block(s) "
            f"after genesis, {len(urls)} URL(s), {waiting} waiting for a block · "
            '<a href="/urls/form">register a repository</a></p>'
        )
        peer_rows = [
            [
                td(peer.url),
                td(peer.source),
                stamp(peer.last_ok_at),
                num(peer.failures),
                td(peer.last_error or "", "err"),
            ]
            for peer in await registry_store.all_peers(pool)
        ]
        peers = table(
            ["peer", "learnt from", "last answer", "failures", "last error"],
            peer_rows,
            "no peers yet: the key file lists none and no tracker answered",
        )
    return summary + peers + table(["base URL", "accepted"], url_rows, "no registry URLs yet")


def _days(arrivals: list[dict[str, Any]], now: datetime) -> list[tuple[str, int]]:
    counts = {row["day"].date(): row["records"] for row in arrivals}
    start = now.date() - timedelta(days=29)
    return [
        ((start + timedelta(days=n)).strftime("%m-%d"), counts.get(start + timedelta(days=n), 0))
        for n in range(30)
    ]
