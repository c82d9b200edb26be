"""The guards against a list that never ends are settings an operator can move: a peer that
sends empty pages with tokens, or a fresh token with every page, fails its run at the set cap,
the reason naming the setting."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from tests.e2e.nodes import NodeFactory
from tests.support.servers import list_records_page, serving, serving_app
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render


class EndlessPeer:
    """A list whose every page carries a new resumptionToken: empty pages, or one record each."""

    def __init__(self, *, records: bool) -> None:
        self.records = records
        self.asked = 0

    async def page(self, request: web.Request) -> bytes:
        self.asked += 1
        token = render.resumption_token(
            f"t{self.asked}", cursor=self.asked - 1, complete_list_size=0, expiration=None
        )
        pieces = []
        if self.records:
            record = parse_record(generate_record(self.asked, centre="endless"))
            pieces.append(
                render.record(record.identifier, datetime.now(UTC), [], False, record.xml)
            )
        return list_records_page([*pieces, token])


async def harvest_with(make_node: NodeFactory, peer: EndlessPeer, **settings: str) -> str:
    async with serving(b"", pages=peer.page) as url:
        node = await make_node("A")
        node.extra.update(settings)
        await node.wiscat("link", "add", "p", "--url", url, "--set", "S", "--disabled")
        code, out, err = await node.wiscat("harvest", "p", check=False)
    assert code == 1, out + err
    return out


async def test_empty_pages_are_given_up_at_the_set_cap(make_node: NodeFactory) -> None:
    peer = EndlessPeer(records=False)
    out = await harvest_with(make_node, peer, WISCAT_HARVEST_MAX_EMPTY_PAGES="1")
    assert "TooManyEmptyPages" in out
    assert "sent 2 pages in a row with a token and no item (the cap is " in out
    # the second empty page ends it (the pages asked for ahead of it are dropped)
    assert 2 <= peer.asked <= 6


async def test_a_list_that_never_ends_is_given_up_at_the_set_cap(make_node: NodeFactory) -> None:
    peer = EndlessPeer(records=True)
    out = await harvest_with(make_node, peer, WISCAT_HARVEST_MAX_REQUESTS_PER_LIST="4")
    assert "TooManyRequests" in out
    assert "needed more than 4 requests (the cap is WISCAT_HARVEST_MAX_REQUESTS_PER_LIST)" in out
    assert peer.asked == 4


async def test_a_long_retry_after_is_cut_to_the_set_cap(make_node: NodeFactory) -> None:
    asked = 0

    async def overloaded(request: web.Request) -> web.Response:
        nonlocal asked
        asked += 1
        return web.Response(status=503, text="busy", headers={"Retry-After": "3600"})

    app = web.Application()
    app.router.add_get("/oai", overloaded)
    async with serving_app(app) as root:
        node = await make_node("A")
        node.extra.update(
            WISCAT_HARVEST_RETRY_AFTER_CAP_SECONDS="0.2", WISCAT_HARVEST_MAX_RETRIES="2"
        )
        await node.wiscat("link", "add", "p", "--url", root + "/oai", "--set", "S", "--disabled")
        code, out, err = await node.wiscat("harvest", "p", check=False)
    assert code == 1, out + err
    assert "PeerHTTPError: HTTP 503" in out
    assert err.count("retrying in 0.2 s") == 2  # not in 3600 s, nor in the default 300
    assert asked == 3
