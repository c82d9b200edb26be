"""The dashboard's pages, rendered from a view (:mod:`wiscat.provider.dashboard.view`): each
section a function of plain data that returns HTML, every value escaped."""

from __future__ import annotations

from typing import Any

from wiscat.provider.dashboard.markup import (
    COUNTS,
    SCRIPT,
    counts_cell,
    num,
    page_head,
    refresh_note,
    stamp,
    status,
    strip_cell,
    table,
    td,
)
from wiscat.provider.dashboard.plots import Key, bar_plot, duration, e, line_plot, when
from wiscat.provider.dashboard.view import DashboardView, LinkView, RegistryView
from wiscat.shared.db.wis2_serving import Counts
from wiscat.shared.settings import Settings
from wiscat.shared.version import VERSION
from wiscat.shared.wcmp2.urls import collection_url

NBSP = "\u00a0"

# -- the status strip ----------------------------------------------------------------------------


def node_cells(settings: Settings, database: str | None) -> list[str]:
    return [
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


def harvester_cell(
    harvester: str | None, address: str, links: list[LinkView], database: str | None
) -> str:
    running = [link.name for link in links if link.status == "running"]
    ended = [link.finished_at for link in links if link.finished_at]
    seen = (f"; {len(running)} run(s) in progress" if running else "") + (
        f"; last run ended {when(max(ended))}" if ended else "; no run has ended yet"
    )
    return strip_cell(
        "harvester",
        "harvester",
        "alive" if harvester is None else "not answering",
        "ok" if harvester is None else "failed",
        f"probed {e(address)}/healthz from this provider"
        + ("" if harvester is None else f": {e(harvester)}")
        + (e(seen) if database is None else ""),
    )


def links_cell(view: DashboardView) -> str:
    """How many links fail, lag, or have not succeeded yet, and which; or that there is none."""
    if not view.links:
        return strip_cell("links", "links", "none yet", "muted", "add one with `wiscat link add`")
    failing, lagging, waiting = view.failing, view.lagging, view.waiting
    named = ", ".join(failing + lagging + waiting)
    counts = (
        f"{len(failing)} of {len(view.links)}"
        + (f", {len(lagging)} lagging" if lagging else "")
        + (f", {len(waiting)} not yet succeeded" if waiting else "")
    )
    if failing or lagging:
        outcome = "failed"
    elif waiting:
        outcome = "running"
    else:
        outcome = "ok"
    return strip_cell(
        "links",
        "links failing",
        counts,
        outcome,
        e(named) if named else "every enabled link's last run ended ok, none lagging",
    )


def check_cell(report: dict[str, Any] | None) -> str:
    if report is None:
        return strip_cell("check", "last check", "none", "muted", "see `wiscat checks add`")
    return strip_cell(
        "check",
        "last check",
        e(report["outcome"]),
        e(report["outcome"]),
        f"{e(report['check_name'] or '-')} of {e(report['set_spec'])}, "
        f"{e(when(report['finished_at']))}",
    )


def status_strip(
    settings: Settings,
    database: str | None,
    harvester: str | None,
    address: str,
    view: DashboardView | None,
) -> str:
    """The page's first line: the node, its database, whether its harvester is alive, the links
    that fail or lag, and the latest consistency check; each cell says what it is based on.
    Without the database (``view`` None), the first three."""
    links = view.links if view else []
    cells = [*node_cells(settings, database), harvester_cell(harvester, address, links, database)]
    if database is None and view is not None:
        cells += [links_cell(view), check_cell(view.latest_report)]
    return f'<div class="strip">{"".join(cells)}</div>'


# -- the sections --------------------------------------------------------------------------------


def lag_text(link: LinkView) -> str:
    """Its lag; before any success, since when it waits for one. A narrow window wraps the
    words, never a figure from its unit."""
    if link.lag is None:
        return f"never (added {duration(link.age).replace(' ', NBSP)} ago)"
    return duration(link.lag).replace(" ", NBSP)


def link_row(link: LinkView, key: Key) -> list[str]:
    return [
        f'<td class="link"><span class="key" style="color:{key.colour}">'
        f"{key.sign}</span> {e(link.name)}</td>",
        f'<td class="peer">{e(link.base_url)}<span class="sub">{e(link.mapping)}</span></td>',
        td("yes" if link.enabled else "no"),
        stamp(link.last_run),
        status(link.status),
        td(lag_text(link), "lag failed" if link.late else "lag"),
        counts_cell(link.counts, link.refusals),
        td(link.last_error, "err"),
        td(link.hints, "hints"),
    ]


def harvest_button(link: LinkView) -> str:
    return f'<td><button class="harvest" data-link="{e(link.name)}">harvest now</button></td>'


def links_section(links: list[LinkView], keys: dict[str, Key], admin: bool) -> str:
    """The links table; with the admin API on (``admin``), a "harvest now" button on each row
    and the box its token is typed in, else a line that says what would turn them on."""
    headers = [
        "link",
        "peer and sets",
        "enabled",
        "last run",
        "outcome",
        "lag",
        "last run's records",
        "last error",
        "hints",
    ]
    rows = [link_row(link, keys[link.name]) for link in links]
    if admin:
        headers.append("")
        rows = [[*row, harvest_button(link)] for row, link in zip(rows, links, strict=True)]
        above = """<p>Admin token <input id="token" type="password" autocomplete="off"
placeholder="WISCAT_ADMIN_TOKEN"> for "harvest now"<span id="answer"></span></p>"""
    else:
        above = (
            '<p class="muted" id="admin">"harvest now" needs the admin API, which is off: set '
            "<code>WISCAT_ADMIN_TOKEN</code> to turn it on.</p>"
        )
    return f"""<h2>Links</h2>
{above}
{table(headers, rows, "no links: add one with `wiscat link add`")}
"""


def plots_section(view: DashboardView) -> str:
    durations = line_plot(
        "Harvest duration per link (last 7 days)",
        view.durations,
        "duration",
        "no runs yet",
        view.keys,
        failed=view.failed,
    )
    lags = line_plot(
        "Lag per link: time since the previous successful run",
        view.lags,
        "lag",
        "no link has two successful runs yet",
        view.keys,
    )
    days = bar_plot("Records arriving per day (last 30 days)", view.days, "records")
    return f"""<h2>Plots</h2>
<div class="plots">
{durations}
{lags}
{days}
</div>
"""


def catalogue_section(sets: list[dict[str, Any]]) -> str:
    rows = [
        [td(s["spec"]), td(s["kind"]), num(s["live"]), num(s["deleted"]), stamp(s["last_change"])]
        for s in sets
    ]
    return f"""<h2>Catalogue</h2>
{table(["set", "kind", "live", "deleted", "last change"], rows, "no sets yet")}
"""


def run_row(run: dict[str, Any]) -> list[str]:
    took = (
        duration((run["finished_at"] - run["started_at"]).total_seconds())
        if run["finished_at"]
        else "running"
    )
    return [
        td(run["id"]),
        td(run["link"]),
        td(run["mode"]),
        status(run["status"]),
        stamp(run["started_at"]),
        td(took, "time"),
        num(run["pages"]),
        counts_cell({name: run[name] for name in COUNTS}, run["refusals"]),
        td(run["error"] or "", "err"),
    ]


def runs_section(runs: list[dict[str, Any]]) -> str:
    headers = ["run", "link", "mode", "status", "started", "took", "pages", "records", "error"]
    return f"""<h2>Recent harvest runs</h2>
{table(headers, [run_row(run) for run in runs], "no runs yet")}
"""


def quarantine_section(quarantine: list[dict[str, Any]]) -> str:
    rows = [
        [
            f'<td class="n"><a href="/quarantine/{q["id"]}">{q["id"]}</a></td>',
            stamp(q["received_at"]),
            td(q["link"] or "(a removed link)"),
            td(q["identifier"]),
            td(q["reason"], "err"),
        ]
        for q in quarantine
    ]
    headers = ["id", "received", "link", "identifier", "reason"]
    return f"""<h2>Quarantined records</h2>
<p class="muted">A record's reason and stored bytes: its id below, or
<code>wiscat link quarantine --raw ID</code>.</p>
{table(headers, rows, "nothing quarantined")}
"""


def reports_section(view: DashboardView) -> str:
    rows = [
        [
            stamp(line.finished_at),
            td(line.check_name),
            td(line.set_spec),
            td(line.outcome, line.outcome),
            td(line.peer_url),
            td(line.found, "" if line.found == "consistent" else "err"),
        ]
        for line in view.reports
    ]
    headers = ["finished", "check", "set", "outcome", "peer", "found"]
    return f"""<h2>Consistency reports</h2>
{table(headers, rows, "no reports: see `wiscat checks add`")}
"""


def registry_section(registry: RegistryView) -> str:
    """The registry network this node is in (if any): its chain, its peers, and the URLs."""
    url_rows = [[td(url), td(created, "time")] for url, created in registry.urls]
    if registry.network is None:
        summary = (
            '<p class="muted">This node is in no registry network '
            "(<code>WISCAT_REGISTRY_KEY_FILE</code> is unset).</p>"
        )
        peers = ""
    else:
        summary = (
            f"<p>Network <b>{e(registry.network)}</b>: {registry.blocks} block(s) "
            f"after genesis, {len(registry.urls)} URL(s), {registry.waiting} waiting for a "
            'block · <a href="/urls/form">register a repository</a></p>'
        )
        peer_rows = [
            [
                td(peer["url"]),
                td(peer["source"]),
                stamp(peer["last_ok_at"]),
                num(peer["failures"]),
                td(peer["last_error"], "err"),
            ]
            for peer in registry.peers
        ]
        peers = table(
            ["peer", "learnt from", "last answer", "failures", "last error"],
            peer_rows,
            "no peers yet: the key file lists none and no tracker answered",
        )
    urls = table(["base URL", "accepted"], url_rows, "no registry URLs yet")
    return f"<h2>Registry</h2>\n{summary}{peers}{urls}\n"


def wis2_section(settings: Settings, counts: Counts, invalid: list[dict[str, Any]]) -> str:
    """The WIS 2.0 bridge: the WCMP2 records served, those that cannot be made valid (the newest
    with their reasons; all at /admin/wis2/invalid), and the announcements not yet sent."""
    served = (
        f'<a href="{e(collection_url(settings.base_url))}/items">served</a>'
        if settings.wis2_records_on
        else "not served (<code>WISCAT_WIS2_RECORDS</code>)"
    )
    rows = [
        [td("WCMP2 records"), num(counts.served), f"<td>{served}</td>"],
        [
            td("cannot be made valid"),
            num(counts.invalid),
            '<td>never announced; why: <a href="/admin/wis2/invalid">/admin/wis2/invalid</a> '
            "(with the admin token)</td>",
        ],
        [td("announcements pending"), num(counts.pending), td("in the outbox, not yet sent")],
        [
            td("announcements failing"),
            num(counts.failed),
            td("pending, a send failed at least once", "err" if counts.failed else ""),
        ],
    ]
    newest = [
        [stamp(row["noted_at"]), td(row["identifier"]), td("; ".join(row["reasons"]), "err")]
        for row in invalid
    ]
    return f"""<h2>WIS 2.0</h2>
{table(["", "count", ""], rows, "")}
<h3>Records that cannot be made valid</h3>
<p class="muted">The newest {len(invalid)} of {counts.invalid}: none is announced while it cannot
be made valid. A record's conversion report: <code>wiscat wis2 render ID</code>.</p>
{table(["noted", "identifier", "why"], newest, "none")}
"""


# -- the pages -----------------------------------------------------------------------------------


def dashboard_page(
    settings: Settings, view: DashboardView, strip: str, refresh: int, admin: bool
) -> str:
    """The whole dashboard: the strip, then every section; the script ("harvest now") only with
    the admin API on (``admin``)."""
    script = f"<script>{SCRIPT}</script>" if admin else ""
    return f"""{page_head(f"wiscat {settings.gisc_name}", refresh)}
<body>
<h1>wiscat node {e(settings.gisc_name)}</h1>
{strip}
<p>Own set <b>{e(settings.own_set)}</b> · <a href="/oai?verb=Identify">OAI-PMH</a> ·
<a href="/metrics">metrics</a> · <a href="/wis/monitor.json">WIS monitoring</a> ·
<a href="/urls">registry URLs</a> · page made {e(when(view.now))}, {refresh_note(refresh)}</p>

{links_section(view.links, view.keys, admin)}
{plots_section(view)}
{catalogue_section(view.sets)}
{runs_section(view.runs)}
{quarantine_section(view.quarantine)}
{reports_section(view)}
{registry_section(view.registry)}
{wis2_section(settings, view.wis2, view.wis2_invalid)}
{script}
</body></html>"""


def unavailable_page(settings: Settings, strip: str, now_made: str, refresh: int) -> str:
    """The page without the database: what can be known without it, and that it is tried
    again."""
    return f"""{page_head(f"wiscat {settings.gisc_name}", refresh)}
<body><h1>wiscat node {e(settings.gisc_name)}</h1>{strip}
<p>page made {e(now_made)}, {refresh_note(refresh)}</p></body></html>"""


def quarantine_page(
    settings: Settings, quarantine_id: int, row: dict[str, Any] | None, raw_shown: int
) -> tuple[str, int]:
    """One quarantined record's page and its status: what is known of it, its reason, and its
    bytes as text (escaped, the first ``raw_shown`` bytes); 404 when there is no such record."""
    title = f"quarantined record {quarantine_id}"
    if row is None:
        body = (
            f'<p class="failed">No quarantined record {quarantine_id}: there never was one, '
            "or it outlived WISCAT_HISTORY_RETENTION_DAYS.</p>"
        )
        status_code = 404
    else:
        raw: bytes = row["raw"] or b""
        shown = raw[:raw_shown].decode("utf-8", errors="replace")
        cut = (
            f"the first {raw_shown:,} of {len(raw):,} bytes; the whole: "
            f"<code>wiscat link quarantine --raw {quarantine_id}</code>"
            if len(raw) > raw_shown
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
    page = f"""{page_head(f"wiscat {settings.gisc_name}: {title}", 0)}
<body><h1>{e(title)}</h1><p><a href="/">dashboard</a></p>{body}</body></html>"""
    return page, status_code
