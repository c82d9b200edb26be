"""The dashboard in a real headless Chromium, in the states an operator meets: a narrow window
(800 pixels), links healthy and failing, no link at all, a first run that has not succeeded yet,
and a node whose admin API is off.

Each test keeps its screenshots in tests/artifacts/ (not committed; the test prints their
paths)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from playwright.async_api import Page, async_playwright

from tests.e2e.nodes import Node, NodeFactory
from tests.e2e.test_dashboard import CHROMIUM, FLAGS, keep
from tests.support.servers import list_records_page, serving
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

NARROW = 800
WIDE = 1400
# a peer that refuses connections (the discard port), with a name as long as a GISC's
UNREACHABLE = "http://127.0.0.1:9/oai"
# where an element's right edge is, against the window and against the box that scrolls it
RIGHT_EDGES = """(element) => {
    let box = element.parentElement;
    while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) {
        box = box.parentElement;
    }
    return {
        right: element.getBoundingClientRect().right,
        window: document.documentElement.clientWidth,
        scroller: box ? box.getBoundingClientRect().right : null,
        scrolled: box ? box.scrollWidth > box.clientWidth : false,
    };
}"""


def one_record_page() -> bytes:
    record = parse_record(generate_record(0, centre="states"))
    return list_records_page(
        [render.record(record.identifier, datetime.now(UTC), [], False, record.xml)]
    )


async def provider(node: Node) -> str:
    """Start ``node``'s provider alone; its root URL."""
    await node.start("provider", f"http://127.0.0.1:{node.provider_port}/readyz")
    return f"http://127.0.0.1:{node.provider_port}"


async def shoot(page: Page, root: str, name: str, widths: tuple[int, ...]) -> None:
    """Screenshots of the dashboard at each of ``widths``, kept; the page is left at the last."""
    for width in widths:
        await page.set_viewport_size({"width": width, "height": 1000})
        await page.goto(root + "/?refresh=0")
        screenshot = Path(f"/tmp/{name}-{width}.png")
        await page.screenshot(path=str(screenshot), full_page=True)
        keep(screenshot)


async def test_the_links_table_fits_a_narrow_window(make_node: NodeFactory) -> None:
    """The last error, the column an operator needs most, is on screen at 800 pixels: it was
    cut off at the window's right edge."""
    node = await make_node("NARROW")
    async with serving(one_record_page()) as url:
        await node.wiscat("link", "add", "healthy-gisc-link", "--url", url, "--into", "WIS-A")
        await node.wiscat("harvest", "healthy-gisc-link")
    await node.wiscat("link", "add", "failing-gisc-link", "--url", UNREACHABLE, "--into", "WIS-B")
    code, _, _ = await node.wiscat("harvest", "failing-gisc-link", check=False)
    assert code != 0
    root = await provider(node)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await shoot(page, root, "dashboard-links", (WIDE, NARROW))
            links = page.locator("table").first
            failing = links.locator("tr", has_text="failing-gisc-link")
            error = failing.locator("td.err")
            assert "cannot reach" in await error.inner_text()
            edges = await error.evaluate(RIGHT_EDGES)
            if edges["scroller"] is None:
                assert edges["right"] <= edges["window"], edges
            else:
                assert edges["right"] <= edges["scroller"] <= edges["window"], edges
            # the page itself does not scroll sideways
            assert await page.evaluate("document.documentElement.scrollWidth") <= NARROW
        finally:
            await browser.close()


async def test_a_node_with_no_link_says_so(make_node: NodeFactory) -> None:
    """The strip said "links failing 0 of 0: every enabled link's last run ended ok"."""
    root = await provider(await make_node("EMPTY"))
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await shoot(page, root, "dashboard-no-links", (WIDE, NARROW))
            cell = page.locator("#strip-links")
            assert await cell.get_attribute("class") == "cell muted"
            assert await cell.inner_text() == "links none yet\nadd one with `wiscat link add`"
            assert await page.evaluate("document.documentElement.scrollWidth") <= NARROW
        finally:
            await browser.close()
