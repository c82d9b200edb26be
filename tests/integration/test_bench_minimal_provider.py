"""The provider benchmark's reference from PostgreSQL, the minimal provider
(bench/minimal_provider.py), serves every live record of the catalogue as it is stored, page
after page: a ratio to it counts only if it does its whole job.

The reference in its own process on loopback, on a real PostgreSQL, harvested by the
benchmark's parsing client (lxml reads each page whole).
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.request

from lxml import etree

from bench.measure import ROOT, free_port, process
from bench.provider_bench import bare_harvest
from tests.support import factories
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh.namespaces import OAI_TAG


async def test_the_reference_serves_every_live_record_as_stored(
    db: Pool, database_url: str
) -> None:
    identifiers = await factories.load_records(db, "WIS-MIN", range(250))
    await factories.delete(db, "WIS-MIN", identifiers[:7])
    stored = dict(await db.fetch("select identifier, xml from records where not deleted"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/oai"
    async with process(
        [sys.executable, "-m", "bench.minimal_provider", database_url, str(port), "100"],
        url,
        {**os.environ, "PYTHONPATH": str(ROOT)},
    ):
        # pages of 100: three of them, the list followed by its resumption tokens
        harvest = await asyncio.to_thread(bare_harvest, url, parse=True)
        first = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).read())

    assert harvest.records == 243 == len(stored)
    records = etree.fromstring(first).iter(OAI_TAG + "record")
    for record in records:
        identifier = record.findtext(f"{OAI_TAG}header/{OAI_TAG}identifier")
        metadata = record.find(OAI_TAG + "metadata")
        assert metadata is not None and identifier in stored
        # byte for byte as stored, between the metadata element's tags
        assert f"<metadata>{stored.pop(identifier)}</metadata>".encode() in first
    assert len(stored) == 243 - 100  # the first page held 100 of them
