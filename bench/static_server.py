"""A provider that costs nothing: pre-rendered ListRecords pages on disk, sent as they are.

``python -m bench.static_server FOLDER PORT``: the first request of a list is answered with
``FOLDER/first.xml``, a request with resumptionToken T with ``FOLDER/<page_key(T)>.xml`` (the
pages a real provider answered, saved under the token that asked for each), sent by sendfile.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from aiohttp import web


def page_key(token: str | None) -> str:
    """The file name (without .xml) of the page that ``token`` asks for."""
    if token is None:
        return "first"
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def main() -> None:
    folder, port = Path(sys.argv[1]), int(sys.argv[2])

    async def handler(request: web.Request) -> web.StreamResponse:
        path = folder / f"{page_key(request.query.get('resumptionToken'))}.xml"
        if not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path, headers={"Content-Type": "text/xml; charset=utf-8"})

    app = web.Application()
    app.router.add_get("/oai", handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
