"""The dashboard in a real headless Chromium: the status strip (the harvester alive, then
stopped), links with their status, plots, "harvest now", and a quarantined record's page.

Each test keeps a screenshot of what it saw, in tests/artifacts/ (not committed; the test prints
its path)."""

from __future__ import annotations

import asyncio
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import Page, async_playwright
from pydantic import ValidationError

from tests.e2e.mesh import Mesh
from tests.e2e.nodes import NodeFactory
from tests.support.servers import list_records_page, provider_settings, serving, serving_app
from wiscat.provider.dashboard.probe import harvester_address, probe_harvester
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

CHROMIUM = "/usr/bin/chromium"
LAPTOP_WIDTH = 1366
TABLES_FIT = """[...document.querySelectorAll('table')].every(
    t => t.getBoundingClientRect().right <= document.body.getBoundingClientRect().right)"""
# as long as the names the registry gives its candidate links: they must not widen the page
DEAD = "candidate-5f0e3c2a9b7d4e61"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
# a script added to the page as an escaping fault would add it; its result, if it ran
INJECT = """() => {
    const script = document.createElement('script');
    script.textContent = 'window.injected = 1';
    document.body.appendChild(script);
    return window.injected ?? null;
}"""
# the colour of a link's key in the links table, and in a plot's legend
KEY_COLOUR = "(element) => getComputedStyle(element).color"


def keep(screenshot: Path) -> Path:
    """A copy of ``screenshot`` in tests/artifacts/, whose path the test prints."""
    ARTIFACTS.mkdir(exist_ok=True)
    kept = ARTIFACTS / screenshot.name
    shutil.copy(screenshot, kept)
    print(f"screenshot: {kept}")
    return kept


async def strip(page: Page) -> dict[str, tuple[str, str]]:
    """The status strip's cells: key -> (class, text)."""
    cells = page.locator(".strip .cell")
    found = {}
    for index in range(await cells.count()):
        cell = cells.nth(index)
        key = (await cell.get_attribute("id") or "").removeprefix("strip-")
        found[key] = (await cell.get_attribute("class") or "", await cell.inner_text())
    return found


FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


