"""A provider that costs nothing: pre-rendered ListRecords pages from a folder, served as they are.

``python -m bench.static_server FOLDER PORT``: ``page-0.xml`` answers the first request, and a
``resumptionToken`` of ``pN`` answers ``page-N.xml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web


def main() -> None:
    folder, port = Path(sys.argv[1]), int(sys.argv[2])
    pages = {p.stem.split("-")[1]: p.read_bytes() for p in folder.glob("page-*.xml")}

    async def handler(request: web.Request) -> web.Response:
        token = request.query.get("resumptionToken", "p0")
        return web.Response(body=pages[token[1:]], content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
