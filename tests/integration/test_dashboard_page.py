"""The dashboard's page says what is true and offers only what can work: a node with its admin
API off shows no "harvest now"; a node with no link says so; a link whose first run has not
succeeded is not counted as healthy. Read from the real provider, on a real database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import lxml.html
import pytest

from tests.support.servers import RunningProvider, running_provider

ADD_LINK = "insert into links (name, base_url, local_set) values ($1, 'http://peer.test/oai', 'S')"


@pytest.fixture
async def with_a_link(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    await db.execute("insert into sets (spec, name, kind) values ('S', 'S', 'remote')")
    await db.execute(ADD_LINK, "tokyo")
    yield db


async def page(provider: RunningProvider) -> lxml.html.HtmlElement:
    async with (
        aiohttp.ClientSession() as session,
        session.get(provider.root + "/?refresh=0") as response,
    ):
        assert response.status == 200
        return lxml.html.fromstring(await response.read())


def text(element: lxml.html.HtmlElement) -> str:
    """Its text, each element's apart, spaces as one."""
    return " ".join(" ".join(element.itertext()).split())


async def test_harvest_now_is_offered_only_with_the_admin_api_on(
    with_a_link: asyncpg.Pool, database_url: str
) -> None:
    """Without WISCAT_ADMIN_TOKEN every click answered 403: the button is not shown, and the page
    says what would turn it on."""
    async with running_provider(database_url) as provider:
        shown = await page(provider)
    assert [b.get("data-link") for b in shown.xpath("//button[@class='harvest']")] == ["tokyo"]
    assert shown.xpath("//input[@id='token']") and shown.xpath("//script")
    async with running_provider(database_url, admin_token=None) as provider:
        off = await page(provider)
    assert off.xpath("//button") == [] and off.xpath("//input[@id='token']") == []
    assert off.xpath("//script") == []  # the script is the button's
    (note,) = off.xpath("//p[@id='admin']")
    assert text(note) == (
        '"harvest now" needs the admin API, which is off: set WISCAT_ADMIN_TOKEN to turn it on.'
    )
    async with running_provider(database_url, admin_token="") as provider:
        assert (await page(provider)).xpath("//button") == []  # empty is unset


def strip_links(shown: lxml.html.HtmlElement) -> tuple[str, str]:
    """The status strip's links cell: its class and its text."""
    (cell,) = shown.xpath("//div[@id='strip-links']")
    return cell.get("class"), text(cell)


def lag(shown: lxml.html.HtmlElement, link: str) -> tuple[str, str]:
    """The links table's lag cell of ``link``: its class and its text."""
    (cell,) = shown.xpath(f"//table[1]//tr[.//td[@class='link'][contains(., '{link}')]]/td[6]")
    return cell.get("class"), text(cell)


async def test_with_no_link_the_strip_says_so(db: asyncpg.Pool, database_url: str) -> None:
    """It said "links failing 0 of 0: every enabled link's last run ended ok, none lagging"."""
    async with running_provider(database_url) as provider:
        shown = await page(provider)
    assert strip_links(shown) == ("cell muted", "links none yet add one with `wiscat link add`")
    assert "ended ok" not in text(shown)


async def test_a_link_that_has_not_succeeded_yet_is_not_counted_healthy(
    with_a_link: asyncpg.Pool, database_url: str
) -> None:
    """A first run still retrying was shown as "every enabled link's last run ended ok", and its
    lag as "-"."""
    db = with_a_link
    await db.execute("update links set created_at = now() - interval '5 min 10 s'")
    run = await db.fetchval(
        "insert into harvest_runs (link, mode, status) values ('tokyo', 'full', 'running') "
        "returning id"
    )
    await db.execute(
        "update links set last_run_id = $1, last_error = 'cannot reach http://peer.test/oai'",
        run,
    )
    async with running_provider(database_url) as provider:
        shown = await page(provider)
        assert strip_links(shown) == (
            "cell running",
            "links failing 0 of 1, 1 not yet succeeded tokyo",
        )
        assert lag(shown, "tokyo") == ("lag", "never (added 5 min ago)")

        # added 3 hours ago, hourly, never run: it lags, and says since when
        await db.execute(ADD_LINK, "paris")
        await db.execute(
            "update links set created_at = now() - interval '3 h' where name = 'paris'"
        )
        shown = await page(provider)
        assert strip_links(shown) == (
            "cell failed",
            "links failing 0 of 2, 1 lagging, 1 not yet succeeded paris, tokyo",
        )
        assert lag(shown, "paris") == ("lag failed", "never (added 3.0 h ago)")

        # tokyo's first run fails: failing; then a run succeeds: its lag is a time again
        await db.execute("update harvest_runs set status = 'failed', finished_at = now()")
        shown = await page(provider)
        assert strip_links(shown) == ("cell failed", "links failing 1 of 2, 1 lagging tokyo, paris")
        await db.execute("update harvest_runs set status = 'ok'")
        await db.execute(
            "update links set last_success_at = now() - interval '30 s' where name = 'tokyo'"
        )
        shown = await page(provider)
        assert strip_links(shown) == ("cell failed", "links failing 0 of 2, 1 lagging paris")
        assert lag(shown, "tokyo") == ("lag", "30 s")
