"""Six OAI-PMH ListIdentifiers endpoints in one process, for the consistency checker benchmark.

``/source/oai`` lists a set of N identifiers; ``/peerK/oai`` (K = 1..5) list the same set as a
harvesting GISC would, in another order, with a few faults of each kind the checker reports.
Pages are made on request (1,000 headers each), so the server's memory stays small whatever N.

    python -m bench.check_peers --port P --size N
"""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime, timedelta

from aiohttp import web

PAGE = 1_000
STEPS = (7_919, 7_927, 7_933, 7_937, 7_949, 7_951)  # primes: each list is a permutation
SET = "WIS-GISC-BENCH"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
    "<responseDate>2026-11-01T00:00:00Z</responseDate>"
    '<request verb="ListIdentifiers">http://127.0.0.1/oai</request><ListIdentifiers>'
)


def stamp(seconds: int) -> str:
    return (BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Listing:
    """One endpoint's list: entry ``n`` of the list is record ``(n * STEP) % size``."""

    def __init__(self, size: int, peer: int) -> None:
        self.size = size
        self.peer = peer
        self.step = STEPS[peer]
        assert math.gcd(self.step, size) == 1, "the step must be coprime with the size"

    def header(self, n: int) -> str:
        record = (n * self.step) % self.size
        deleted = record % 100 == 0
        seconds = record * 7
        if self.peer:
            if record % (1_000 + self.peer) == 1:
                return ""  # missing at this peer
            if record % 5_000 == 2:
                seconds -= 86_400  # outdated
            elif record % 20_000 != 3:  # else: copied datestamp
                seconds += 3_600  # arrived an hour later: in step
            if record % 5_000 == 0:
                deleted = False  # a missed deletion
        status = ' status="deleted"' if deleted else ""
        return (
            f"<header{status}><identifier>urn:x-wmo:md:bench::rec.{record:07d}</identifier>"
            f"<datestamp>{stamp(seconds)}</datestamp><setSpec>{SET}</setSpec></header>"
        )

    def page(self, number: int) -> bytes:
        start = number * PAGE
        end = min(start + PAGE, self.size)
        headers = "".join(self.header(n) for n in range(start, end))
        if end < self.size:
            token = (
                f'<resumptionToken completeListSize="{self.size}" cursor="{start}">'
                f"{number + 1}</resumptionToken>"
            )
        else:
            token = f'<resumptionToken completeListSize="{self.size}" cursor="{start}"/>'
        return (HEAD + headers + token + "</ListIdentifiers></OAI-PMH>").encode()


def app(size: int) -> web.Application:
    listings = {"source": Listing(size, 0)} | {f"peer{k}": Listing(size, k) for k in range(1, 6)}

    async def oai(request: web.Request) -> web.Response:
        listing = listings[request.match_info["name"]]
        token = request.query.get("resumptionToken")
        if token is None and request.query.get("verb") != "ListIdentifiers":
            return web.Response(status=400)
        return web.Response(body=listing.page(int(token or 0)), content_type="text/xml")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    application = web.Application()
    application.router.add_get("/{name}/oai", oai)
    application.router.add_get("/healthz", ready)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args()
    web.run_app(app(args.size), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
