"""The minimal provider, the provider section's reference from PostgreSQL: read a keyset page of
the catalogue, put each stored document between its header and the record's closing tags, send
the page, in turn.

It does what any provider serving a catalogue from PostgreSQL must, done plainly, and nothing
else: no arguments checked (a token is trusted), no sets, no deleted records, no XML IDs, no
reading ahead, no metrics, a token that is the last key in plain text. The documents come as
wiscat's provider takes them (``textsend``: the stored bytes, not checked again), and a page is
one response of aiohttp's, as the zero-cost provider's. Where the zero-cost provider shows what
the client and the machine cost, this shows what reading the records from PostgreSQL adds; wiscat's
provider, doing all the rest, is measured against both in the same run.

    python -m bench.minimal_provider DATABASE_URL PORT PAGE_SIZE
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import asyncpg
from aiohttp import web

from wiscat.shared.oaipmh import render

_PAGE = """
select identifier, datestamp, textsend(xml) as xml
from records
where (datestamp, identifier) > ($1::timestamptz, $2::text) and not deleted
order by datestamp, identifier
limit $3
"""
_FIRST = (datetime.min.replace(tzinfo=UTC), "")


def main() -> None:
    database_url, port, page_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    async def start(app: web.Application) -> None:
        app["db"] = await asyncpg.connect(database_url)

    async def stop(app: web.Application) -> None:
        await app["db"].close()

    async def handler(request: web.Request) -> web.Response:
        token = request.query.get("resumptionToken")
        if token is None:
            after = _FIRST
        else:
            stamp, identifier = token.split("|", 1)
            after = (datetime.fromisoformat(stamp), identifier)
        rows = await request.app["db"].fetch(_PAGE, *after, page_size)
        parts = [render.response_start(datetime.now(UTC), "bench", None, "ListRecords")]
        for identifier, datestamp, xml in rows:
            header = render.header(identifier, datestamp, (), deleted=False)
            parts += (b"<record>", header, b"<metadata>", xml, b"</metadata></record>")
        if len(rows) == page_size:
            last = rows[-1]
            token = f"{last['datestamp'].isoformat()}|{last['identifier']}"
            end = render.resumption_token(token, cursor=0, complete_list_size=0, expiration=None)
            parts.append(end)
        parts.append(render.response_end("ListRecords"))
        return web.Response(body=b"".join(parts), content_type="text/xml", charset="utf-8")

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/oai", handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
