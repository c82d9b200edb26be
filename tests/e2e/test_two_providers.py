"""Any provider continues any list: two ``wiscat provider`` processes on one database.

A list begun on one process is continued page by page alternately on the other, and on a
process started again in between, with the very pages (records, cursor, completeListSize and
the next resumptionToken itself) one process gives alone: a token is the whole state of its
list, signed with the node's key that every process reads from the database, and it never
expires by default.
"""

from __future__ import annotations

import asyncio

from lxml import etree

from tests.e2e.nodes import Node
from tests.support import factories
from tests.support.oai_client import NS, OAI, Answer, oai_get
from wiscat.shared.db.pool import Pool

OWN = "WIS-GISC-TEST"
PAGE = 50
IDENTIFIERS = "//oai:header/oai:identifier/text()"


def provider(database_url: str) -> Node:
    """A provider of the node TEST (no WISCAT_TOKEN_SECRET: the key kept in the database)."""
    return Node("TEST", database_url, extra={"WISCAT_PAGE_SIZE": str(PAGE)})


async def start(node: Node) -> None:
    await node.start("provider", f"http://127.0.0.1:{node.provider_port}/readyz")


def token_of(answer: Answer) -> str:
    element = answer.tree.find(f".//{OAI}resumptionToken")
    assert element is not None
    assert "expirationDate" not in element.attrib
    return element.text or ""


def page(answer: Answer) -> bytes:
    """The page less what names the moment and the process that made it: its responseDate,
    and the base URL its request element echoes."""
    assert answer.status == 200
    assert answer.errors() == []
    tree = answer.tree
    for element in (tree.find(f"{OAI}responseDate"), tree.find(f"{OAI}request")):
        assert element is not None
        element.text = "-"
    return etree.tostring(tree)


async def continued(nodes: list[Node], token: str) -> list[bytes]:
    """The rest of a list from ``token``, each page asked of the next of ``nodes`` in turn."""
    pages = []
    turn = 0
    while token:
        answer = await oai_get(
            nodes[turn % len(nodes)].oai, verb="ListRecords", resumptionToken=token
        )
        pages.append(page(answer))
        token = token_of(answer)
        turn += 1
    return pages


async def test_a_list_goes_on_alternately_on_two_providers_and_after_a_restart(
    db: Pool, database_url: str
) -> None:
    """250 records at 50 a page: the four pages after the first, asked of process A alone,
    then of B, A, B, A, then of B started again, A, B, A: the same bytes each time (less the
    responseDate and the echoed base URL), 250 distinct records in all."""
    await factories.load_records(db, OWN, range(250))
    a, b = provider(database_url), provider(database_url)
    try:
        await asyncio.gather(start(a), start(b))
        first = await oai_get(a.oai, verb="ListRecords", metadataPrefix="iso19139")
        token = token_of(first)
        alone = await continued([a], token)
        assert len(alone) == 4
        identifiers = first.xpath(IDENTIFIERS)
        for body in alone:
            identifiers += etree.fromstring(body).xpath(IDENTIFIERS, namespaces=NS)
        assert len(identifiers) == len(set(identifiers)) == 250
        assert await continued([b, a], token) == alone
        await b.stop()
        await start(b)
        assert await continued([b, a], token) == alone
    finally:
        await a.stop()
        await b.stop()