async def test_dashboard_shows_links_plots_and_harvests_now(mesh: Mesh, tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: `make test` installs Debian's chromium package"
    )
    await mesh.add_node("A")
    await mesh.add_node("B", WISCAT_HARVEST_MAX_RETRIES="0")
    await mesh.start()
    for n in range(12):
        await mesh.put("A", n, "a")
    await mesh.link("B", "alpha", "A", "WIS-GISC-A")
    dead = mesh.nodes["A"].oai.replace(str(mesh.nodes["A"].provider_port), "9")  # discard port
    await mesh._call(
        mesh.nodes["B"],
        "POST",
        "/admin/links",
        json={"name": DEAD, "url": dead, "set": "WIS-GISC-DEAD", "window_slices": 0},
    )
    await mesh.round([("B", "alpha")])
    await mesh.round([("B", "alpha")])
    failed = await mesh.harvest("B", DEAD)
    assert failed["status"] == "failed"
    b = mesh.nodes["B"]

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": LAPTOP_WIDTH, "height": 900})
            requested: list[str] = []
            page.on("request", lambda request: requested.append(request.url))
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            response = await page.goto(b.root + "/")
            assert response is not None and response.status == 200
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
            # the page's own script runs (below, "harvest now"); one that reached the page
            # through an escaping fault would not
            assert await page.evaluate(INJECT) is None
            assert await page.title() == "wiscat B"
            # first the strip: B's harvester (of `wiscat run`) answers its /healthz
            cells = await strip(page)
            assert list(cells) == ["node", "database", "harvester", "links", "check"]
            assert cells["node"][1].startswith("node B · wiscat ")
            assert cells["database"] == ("cell ok", "database up\nanswers, schema current")
            harvester_class, harvester_text = cells["harvester"]
            assert harvester_class == "cell ok"
            assert harvester_text.startswith(
                f"harvester alive\nprobed http://127.0.0.1:{b.harvester_port}/healthz from this "
                "provider; last run ended "
            )
            assert cells["links"] == ("cell failed", f"links failing 1 of 2\n{DEAD}")
            assert cells["check"] == ("cell muted", "last check none\nsee `wiscat checks add`")
            strip_box = await page.locator(".strip").bounding_box()
            links_box = await page.locator("table").first.bounding_box()
            assert strip_box is not None and links_box is not None
            assert strip_box["y"] + strip_box["height"] <= links_box["y"] < 900  # above the fold
            # it reloads itself with a GET (no "harvest now" again), and says how often
            refresh = page.locator("meta[http-equiv=refresh]")
            assert await refresh.get_attribute("content") == "60"
            assert "refreshed every 60 s" in await page.locator("body").inner_text()
            alpha = page.locator("tr", has=page.locator("button[data-link=alpha]"))
            dead_row = page.locator("tr", has=page.locator(f"button[data-link={DEAD}]"))
            assert "ok" in await alpha.locator("td.ok").inner_text()
            assert await dead_row.locator("td.failed").inner_text() == "failed"
            assert "cannot reach" in await dead_row.locator("td.err").inner_text()
            catalogue = page.locator("h2:has-text('Catalogue') + div table")
            assert "WIS-GISC-A" in await catalogue.inner_text()
            # readable on a laptop: nothing to scroll sideways for, no table wider than the page
            assert await page.evaluate("document.documentElement.scrollWidth") <= LAPTOP_WIDTH
            assert await page.evaluate(TABLES_FIT), "a table is wider than the page"

            plots = page.locator("svg.plot")
            assert await plots.count() == 3
            for index in range(3):
                box = await plots.nth(index).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 100
            # links first, then duration, lag and arrivals
            duration_plot, lag_plot, arrivals_plot = (plots.nth(n) for n in range(3))
            assert (await plots.first.bounding_box() or {"y": 0})["y"] > links_box["y"]
            assert await duration_plot.locator("circle").count() >= 2  # alpha's 2 runs
            failed_marks = duration_plot.locator("path.failed-run")
            # the dead link's runs (the scheduler's and the one asked for), marked as failed
            marks = [await m.text_content() for m in await failed_marks.locator("title").all()]
            assert marks and all(
                m is not None and m.startswith(f"{DEAD} ") and m.endswith(", failed") for m in marks
            )
            assert await lag_plot.locator("circle").count() >= 1  # alpha's second run
            assert await arrivals_plot.locator("rect").count() == 30  # a bar per day
            # alpha keeps its colour from the links table to each plot's legend
            in_table = await alpha.locator("span.key").evaluate(KEY_COLOUR)
            legends = page.locator("figure div span", has_text="alpha")
            assert await legends.count() == 2  # duration and lag
            for index in range(2):
                assert await legends.nth(index).evaluate(KEY_COLOUR) == in_table

            runs_before = await mesh._call(b, "GET", "/admin/runs", params={"link": "alpha"})
            await page.fill("#token", "token-B")
            await page.dispatch_event("#token", "change")
            await page.click("button[data-link=alpha]")
            # waited for with a locator: the page's policy refuses the eval a function needs
            await page.locator("#answer", has_text="requested").wait_for()
            assert await page.locator("button[data-link=alpha]").inner_text() == "requested"
            screenshot = tmp_path / "dashboard.png"
            await page.screenshot(path=str(screenshot), full_page=True)
            # works offline: the page, its plots and the button ask the node alone
            assert requested and all(url.startswith(b.root + "/") for url in requested)
            refused = [text for text in console if "Content Security Policy" in text]
            assert len(refused) == 1 and "inline script" in refused[0]  # the injected one
        finally:
            await browser.close()
    keep(screenshot)

    # the button's request ran a harvest of alpha
    for _ in range(200):
        runs = await mesh._call(b, "GET", "/admin/runs", params={"link": "alpha"})
        if runs[0]["id"] > runs_before[0]["id"] and runs[0]["status"] != "running":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the harvest asked for on the dashboard never ran")
    assert runs[0]["status"] == "ok"


async def test_harvest_now_without_the_token_is_refused(mesh: Mesh) -> None:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing"
    await mesh.add_node("A")
    await mesh.start()
    await mesh._call(
        mesh.nodes["A"],
        "POST",
        "/admin/links",
        json={"name": "peer", "url": "http://127.0.0.1:9/oai", "set": "S", "enabled": False},
    )
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await page.goto(mesh.nodes["A"].root + "/")
            await page.fill("#token", "wrong")
            await page.dispatch_event("#token", "change")
            await page.click("button[data-link=peer]")
            await page.locator("#answer", has_text="refused").wait_for()
            assert "401" in await page.locator("#answer").inner_text()
        finally:
            await browser.close()
    link = await mesh._call(mesh.nodes["A"], "GET", "/admin/links")
    assert link[0]["run_requested"] is None


# Not ISO 19139 (no fileIdentifier): quarantined. One carries a script, which the record's page
# must show as text and never run; one is larger than the page shows.
GMD = "http://www.isotc211.org/2005/gmd"
SCRIPTED = (
    f"<gmd:MD_Metadata xmlns:gmd='{GMD}'><script xmlns='http://www.w3.org/1999/xhtml'>"
    "window.injected = 1</script></gmd:MD_Metadata>"
)
LARGE = f"<gmd:MD_Metadata xmlns:gmd='{GMD}'><title>{'x' * 100_000}</title></gmd:MD_Metadata>"


