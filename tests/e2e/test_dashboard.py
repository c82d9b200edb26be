"""The dashboard in a real headless Chromium: links with their status, plots, "harvest now"."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from playwright.async_api import async_playwright

from tests.e2e.mesh import Mesh

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
            alpha = page.locator("tr", has=page.locator("button[data-link=alpha]"))
            dead_row = page.locator("tr", has=page.locator(f"button[data-link={DEAD}]"))
            assert "ok" in await alpha.locator("td.ok").inner_text()
            assert await dead_row.locator("td.failed").inner_text() == "failed"
            assert "cannot reach" in await dead_row.locator("td.err").inner_text()
            catalogue = page.locator("table").first
            assert "WIS-GISC-A" in await catalogue.inner_text()
            # readable on a laptop: nothing to scroll sideways for, no table wider than the page
            assert await page.evaluate("document.documentElement.scrollWidth") <= LAPTOP_WIDTH
            assert await page.evaluate(TABLES_FIT), "a table is wider than the page"

            plots = page.locator("svg.plot")
            assert await plots.count() == 3
            for index in range(3):
                box = await plots.nth(index).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 100
            assert await plots.nth(0).locator("rect").count() == 30  # a bar per day
            assert await plots.nth(1).locator("circle").count() >= 4  # 3 runs of 2 links
            assert await plots.nth(2).locator("circle").count() >= 1  # alpha's second run

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
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(screenshot, ARTIFACTS / "dashboard.png")

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
