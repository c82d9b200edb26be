"""The dashboard's page says what is true and offers only what can work: a node with its admin
API off shows no "harvest now"; a node with no link says so; a link whose first run has not
succeeded is not counted as healthy. Read from the real provider, on a real database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import lxml.html
import pytest

from tests.servers import RunningProvider, running_provider

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
    return " ".join(element.text_content().split())


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
