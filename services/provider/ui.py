"""The operator's dashboard at ``/``: one server-rendered page, no external asset.

First a status strip (the node, its database, whether its harvester answers, the links that fail
or lag, the latest consistency check); then its links (last run, outcome, lag, counts, last error,
and a "harvest now" button that calls the admin API with the admin token the operator types in);
then three plots (:mod:`wiscat.provider.plots`): harvest duration and lag per link over time,
records arriving per day; then the catalogue (records per set), recent harvest runs, quarantined
records (each viewable on a page of its own, ``/quarantine/ID``), the latest consistency reports
and the registry (its network, chain, peers and URLs). The page reloads itself every
:data:`REFRESH` seconds. It must read on a laptop screen (1366 pixels wide) without scrolling
sideways, hence few, wrapping columns.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import aiohttp
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from wiscat.provider.plots import (
    bar_plot,
    duration,
    e,
    history_series,
    line_plot,
    link_colour,
    when,
)
from wiscat.provider.registry import RegistryState
from wiscat.provider.state import State
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import overview
from wiscat.shared.db import registry as registry_store
from wiscat.shared.db.migrate import not_ready
from wiscat.shared.db.pool import Pool
from wiscat.shared.settings import Settings
from wiscat.shared.urls import safe_url, url_host
from wiscat.shared.version import VERSION

router = APIRouter()

# The page reloads itself this often (a meta refresh: a GET of the page alone, which repeats no
# "harvest now"); ?refresh=N changes it, ?refresh=0 stops it.
REFRESH = 60
# how long the page waits for the harvester's /healthz
PROBE_SECONDS = 2.0
# a quarantined record's page shows this much of its bytes; the CLI gives them whole
RAW_SHOWN = 64 * 1024

# a link's last-run counts, in the order the links table lists them
COUNTS = ("added", "updated", "unchanged", "deleted", "refused", "quarantined")

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
.strip{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.strip .cell{border:1px solid #ddd;border-radius:4px;padding:4px 10px;min-width:150px;
max-width:420px;overflow-wrap:anywhere}
.strip .cell.ok{border-color:#176b1e;background:#eef7ef}
.strip .cell.failed,.strip .cell.stopped,.strip .cell.inconsistent,.strip .cell.unchecked{
border-color:#b00020;background:#fdeeee}
.strip .cell .sub{font-weight:400}td.link{white-space:nowrap}
table.facts{width:auto}
pre.raw{white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f7f7;padding:8px;
border:1px solid #eee;font-size:12px}
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
# a quarantined record's page shows what a peer sent: no script at all
RECORD_HEADERS = {
    **HEADERS,
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
}


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


# -- the page ------------------------------------------------------------------------------------


def harvester_address(settings: Settings) -> str:
    """Where the harvester's health port is, seen from this provider: ``WISCAT_HARVESTER_URL``,
    or else the address both bind to (``WISCAT_PROVIDER_HOST``; loopback when that is every
    address) and ``WISCAT_HARVESTER_PORT``."""
    if settings.harvester_url:
        return settings.harvester_url
    host = settings.provider_host
    try:
        everywhere = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        everywhere = False
    return f"http://{url_host('127.0.0.1' if everywhere else host)}:{settings.harvester_port}"


async def probe_harvester(address: str, seconds: float = PROBE_SECONDS) -> str | None:
    """Why the harvester at ``address`` is not alive (its ``/healthz`` does not answer ``ok``
    within ``seconds``), or None when it is."""
    timeout = aiohttp.ClientTimeout(total=seconds)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(address + "/healthz", allow_redirects=False) as response,
        ):
            body = await response.content.read(64)
            if response.status == 200 and body.strip() == b"ok":
                return None
            return f"/healthz answered {response.status}, not ok"
    except TimeoutError:
        return f"/healthz did not answer within {seconds:g} s"
    except aiohttp.ClientConnectionError as exc:
        return f"/healthz cannot be reached: {type(exc).__name__}"


def strip_cell(key: str, title: str, value: str, cls: str, detail: str = "") -> str:
    sub = f'<span class="sub">{detail}</span>' if detail else ""
    return f'<div class="cell {cls}" id="strip-{key}"><b>{e(title)}</b> {value}{sub}</div>'


def status_strip(
    settings: Settings,
    database: str | None,
    harvester: str | None,
    address: str,
    links: list[dict[str, Any]],
    late: set[str],
    report: dict[str, Any] | None,
    now: datetime,
) -> str:
    """The page's first line: the node, its database, whether its harvester is alive, the links
    that fail or lag, and the latest consistency check; each cell says what it is based on."""
    cells = [
        strip_cell(
            "node",
            "node",
            f"{e(settings.gisc_name)} · wiscat {e(VERSION)}",
            "",
            f"own set {e(settings.own_set)}",
        ),
        strip_cell(
            "database",
            "database",
            "up" if database is None else "down",
            "ok" if database is None else "failed",
            "answers, schema current" if database is None else e(database),
        ),
    ]
    running = [link["name"] for link in links if link["status"] == "running"]
    ended = [link["finished_at"] for link in links if link["finished_at"]]
    seen = (f"; {len(running)} run(s) in progress" if running else "") + (
        f"; last run ended {when(max(ended))}" if ended else "; no run has ended yet"
    )
    cells.append(
        strip_cell(
            "harvester",
            "harvester",
            "alive" if harvester is None else "not answering",
            "ok" if harvester is None else "failed",
            f"probed {e(address)}/healthz from this provider"
            + ("" if harvester is None else f": {e(harvester)}")
            + (e(seen) if database is None else ""),
        )
    )
    if database is None:
        failing = sorted(
            link["name"]
            for link in links
            if link["enabled"] and link["status"] in ("failed", "stopped")
        )
        lagging = sorted(late - set(failing))
        named = ", ".join(failing + lagging)
        cells.append(
            strip_cell(
                "links",
                "links failing",
                f"{len(failing)} of {len(links)}"
                + (f", {len(lagging)} lagging" if lagging else ""),
                "failed" if failing or lagging else "ok",
                e(named) if named else "every enabled link's last run ended ok, none lagging",
            )
        )
        if report is None:
            cells.append(
                strip_cell("check", "last check", "none", "muted", "see `wiscat checks add`")
            )
        else:
            cells.append(
                strip_cell(
                    "check",
                    "last check",
                    e(report["outcome"]),
                    e(report["outcome"]),
                    f"{e(report['check_name'] or '-')} of {e(report['set_spec'])}, "
                    f"{e(when(report['finished_at']))}",
                )
            )
    return f'<div class="strip">{"".join(cells)}</div>'


def refresh_note(refresh: int) -> str:
    if refresh == 0:
        return 'not refreshed (<a href="/">refresh every 60 s</a>)'
    return f'refreshed every {refresh} s (<a href="/?refresh=0">stop</a>)'


def page_head(title: str, refresh: int) -> str:
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{meta}
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title><link rel="icon" href="data:,">
<style>{STYLE}</style></head>"""


