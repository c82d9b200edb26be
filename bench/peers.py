"""Twenty peers harvested at once, one of them slow: does it slow the others?

Nineteen small OAI-PMH servers answer at once and one answers each page after a delay; all run
on loopback in this process. The harvester's scheduler harvests the twenty links into an empty
database, once with the slow peer among them and once without, and the run times of the normal
links are compared.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from datetime import UTC, datetime

from aiohttp import web

from tests.support.servers import identify_document
from wiscat.harvester.scheduler import Scheduler
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.oaipmh import render
from wiscat.shared.settings import Settings

PAGE = 100


def pages_for(centre: str, count: int) -> list[bytes]:
    """Pre-rendered ListRecords pages of ``count`` records, tokens ``p1``, ``p2``, ..."""
    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre=centre)) for n in range(count)]
    pages = []
    for start in range(0, count, PAGE):
        chunk = records[start : start + PAGE]
        more = start + PAGE < count
        token = render.resumption_token(
            f"p{start // PAGE + 1}" if more else None,
            cursor=start,
            complete_list_size=count,
            expiration=None,
        )
        pages.append(
            render.response_start(now, "http://peer/oai", {"verb": "ListRecords"}, "ListRecords")
            + b"".join(render.record(r.identifier, now, [], False, r.xml) for r in chunk)
            + token
            + render.response_end("ListRecords")
        )
    return pages


async def start_peer(pages: list[bytes], delay: float) -> tuple[web.AppRunner, str]:
    now = datetime.now(UTC)

    async def handler(request: web.Request) -> web.Response:
        verb = request.query.get("verb")
        if verb == "Identify":
            return web.Response(body=identify_document(request, now), content_type="text/xml")
        token = request.query.get("resumptionToken")
        index = int(token[1:]) if token else 0
        if delay:
            await asyncio.sleep(delay)
        return web.Response(body=pages[index], content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/oai"


async def harvest_all(database_url: str, urls: list[str]) -> dict[str, float]:
    """Run the scheduler until every link has succeeded; return each link's run seconds."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        gisc_name="BENCH",
        database_url=database_url,
        settle_seconds=0,
        harvest_concurrency=len(urls),
        harvest_per_host=2,
        harvest_poll_seconds=0.2,
    )
    async with harvest_context(settings, database_url) as ctx:
        await ctx.pool.execute("truncate records, set_members, links, harvest_runs cascade")
        for n, url in enumerate(urls):
            await link_store.add_link(
                ctx.pool,
                build_link(
                    name=f"peer-{n:02d}",
                    url=url,
                    remote_set=None,
                    into=f"WIS-GISC-P{n:02d}",
                    own_set="WIS-GISC-BENCH",
                    window_slices=0,
                ),
            )
        stop = asyncio.Event()
        task = asyncio.create_task(Scheduler(dataclasses.replace(ctx, worker="bench")).run(stop))
        try:
            while await ctx.pool.fetchval(
                "select count(*) from links where last_success_at is null"
            ):
                await asyncio.sleep(0.2)
        finally:
            stop.set()
            await task
        rows = await ctx.pool.fetch(
            "select link, extract(epoch from finished_at - started_at) as seconds "
            "from harvest_runs where status = 'ok'"
        )
        return {r["link"]: float(r["seconds"]) for r in rows}


async def run(
    database_url: str, *, peers: int = 20, records: int = 1000, delay: float = 2.0
) -> str:
    """Markdown lines with the figures."""
    pages = [pages_for(f"p{n}", records) for n in range(peers)]
    started = [await start_peer(pages[n], delay if n == 0 else 0.0) for n in range(peers)]
    try:
        urls = [url for _, url in started]
        t = time.perf_counter()
        without_slow = await harvest_all(database_url, urls[1:])
        wall_without = time.perf_counter() - t
        t = time.perf_counter()
        with_slow = await harvest_all(database_url, urls)
        wall_with = time.perf_counter() - t
    finally:
        for runner, _ in started:
            await runner.cleanup()
    slow_name = "peer-00"
    normal_with = [s for name, s in with_slow.items() if name != slow_name]
    normal_without = list(without_slow.values())
    med_with, med_without = statistics.median(normal_with), statistics.median(normal_without)
    pages_per_peer = len(pages[0])
    return "\n".join(
        [
            f"- {peers} peers x {records} records ({pages_per_peer} pages of {PAGE}), harvested at "
            f"once by one scheduler; peer-00 waits {delay:.1f} s before each page.",
            f"- the slow peer's run: {with_slow[slow_name]:.1f} s "
            f"(at least {pages_per_peer * delay:.0f} s by construction)",
            f"- the other {peers - 1} runs, median: {med_with:.2f} s with the slow peer present, "
            f"{med_without:.2f} s without it (ratio {med_with / med_without:.2f}); "
            f"slowest {max(normal_with):.2f} s vs {max(normal_without):.2f} s",
            f"- wall time until all {peers - 1} normal links were done: {wall_without:.1f} s "
            f"without the slow peer; with it, every link done after {wall_with:.1f} s",
        ]
    )
