"""Harvester workers on several machines: three ``wiscat harvester`` processes on one database
share 60 links of three peer hosts by lease; one is SIGKILLed mid-run and the others finish its
links at once (its leases went with its sessions); no link runs twice at once; and
WISCAT_HARVEST_PER_HOST holds across the processes, a link of a full host left unleased.

WISCAT_WORKER_LINKS sets the number of links (60 here; `make soak` runs 600)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web

from tests.e2e.nodes import Node, NodeFactory
from tests.support.servers import identify_document, list_records_page, serving_app
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.oaipmh import render

HOSTS = 3
LINKS = int(os.environ.get("WISCAT_WORKER_LINKS", "60"))  # a third a host
PAGES = 3
PER_HOST = 2
DELAY = 0.1  # a page's wait at the peer: a run lasts about PAGES * DELAY
INTO = "WIS-GISC-SHARED"
OURS_BEFORE_KILL = {("failed", "abandoned"), ("ok", None)}


@dataclass
class PeerHost:
    """One peer host serving a list of ``PAGES`` one-record pages per link (``/oai/<link>``),
    and counting the links it is serving a request of at each moment."""

    number: int
    pages: dict[str, list[bytes]] = field(default_factory=dict)
    serving: Counter[str] = field(default_factory=Counter)
    most_links_at_once: int = 0

    def add_link(self, link: str, first: int) -> None:
        now = datetime.now(UTC)
        self.pages[link] = []
        for n in range(PAGES):
            record = parse_record(generate_record(first + n, centre=f"host{self.number}"))
            more = n + 1 < PAGES
            token = render.resumption_token(
                f"p{n + 1}" if more else None, cursor=n, complete_list_size=PAGES, expiration=None
            )
            piece = render.record(record.identifier, now, [], False, record.xml)
            self.pages[link].append(list_records_page([piece + token]))

    async def handle(self, request: web.Request) -> web.Response:
        if request.query.get("verb") == "Identify":
            body = identify_document(request, datetime(2000, 1, 1, tzinfo=UTC))
            return web.Response(body=body, content_type="text/xml")
        link = request.match_info["link"]
        self.serving[link] += 1
        self.most_links_at_once = max(self.most_links_at_once, len(+self.serving))
        try:
            await self.wait(request)
            token = request.query.get("resumptionToken")
            page = self.pages[link][int(token[1:]) if token else 0]
        finally:
            self.serving[link] -= 1
        return web.Response(body=page, content_type="text/xml")

    @staticmethod
    async def wait(request: web.Request) -> None:
        """``DELAY``, or less when the client goes away: a killed worker's request is not
        counted once its connection is closed (its host slot is free then, too)."""
        for _ in range(round(DELAY / 0.01)):
            if request.transport is None or request.transport.is_closing():
                return
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def peer_hosts() -> AsyncIterator[list[tuple[PeerHost, str]]]:
    """``HOSTS`` peers, each on its own port (a host of its own to the harvester): (peer, root)."""
    async with contextlib.AsyncExitStack() as stack:
        hosts = []
        for number in range(HOSTS):
            peer = PeerHost(number)
            app = web.Application()
            app.router.add_get("/oai/{link}", peer.handle)
            hosts.append((peer, await stack.enter_async_context(serving_app(app))))
        yield hosts


async def add_links(pool: Pool, hosts: list[tuple[PeerHost, str]]) -> None:
    await store.ensure_set(pool, INTO, INTO, "remote")
    for n in range(LINKS):
        peer, root = hosts[n % HOSTS]
        name = f"link-{n:02d}"
        peer.add_link(name, n * PAGES)
        new = build_link(
            name=name, url=f"{root}/oai/{name}", remote_set=None, into=INTO, own_set="WIS-GISC-W"
        )
        await link_store.add_link(pool, new)


# leases held now per peer host, a killed worker's left aside (they are free: see the test)
_LEASED_PER_HOST = """
select substring(base_url from '//([^/]+)/') as host, count(*) as leased from links
where lease_owner is not null and lease_owner <> $1
group by 1
"""


async def watch_leases(pool: Pool, dead: list[str], most: Counter[str]) -> None:
    while True:
        for row in await pool.fetch(_LEASED_PER_HOST, dead[0] if dead else ""):
            most[row["host"]] = max(most[row["host"]], row["leased"])
        await asyncio.sleep(0.02)


async def test_three_workers_share_60_links_and_one_is_killed(make_node: NodeFactory) -> None:
    first = await make_node("W")
    workers = [first] + [Node("W", first.database_url) for _ in range(2)]
    for node in workers:
        node.extra |= {
            "WISCAT_HARVEST_CONCURRENCY": "4",  # 12 in all, more than 3 hosts x 2
            "WISCAT_HARVEST_PER_HOST": str(PER_HOST),
            "WISCAT_HARVEST_PAGE_WORKERS": "0",
        }  # the default lease (300 s): a killed worker's links are taken over by its session
    pool = await create_pool(first.database_url, max_size=3)
    most_leased: Counter[str] = Counter()
    dead: list[str] = []
    watcher = asyncio.create_task(watch_leases(pool, dead, most_leased))
    try:
        async with peer_hosts() as hosts:
            # the workers start (a few seconds) while the links are added
            starting = [
                w.start("harvester", f"http://127.0.0.1:{w.harvester_port}/readyz") for w in workers
            ]
            started, _ = await asyncio.gather(asyncio.gather(*starting), add_links(pool, hosts))
            victim = started[1]
            name = f"{socket.gethostname()}:{victim.pid}"
            for _ in range(600):
                ok = await pool.fetchval("select count(*) from harvest_runs where status = 'ok'")
                mine = await pool.fetchval(
                    "select count(*) from harvest_runs where status = 'running' and worker = $1",
                    name,
                )
                if ok >= 6 and mine:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the second worker never ran a link")
            dead.append(name)
            killed_at = await pool.fetchval("select clock_timestamp()")
            victim.send_signal(signal.SIGKILL)
            await victim.wait()

            for _ in range(300 + LINKS * 5):  # 60 s for 60 links, far below any lease
                done = await pool.fetchval(
                    "select count(*) from links where last_success_at is not null"
                )
                if done == LINKS:
                    break
                await asyncio.sleep(0.1)
            assert done == LINKS

            runs = await pool.fetch(
                "select link, worker, status, error_kind, started_at, finished_at "
                "from harvest_runs order by link, started_at, id"
            )
            by_link = defaultdict(list)
            for run in runs:
                by_link[run["link"]].append(run)
            abandoned = 0
            for link, its_runs in by_link.items():
                # each link's last run ok; before it, the killed worker's alone: closed as
                # abandoned, or ok where it was killed before it gave the link back
                assert its_runs[-1]["status"] == "ok", its_runs
                for run in its_runs[:-1]:
                    assert run["worker"] == name, its_runs
                    assert (run["status"], run["error_kind"]) in OURS_BEFORE_KILL, its_runs
                    abandoned += run["status"] == "failed"
                # a killed worker's link was taken only once it was dead
                if len(its_runs) > 1:
                    assert its_runs[-1]["started_at"] > killed_at, its_runs
                # never twice at once: each run starts after the one before it ended
                for before, after in itertools.pairwise(its_runs):
                    assert after["started_at"] >= before["finished_at"], (link, its_runs)
            assert abandoned >= 1
            assert await pool.fetchval("select count(*) from records") == LINKS * PAGES
            # the two others took the killed worker's links over
            taken_over = {r[-1]["worker"] for r in by_link.values() if len(r) > 1}
            assert taken_over and name not in taken_over

            # the per-host limit held across the three processes, and was reached
            assert [peer.most_links_at_once for peer, _ in hosts] == [PER_HOST] * HOSTS
            # and no lease was taken while its host was full
            assert sorted(most_leased.values()) == [PER_HOST] * HOSTS, most_leased
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        for node in workers[1:]:
            await node.stop()
        await pool.close()
