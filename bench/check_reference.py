"""The reference the checker is measured against: the obvious way, every list in a dict.

Fetches the lists one page at a time (aiohttp), parses each page with lxml, keeps every list in
memory as ``{identifier: (datestamp, deleted)}`` and compares the dicts. Prints the number of
differences found, so the benchmark can see both did the same work.

    python -m bench.check_reference SOURCE_URL PEER_URL...
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from lxml import etree

OAI = "{http://www.openarchives.org/OAI/2.0/}"


async def fetch_list(session: aiohttp.ClientSession, url: str) -> dict[str, tuple[str, bool]]:
    entries: dict[str, tuple[str, bool]] = {}
    params = {"verb": "ListIdentifiers", "metadataPrefix": "iso19139", "set": "WIS-GISC-BENCH"}
    while True:
        async with session.get(url, params=params) as response:
            body = await response.read()
        root = etree.fromstring(body, etree.XMLParser(resolve_entities=False, no_network=True))
        for header in root.iter(f"{OAI}header"):
            entries[header.findtext(f"{OAI}identifier")] = (  # type: ignore[index]
                header.findtext(f"{OAI}datestamp") or "",
                header.get("status") == "deleted",
            )
        token = root.findtext(f".//{OAI}resumptionToken")
        if not token:
            return entries
        params = {"verb": "ListIdentifiers", "resumptionToken": token}


async def main(source_url: str, peer_urls: list[str]) -> None:
    async with aiohttp.ClientSession() as session:
        source, *peers = await asyncio.gather(
            *(fetch_list(session, url) for url in [source_url, *peer_urls])
        )
    differences = 0
    for peer in peers:
        for identifier, (datestamp, deleted) in source.items():
            theirs = peer.get(identifier)
            if not deleted and (theirs is None or theirs[1] or theirs[0] <= datestamp):
                differences += 1  # missing, outdated or copied
            elif deleted and theirs is not None and not theirs[1]:
                differences += 1  # a missed deletion
        differences += sum(1 for i, v in peer.items() if i not in source and not v[1])
    print(differences)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