@router.get("/", response_class=HTMLResponse)
async def dashboard(
    request: Request,
    state: State,
    refresh: Annotated[int, Query(ge=0, le=86400, description="seconds; 0: never")] = REFRESH,
) -> HTMLResponse:
    """The node's dashboard page (HTML), refreshed every ``refresh`` seconds (0: never)."""
    settings = state.settings
    pool = state.pool
    now = datetime.now(UTC)
    address = harvester_address(settings)
    harvester = asyncio.ensure_future(probe_harvester(address))
    database = await not_ready(pool, settings.probe_timeout_seconds)
    if database is not None:
        # what can be known without the database: the page says so, and is tried again
        strip = status_strip(settings, database, await harvester, address, [], set(), None, now)
        page = f"""{page_head(f"wiscat {settings.gisc_name}", refresh or REFRESH)}
<body><h1>wiscat node {e(settings.gisc_name)}</h1>{strip}
<p>page made {e(when(now))}, {refresh_note(refresh or REFRESH)}</p></body></html>"""
        return HTMLResponse(page, status_code=503, headers={**HEADERS, "Retry-After": "30"})
    try:
        sets = await overview.sets_overview(pool)
        links = await overview.links_overview(pool)
        runs = await link_store.recent_runs(pool, None, 20)
        quarantine = await link_store.recent_quarantine(pool, None, 20)
        reports = await check_store.recent_reports(pool, None, 10)
        arrivals = await overview.arrivals_per_day(pool, 30)
        durations, lags, failed = history_series(await overview.run_history(pool, 7))
        registry = await registry_section(request, pool)
    except BaseException:
        harvester.cancel()
        raise
    probed = await harvester

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
    lagging: set[str] = set()
    for link in links:
        lag = (now - link["last_success_at"]).total_seconds() if link["last_success_at"] else None
        late = lag is not None and lag > 2 * link["every"].total_seconds()
        if late and link["enabled"]:
            lagging.add(link["name"])
        mapping = f"{link['remote_set'] or '(all)'} → {link['local_set']}"
        link_rows.append(
            [
                f'<td class="link"><span class="key" style="color:{link_colour(link["name"])}">'
                f"&#9632;</span> {e(link['name'])}</td>",
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
            f'<td class="n"><a href="/quarantine/{q["id"]}">{q["id"]}</a></td>',
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

    strip = status_strip(
        settings, None, probed, address, links, lagging, reports[0] if reports else None, now
    )
    page = f"""{page_head(f"wiscat {settings.gisc_name}", refresh)}
<body>
<h1>wiscat node {e(settings.gisc_name)}</h1>
{strip}
<p>Own set <b>{e(settings.own_set)}</b> · <a href="/oai?verb=Identify">OAI-PMH</a> ·
<a href="/metrics">metrics</a> · <a href="/wis/monitor.json">WIS monitoring</a> ·
<a href="/urls">registry URLs</a> · page made {e(when(now))}, {refresh_note(refresh)}</p>

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

<h2>Plots</h2>
<div class="plots">
{
        line_plot(
            "Harvest duration per link (last 7 days)",
            durations,
            "duration",
            "no runs yet",
            failed=failed,
        )
    }
{
        line_plot(
            "Lag per link: time since the previous successful run",
            lags,
            "lag",
            "no link has two successful runs yet",
        )
    }
{bar_plot("Records arriving per day (last 30 days)", day_bars, "records")}
</div>

<h2>Catalogue</h2>
{table(["set", "kind", "live", "deleted", "last change"], set_rows, "no sets yet")}

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
<p class="muted">A record's reason and stored bytes: its id below, or
<code>wiscat link quarantine --raw ID</code>.</p>
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


@router.get("/quarantine/{quarantine_id}", response_class=HTMLResponse)
async def quarantined_record(
    state: State, quarantine_id: Annotated[int, Path(ge=1, le=2**63 - 1)]
) -> HTMLResponse:
    """One quarantined record: what is known of it, its reason, and its bytes as text (escaped,
    the first :data:`RAW_SHOWN` bytes)."""
    row = await link_store.quarantined_record(state.pool, quarantine_id)
    title = f"quarantined record {quarantine_id}"
    if row is None:
        body = (
            f'<p class="failed">No quarantined record {quarantine_id}: there never was one, '
            "or it outlived WISCAT_HISTORY_RETENTION_DAYS.</p>"
        )
        status_code = 404
    else:
        raw: bytes = row["raw"] or b""
        shown = raw[:RAW_SHOWN].decode("utf-8", errors="replace")
        cut = (
            f"the first {RAW_SHOWN:,} of {len(raw):,} bytes; the whole: "
            f"<code>wiscat link quarantine --raw {quarantine_id}</code>"
            if len(raw) > RAW_SHOWN
            else f"{len(raw):,} bytes"
        )
        facts = [
            ("link", row["link"] or "(a removed link)"),
            ("run", row["run_id"] if row["run_id"] is not None else "-"),
            ("page", row["page"] if row["page"] is not None else "-"),
            ("received", when(row["received_at"])),
            ("identifier", row["identifier"] or "-"),
        ]
        rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in facts)
        body = (
            f'<table class="facts">{rows}<tr><th>reason</th>'
            f'<td class="err" id="reason">{e(row["reason"])}</td></tr></table>'
            f"<h2>Stored bytes ({cut})</h2>"
            f'<pre class="raw" id="raw">{e(shown)}</pre>'
        )
        status_code = 200
    page = f"""{page_head(f"wiscat {state.settings.gisc_name}: {title}", 0)}
<body><h1>{e(title)}</h1><p><a href="/">dashboard</a></p>{body}</body></html>"""
    return HTMLResponse(page, status_code=status_code, headers=RECORD_HEADERS)


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
