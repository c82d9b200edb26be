"""A bare test client: fetch one OAI-PMH response over real HTTP and read it with lxml."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from lxml import etree

OAI = "{http://www.openarchives.org/OAI/2.0/}"
NS = {"oai": "http://www.openarchives.org/OAI/2.0/"}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def tree(self) -> etree._Element:
        return etree.fromstring(self.body)

    def errors(self) -> list[str]:
        return [e.get("code") for e in self.tree.findall(f"{OAI}error")]

    def xpath(self, path: str) -> list:  # type: ignore[type-arg]
        return self.tree.xpath(path, namespaces=NS)


async def oai_get(url: str, **params: str) -> Answer:
    async with aiohttp.ClientSession() as session, session.get(url, params=params) as response:
        return Answer(response.status, dict(response.headers), await response.read())


async def oai_raw(url: str, query: str) -> Answer:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url + "?" + query if query else url) as response,
    ):
        return Answer(response.status, dict(response.headers), await response.read())


async def oai_post(
    url: str, data: str, content_type: str = "application/x-www-form-urlencoded"
) -> Answer:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=data.encode(), headers={"Content-Type": content_type}) as response,
    ):
        return Answer(response.status, dict(response.headers), await response.read())


async def list_all(url: str, verb: str = "ListIdentifiers", **params: str) -> list[etree._Element]:
    """Every header of a list, following resumptionTokens."""
    headers: list[etree._Element] = []
    answer = await oai_get(url, verb=verb, **params)
    while True:
        if answer.errors() == ["noRecordsMatch"]:
            return headers
        assert not answer.errors(), answer.body[:500]
        headers += answer.xpath("//oai:header")
        token = answer.xpath(f"//oai:{verb}/oai:resumptionToken")
        if not token or not (token[0].text or "").strip():
            return headers
        answer = await oai_get(url, verb=verb, resumptionToken=token[0].text)
