"""Meshes of 5 and 10 real nodes: how fast a change travels, and what a quiet round costs.

Every node is a ``wiscat run`` process over its own database (one PostgreSQL server), with a
link to every other node's own set (a full mesh, as GISCs are linked). Rounds are driven through
each node's admin API ("harvest now" on every link at once). Measured:

- propagation: a record added at one node, then rounds until every node holds it (rounds and
  wall seconds from the write);
- a quiet round, with no change anywhere: requests the providers answered (their own request
  counters, Identify included), response bytes of the lists, and records re-sent.
"""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp

from tests.e2e.mesh import Mesh

NAMES = [f"N{n:02d}" for n in range(10)]
RECORDS_PER_NODE = 20


async def requests_served(mesh: Mesh) -> int:
    total = 0
    async with aiohttp.ClientSession() as http:
        for node in mesh.nodes.values():
            async with http.get(f"{node.root}/metrics") as response:
                text = await response.text()
            total += sum(
                int(float(value))
                for value in re.findall(r"^wiscat_oai_requests_total\{[^}]*\} (\S+)$", text, re.M)
            )
    return total


async def one_mesh(template_url: str, size: int) -> str:
    async with aiohttp.ClientSession() as http:
        mesh = Mesh(template_url, http, settle=4.0)
        try:
            names = NAMES[:size]
            for name in names:
                await mesh.add_node(name)
            await mesh.start()
            for name in names:
                for n in range(RECORDS_PER_NODE):
                    await mesh.put(name, n, name.lower())
                for other in names:
                    if other != name:
                        await mesh.link(name, other.lower(), other, f"WIS-GISC-{other}", wait=False)
            # every link's first run (a new link is due at once) ends before the rounds
            await asyncio.gather(*(mesh.first_run(n, link) for n, link in mesh.all_links()))
            links = len(mesh.all_links())
            for _ in range(2):
                await mesh.round(concurrent=True)

            identifier = await mesh.put(names[0], 999, names[0].lower())
            written = time.monotonic()
            rounds = 0
            while True:
                await mesh.round(concurrent=True)
                rounds += 1
                holders = [n for n in names if identifier in await mesh.catalogue(n)]
                if len(holders) == size or rounds == 5:
                    break
            seconds = time.monotonic() - written

            await mesh.round(concurrent=True)  # settle the HWMs past the change
            before = await requests_served(mesh)
            started = time.monotonic()
            runs = await mesh.round(concurrent=True)
            quiet = time.monotonic() - started
            requests = await requests_served(mesh) - before
            list_bytes = sum(run["bytes"] for run in runs)
            resent = sum(run["unchanged"] for run in runs)
            stored = sum(run["added"] + run["updated"] + run["deleted"] for run in runs)
            reached = "every node" if len(holders) == size else f"{len(holders)} of {size}"
            return (
                f"| {size} | {links} | {rounds} ({reached}) | {seconds:.1f} s | "
                f"{requests} ({requests / links:.1f} per link) | "
                f"{list_bytes / links / 1024:.1f} KB | "
                f"{resent / links:.1f} | {stored} | {quiet:.1f} s |"
            )
        finally:
            await mesh.close()


async def run(template_url: str) -> list[str]:
    rows = [await one_mesh(template_url, size) for size in (5, 10)]
    return [
        "## A mesh of real nodes: propagation and the cost of a quiet round",
        "",
        f"Full meshes of `wiscat run` processes on one machine (one PostgreSQL server), each node "
        f"with {RECORDS_PER_NODE} records of its own and a link to every other node's own set; "
        "rounds driven through the admin API, every link at once. A record is added at one node, "
        "then rounds run until every node holds it (seconds from the write, the settle window "
        "included); then one round with no change anywhere.",
        "",
        "| nodes | links | rounds to reach | seconds to reach | requests in a quiet round "
        "| list bytes per link | records re-sent per link | records stored | quiet round |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "- The nodes run with a settle window of 4 s, so each provider states in Identify that "
        "its lists show a datestamp second only once all of it is visible; the harvesters then "
        "ask `from = HWM + 1 s`. In a quiet round each link makes one small request, a list "
        "request answered `noRecordsMatch` (the peer's Identify, read on the link's first run, "
        "is read again after an hour, on a full run or after a failure); nothing is "
        "re-sent or stored, and no datestamp changes (asserted in `tests/e2e/test_mesh.py` and "
        "`tests/integration/test_harvest_provider.py`). "
        "Against a provider without that guarantee the harvester asks `from = HWM` "
        "and the records of the HWM's second come again each run.",
        "",
    ]
