"""The minimal sequential harvester, the harvester section's reference: fetch a page, parse it
with lxml, COPY its rows into PostgreSQL, then the next page, in turn.

It does what any harvester must and nothing else: no canonical form or hash, no datestamp
rules, no quarantine, no page workers, no fetching ahead. Its rows go to a table like
``records`` (same columns and storage) with the identifier as primary key, one transaction a
page. wiscat, doing all of that, is measured against it in the same run (the goal: at least
1.5 times its rate).

    python -m bench.sequential BASE_URL SET DATABASE_URL

prints the number of records it stored.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime

import aiohttp
import asyncpg
from lxml import etree

from wiscat.shared.oaipmh.namespaces import OAI_TAG as OAI

TABLE = "sequential_records"
# the columns rows_of fills, by name: a column records gains later keeps its default
COLUMNS = [
    "identifier",
    "datestamp",
    "md_datestamp",
    "content_hash",
    "xml",
    "deleted",
    "set_specs",
    "source",
    "xml_mend",
]


def rows_of(root: etree._Element, set_spec: str) -> list[tuple[object, ...]]:
    """The rows of one ListRecords page: :data:`COLUMNS`, without hash or md datestamp."""
    rows: list[tuple[object, ...]] = []
    for record in root.iter(OAI + "record"):
        header = record.find(OAI + "header")
        assert header is not None, "a record without a header"
        identifier = header.findtext(OAI + "identifier") or ""
        stamp = datetime.fromisoformat(header.findtext(OAI + "datestamp") or "")
        deleted = header.get("status") == "deleted"
        metadata = record.find(OAI + "metadata")
        xml = None
        if not deleted and metadata is not None and len(metadata):
            xml = etree.tostring(metadata[0], encoding="unicode", with_tail=False)
        rows.append((identifier, stamp, None, None, xml, deleted, [set_spec], None, False))
    return rows


async def harvest(base_url: str, set_spec: str, database_url: str) -> int:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    conn = await asyncpg.connect(database_url)
    stored = 0
    try:
        await conn.execute(
            f"create table {TABLE} (like records including storage including compression, "
            "primary key (identifier))"
        )
        params = {"verb": "ListRecords", "metadataPrefix": "iso19139", "set": set_spec}
        async with aiohttp.ClientSession() as session:
            while True:
                async with session.get(base_url, params=params) as response:
                    response.raise_for_status()
                    body = await response.read()
                root = etree.fromstring(body, parser)
                rows = rows_of(root, set_spec)
                await conn.copy_records_to_table(TABLE, records=rows, columns=COLUMNS)
                stored += len(rows)
                token = root.findtext(f"{OAI}ListRecords/{OAI}resumptionToken")
                if not token:
                    return stored
                params = {"verb": "ListRecords", "resumptionToken": token}
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m bench.sequential BASE_URL SET DATABASE_URL", file=sys.stderr)
        return 2
    print(asyncio.run(harvest(*argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