def bad_page() -> bytes:
    now = datetime.now(UTC)
    good = parse_record(generate_record(0, centre="dash"))
    return list_records_page(
        [
            render.record(good.identifier, now, [], False, good.xml),
            render.record("urn:x-wmo:md:dash::scripted", now, [], False, SCRIPTED.encode()),
            render.record("urn:x-wmo:md:dash::large", now, [], False, LARGE.encode()),
        ]
    )


async def test_strip_says_the_harvester_is_stopped_and_a_quarantined_record_shows(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing"
    node = await make_node("Q")
    async with serving(bad_page()) as url:
        await node.wiscat("link", "add", "peer", "--url", url, "--into", "WIS-GISC-PEER")
        await node.wiscat("harvest", "peer")
    # the provider alone: no harvester answers on WISCAT_HARVESTER_PORT
    await node.start("provider", f"http://127.0.0.1:{node.provider_port}/readyz")
    root = f"http://127.0.0.1:{node.provider_port}"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": LAPTOP_WIDTH, "height": 900})
            await page.goto(root + "/?refresh=0")
            cells = await strip(page)
            links = page.locator("table").first
            last_run = await links.locator("tr", has_text="peer").locator("td.time").inner_text()
            assert cells["harvester"] == (
                "cell failed",
                f"harvester not answering\nprobed http://127.0.0.1:{node.harvester_port}/healthz"
                " from this provider: /healthz cannot be reached: ClientConnectorError; last run "
                f"ended {last_run}",
            )
            assert cells["links"] == (
                "cell ok",
                "links failing 0 of 1\nevery enabled link's last run ended ok, none lagging",
            )
            assert await page.locator("meta[http-equiv=refresh]").count() == 0
            assert "not refreshed" in await page.locator("body").inner_text()
            screenshot = tmp_path / "dashboard-harvester-stopped.png"
            await page.screenshot(path=str(screenshot), full_page=True)
            keep(screenshot)

            # the quarantined record that carries a script: its page shows the script as text
            scripted = page.locator("tr", has_text="urn:x-wmo:md:dash::scripted").locator("a")
            large = page.locator("tr", has_text="urn:x-wmo:md:dash::large").locator("a")
            scripted_href, large_href = (
                await scripted.get_attribute("href"),
                await large.get_attribute("href"),
            )
            assert scripted_href is not None and large_href is not None
            response = await page.goto(root + scripted_href)
            assert response is not None and response.status == 200
            assert await page.title() == "wiscat Q: " + (await page.locator("h1").inner_text())
            assert "fileIdentifier" in await page.locator("#reason").inner_text()
            raw = await page.locator("#raw").inner_text()
            assert (
                '<script xmlns="http://www.w3.org/1999/xhtml">window.injected = 1</script>' in raw
            )
            assert await page.evaluate("window.injected ?? null") is None
            assert await page.locator("script").count() == 0
            assert "(a removed link)" not in await page.locator("table.facts").inner_text()
            screenshot = tmp_path / "quarantined-record.png"
            await page.screenshot(path=str(screenshot), full_page=True)
            keep(screenshot)

            await page.goto(root + large_href)
            heading = await page.locator("h2").inner_text()
            assert heading.startswith("Stored bytes (the first 65,536 of ")
            assert heading.endswith(
                f" bytes; the whole: wiscat link quarantine --raw {page.url.rsplit('/', 1)[1]})"
            )
            assert len(await page.locator("#raw").inner_text()) == 65_536

            missing = await page.goto(root + "/quarantine/999999")
            assert missing is not None and missing.status == 404
            assert "script-src" not in missing.headers["content-security-policy"]
        finally:
            await browser.close()


async def test_the_strip_probes_the_harvester_where_the_settings_say() -> None:
    """WISCAT_HARVESTER_URL (a harvester in its own container) wins over PROVIDER_HOST and
    HARVESTER_PORT; a /healthz that answers anything but 200 ok is not alive."""
    assert harvester_address(provider_settings(8080, harvester_port=9181)) == (
        "http://127.0.0.1:9181"
    )
    everywhere = provider_settings(8080, provider_host="::", harvester_port=9181)
    assert harvester_address(everywhere) == "http://127.0.0.1:9181"
    assert harvester_address(provider_settings(8080, provider_host="::1")) == "http://[::1]:8081"
    named = provider_settings(8080, harvester_url="http://harvester:8081/")
    assert harvester_address(named) == "http://harvester:8081"
    with pytest.raises(ValidationError, match="the harvester's http\\(s\\) root URL"):
        provider_settings(8080, harvester_url="http://harvester:8081/healthz")

    answer = {"status": 200, "text": "ok\n"}

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(status=answer["status"], text=str(answer["text"]))

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    async with serving_app(app) as root:
        assert await probe_harvester(root) is None
        answer.update(status=503, text="starting")
        assert await probe_harvester(root) == "/healthz answered 503, not ok"
    assert await probe_harvester(root) == "/healthz cannot be reached: ClientConnectorError"
