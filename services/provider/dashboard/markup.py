"""What every dashboard page is made of: the style sheet, the one script ("harvest now"), the
security headers, and the table cells that escape what they show."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from datetime import datetime

from wiscat.provider.dashboard.plots import e, when
from wiscat.shared.refusals import summary as refusal_summary

# a link's last-run counts, in the order the links table lists them
COUNTS = ("added", "updated", "unchanged", "deleted", "refused", "quarantined")

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1280px;padding:0 16px;color:#222}
h1{font-size:22px;margin:16px 0 4px}
h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;margin-bottom:8px}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.time,td.counts{white-space:nowrap}
.sub{display:block;color:#777;font-size:12px}
.ok{color:#176b1e;font-weight:600}
.failed,.stopped,.inconsistent,.unchecked{color:#b00020;font-weight:600}
.running{color:#a15c00}.muted{color:#777}
.refused{color:#b86e00;font-weight:600}
.err{color:#b00020;min-width:16em;max-width:420px;overflow-wrap:anywhere}
.plots{display:flex;flex-wrap:wrap;gap:16px}.plots figure{margin:0}
figcaption{font-weight:600;margin-bottom:4px}svg text{font:11px system-ui,sans-serif;fill:#444}
button{cursor:pointer}#token{width:220px}#answer{margin-left:8px}
.strip{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.strip .cell{border:1px solid #ddd;border-radius:4px;padding:4px 10px;min-width:150px;
max-width:420px;overflow-wrap:anywhere}
.strip .cell.ok{border-color:#176b1e;background:#eef7ef}
.strip .cell.running{border-color:#a15c00;background:#fff6e8}
.strip .cell.failed,.strip .cell.stopped,.strip .cell.inconsistent,.strip .cell.unchecked{
border-color:#b00020;background:#fdeeee}
.strip .cell .sub{font-weight:400}td.link{white-space:nowrap}
table.facts{width:auto}
div.wide{overflow-x:auto}
@media (max-width:1400px){th,td{padding:3px 4px}td.time,td.counts,td.link{white-space:normal}
.err{min-width:8em}td.peer,td.hints{overflow-wrap:anywhere}}
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
    # in a box of its own that scrolls sideways should a table be wider than the window
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="wide">{table}</div>'


def td(value: object, cls: str = "") -> str:
    attribute = f' class="{cls}"' if cls else ""
    return f"<td{attribute}>{e(value)}</td>"


def num(value: object) -> str:
    return td("-" if value is None else f"{value:,}", "n")


def status(value: str | None) -> str:
    return td(value or "never run", value or "muted")


def stamp(value: datetime | None) -> str:
    return td(when(value), "time")


def counts_cell(values: dict[str, int | None], refusals: dict[str, int] | None = None) -> str:
    """A run's non-zero counts in one cell ("added 40, refused 2: own set 2"): six columns of
    mostly zeros would not fit a laptop screen next to the error. Refusals, by reason, are
    amber: records the run did not store."""
    parts = [
        f'<span class="refused">{e(refusal_summary(value, refusals or {}))}</span>'
        if name == "refused"
        else e(f"{name} {value:,}")
        for name, value in values.items()
        if value
    ]
    if not parts:
        return td("none", "counts muted")
    return f'<td class="counts">{", ".join(parts)}</td>'


def strip_cell(key: str, title: str, value: str, cls: str, detail: str = "") -> str:
    sub = f'<span class="sub">{detail}</span>' if detail else ""
    return f'<div class="cell {cls}" id="strip-{key}"><b>{e(title)}</b> {value}{sub}</div>'


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
