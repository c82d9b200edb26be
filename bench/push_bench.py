"""Change hints on real nodes: how fast a change reaches every GISC with hourly schedules.

Every node is a ``wiscat run`` process over its own database (one PostgreSQL server), every
setting at its default (hints on), with a link to every other node's own set scheduled hourly:
what moves a change at once is the providers' change hints. Measured:

- one hop: changes at one node (new records, updates, deletions), each timed until every other
  node holds it as the origin does (its content hash and deleted flag, polled in their databases);
- two hops: an NC node harvested into one GISC's own set, which every other GISC harvests;
- a quiet mesh: harvest runs started while nothing changes (the catch-up at connection excluded);
- a burst of changes at one node, written as ``wiscat ingest`` writes a folder (a transaction
  a second): the time after the last until every node holds all, and the most runs of one link
  that overlapped (never more than one in flight);
- idle streams on one provider: its memory and database connections, and a list page's p99 with
  and without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.measure import descendants, load_average, machine, percentile, resident_mb
from tests.e2e.mesh import Mesh, record
from wiscat.shared.db.pool import connect, create_pool
from wiscat.shared.ingest import ingest_paths

REACH_TIMEOUT = 15.0
CATCH_UP_TIMEOUT = 120.0  # every link's first run, at connection
HOURLY = {"wait": False, "window_slices": None, "every": "1h"}  # every other option the default


@dataclass(frozen=True)
class Size:
    nodes: int
    changes: int
    two_hop: int
    quiet: float
    burst: int
    burst_seconds: float
    streams: int
    list_samples: int = 1000  # list requests for each p99 beside the idle streams
    idle_turns: int = 5  # turns of list requests without the idle streams, then with them


FULL = Size(
    nodes=10, changes=50, two_hop=20, quiet=300.0, burst=1000, burst_seconds=10.0, streams=200
)
BURST_BATCH_SECONDS = 1.0  # the burst is ingested a transaction a second
QUICK = Size(
    nodes=3, changes=6, two_hop=3, quiet=5.0, burst=40, burst_seconds=2.0, streams=20,
    list_samples=100,
)  # fmt: skip

NAMES = [f"N{n:02d}" for n in range(10)]


def own(name: str) -> str:
    return f"WIS-GISC-{name}"


class Push:
    def __init__(self, mesh: Mesh, names: list[str]) -> None:
        self.mesh = mesh
        self.names = names
        self.conns: dict[str, asyncpg.Connection] = {}

    async def open(self) -> None:
        for name, node in self.mesh.nodes.items():
            self.conns[name] = await connect(node.database_url)

    async def close(self) -> None:
        for conn in self.conns.values():
            await conn.close()

    async def state(self, name: str, identifier: str) -> tuple[Any, ...] | None:
        row = await self.conns[name].fetchrow(
            "select content_hash, deleted from records where identifier = $1", identifier
        )
        return None if row is None else tuple(row)

    async def reach(self, origin: str, identifier: str, others: list[str]) -> list[float]:
        """Seconds until each of ``others`` holds ``identifier`` as ``origin`` does now; a node
        not reached within REACH_TIMEOUT counts as that timeout."""
        started = time.monotonic()
        wanted = await self.state(origin, identifier)
        times: dict[str, float] = {}
        while len(times) < len(others) and time.monotonic() - started < REACH_TIMEOUT:
            for name in others:
                if name not in times and await self.state(name, identifier) == wanted:
                    times[name] = time.monotonic() - started
            await asyncio.sleep(0.02)
        return [times.get(name, REACH_TIMEOUT) for name in others]

    async def change(self, origin: str, k: int, live: list[tuple[int, str]]) -> str:
        """The ``k``-th change at ``origin``: a new record, an update of a live one, or a
        deletion, in turn."""
        kind = k % 3
        if kind == 1 and live:
            n, identifier = live[-1]
            await self.mesh.put(origin, n, origin.lower(), version=1 + k)
            return identifier
        if kind == 2 and live:
            _, identifier = live.pop(0)
            await self.mesh.delete(origin, identifier)
            return identifier
        identifier = await self.mesh.put(origin, 10_000 + k, origin.lower())
        live.append((10_000 + k, identifier))
        return identifier

    async def tally(self) -> dict[str, tuple[int, int]]:
        """Each node's records and its harvest runs in flight."""
        tally = {}
        for name, conn in self.conns.items():
            row = await conn.fetchrow(
                "select (select count(*) from records), "
                "(select count(*) from harvest_runs where status = 'running')"
            )
            tally[name] = (int(row[0]), int(row[1]))
        return tally

    async def caught_up(self, records: int) -> bool:
        tally = await self.tally()
        return all(running == 0 for _, running in tally.values()) and all(
            tally[name][0] == records for name in self.names
        )

    async def last_run_ids(self) -> dict[str, int]:
        return {
            name: int(await conn.fetchval("select coalesce(max(id), 0) from harvest_runs"))
            for name, conn in self.conns.items()
        }

    async def runs_since(self, ids: dict[str, int]) -> int:
        runs = 0
        for name, conn in self.conns.items():
            runs += await conn.fetchval(
                "select count(*) from harvest_runs where id > $1", ids[name]
            )
        return runs

    async def most_overlapping(self) -> int:
        """The most runs of one link in flight at once, over every node's run records."""
        most = 0
        for conn in self.conns.values():
            found = await conn.fetchval(
                "select coalesce(max(n), 1) from (select a.id, count(*) as n from harvest_runs a "
                "join harvest_runs b on a.link = b.link and b.started_at <= a.started_at "
                "and coalesce(b.finished_at, now()) > a.started_at group by a.id) per_run"
            )
            most = max(most, int(found))
        return most

    async def holds_all(self, identifiers: list[str]) -> bool:
        for name in self.names[1:]:
            count = await self.conns[name].fetchval(
                "select count(*) from records where identifier = any($1::text[])", identifiers
            )
            if count != len(identifiers):
                return False
        return True


async def ingest_burst(mesh: Mesh, origin: str, size: Size) -> tuple[list[str], float]:
    """``size.burst`` new records written at ``origin`` as ``wiscat ingest`` writes a folder
    (its own function, on the node's database), a folder a transaction, one begun every
    BURST_BATCH_SECONDS over ``size.burst_seconds``: their identifiers, and the seconds from the
    first commit to the last, the time the changes were made in. (One admin PUT a record, 16 in
    flight, wrote 1,000 in 24 to 37 s on 2 cores beside nine harvesting nodes.)"""
    batches = max(1, round(size.burst_seconds / BURST_BATCH_SECONDS))
    identifiers: list[str] = []
    with tempfile.TemporaryDirectory(prefix="wiscat-burst-") as scratch:
        folders = [Path(scratch, f"{k:03d}") for k in range(batches)]
        for k in range(size.burst):
            identifier, data = record(20_000 + k, origin.lower())
            folder = folders[k * batches // size.burst]
            folder.mkdir(exist_ok=True)
            (folder / f"{k:05d}.xml").write_bytes(data)
            identifiers.append(identifier)
        pool = await create_pool(mesh.nodes[origin].database_url, max_size=batches)

        async def ingest(folder: Path) -> float:
            report = await ingest_paths(pool, own(origin), [folder])
            assert report.counts["added"] == len(list(folder.iterdir())), report.counts
            return time.monotonic()

        try:
            # each begun on time, whether the one before has committed or not (as ingests
            # started by the clock are), so that a slow one does not put the rest behind
            began = time.monotonic()
            ingests = []
            for k, folder in enumerate(folders):
                await asyncio.sleep(max(0.0, began + k * BURST_BATCH_SECONDS - time.monotonic()))
                ingests.append(asyncio.create_task(ingest(folder)))
            commits = sorted(await asyncio.gather(*ingests))
        finally:
            await pool.close()
    return identifiers, commits[-1] - commits[0]


async def list_times(
    http: aiohttp.ClientSession, oai: str, params: dict[str, str], count: int
) -> list[float]:
    """The seconds each of ``count`` list requests took, one after another."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        async with http.get(oai, params=params) as response:
            await response.read()
            assert response.status == 200
        times.append(time.perf_counter() - started)
    return times


async def idle_streams(
    push: Push, http: aiohttp.ClientSession, streams: int, samples: int, turns: int
) -> list[str]:
    """The provider's memory and database connections with ``streams`` idle streams open, and
    its list page's p99 with them and without them, over ``samples`` requests each, taken in
    turns (without, then with, ``turns`` times): a drift of the machine during the
    measurement, such as the vacuum after the burst, counts against both alike."""
    node = push.mesh.nodes[push.names[0]]
    pid = node.processes[-1].pid
    stats = "select count(*) from pg_stat_activity where datname = current_database()"
    conn = push.conns[push.names[0]]
    params = {"verb": "ListIdentifiers", "metadataPrefix": "iso19139", "set": own(push.names[0])}
    each = max(1, samples // turns)
    await list_times(http, node.oai, params, 50)  # warm
    tree = [pid, *descendants(pid)]
    without: list[float] = []
    with_them: list[float] = []
    memory: list[tuple[float, int]] = []  # before and with the streams, in the first turn
    for _ in range(turns):
        without += await list_times(http, node.oai, params, each)
        memory.append((resident_mb(tree), await conn.fetchval(stats)))
        # a peer a stream, each from an address of its own (the provider bounds streams per
        # client address): 127.0.1.1, 127.0.1.2, ... all reach the loopback provider
        async with contextlib.AsyncExitStack() as stack:
            for i in range(streams):
                peer = aiohttp.TCPConnector(local_addr=(f"127.0.{1 + i // 250}.{1 + i % 250}", 0))
                idle = await stack.enter_async_context(aiohttp.ClientSession(connector=peer))
                response = await stack.enter_async_context(
                    idle.get(f"{node.oai}/changes", params={"set": own(push.names[0])})
                )
                assert response.status == 200, response.status
            await asyncio.sleep(2)
            memory.append((resident_mb(tree), await conn.fetchval(stats)))
            with_them += await list_times(http, node.oai, params, each)
        await asyncio.sleep(1)  # the streams closed
    (rss_before, db_before), (rss_after, db_after) = memory[:2]
    p99_without, p99_with = percentile(without, 0.99) * 1000, percentile(with_them, 0.99) * 1000
    worse = (p99_with / p99_without - 1) * 100
    return [
        f"| {streams} idle streams on one provider | RSS {rss_before:.0f} MiB before, "
        f"{rss_after:.0f} MiB with them (+{(rss_after - rss_before) * 1024 / streams:.0f} "
        f"KiB a stream); database connections {db_before} before, {db_after} with them; "
        f"ListIdentifiers p99 {p99_without:.1f} ms without, {p99_with:.1f} ms with "
        f"({worse:+.0f} %; {len(without)} requests each, in {turns} turns) "
        f"| p99 within 10 % | {'met' if worse <= 10 else 'missed'} |",
    ]


async def run(template_url: str, size: Size = FULL) -> list[str]:
    names = NAMES[: size.nodes]
    started_at = datetime.now(UTC)
    async with aiohttp.ClientSession() as http:
        # the settle window and every other setting at their defaults
        mesh = Mesh(template_url, http, settle=0.5)
        push = Push(mesh, names)
        try:
            for name in [*names, "NC"]:
                # the test mesh's nodes turn hints off and poll every 0.2 s: both back to the
                # defaults here. Every peer comes from 127.0.0.1 on loopback, where GISCs each
                # have an address: streams per client address as many as the peers
                await mesh.add_node(
                    name,
                    WISCAT_HINTS="true",
                    WISCAT_HARVEST_POLL_SECONDS="2",
                    WISCAT_HINTS_MAX_STREAMS_PER_CLIENT=str(max(8, size.nodes + 1)),
                )
            await mesh.start()
            for name in names:
                for n in range(5):
                    await mesh.put(name, n, name.lower())
            await asyncio.sleep(2)  # the seed records listable: the first runs take them all
            # every link hourly, every other setting the node's default (its rolling window)
            for name in names:
                for other in names:
                    if other != name:
                        await mesh.link(name, other.lower(), other, own(other), **HOURLY)
            await mesh.link(names[0], "area-nc", "NC", own("NC"), into=own(names[0]), **HOURLY)
            await push.open()
            # the catch-up at connection: every link's first run
            deadline = time.monotonic() + CATCH_UP_TIMEOUT
            while not await push.caught_up(len(names) * 5):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the mesh did not catch up at connection within {CATCH_UP_TIMEOUT:.0f} "
                        f"s (records, runs in flight): {await push.tally()}\n"
                        + "\n".join(log.read_text()[-3000:] for log in mesh.nodes[names[0]].logs)
                    )
                await asyncio.sleep(0.1)
            await asyncio.sleep(2)

            origin, others = names[0], names[1:]
            live: list[tuple[int, str]] = []
            one_hop: list[float] = []
            for k in range(size.changes):
                identifier = await push.change(origin, k, live)
                one_hop += await push.reach(origin, identifier, others)

            nc_live: list[tuple[int, str]] = []
            two_hop: list[float] = []
            for k in range(size.two_hop):
                identifier = await push.change("NC", k * 3, nc_live)  # new records only
                two_hop += await push.reach("NC", identifier, others)

            await asyncio.sleep(2)
            ids = await push.last_run_ids()
            await asyncio.sleep(size.quiet)
            quiet_runs = await push.runs_since(ids)

            burst, wrote = await ingest_burst(mesh, origin, size)
            last = time.monotonic()
            while not await push.holds_all(burst) and time.monotonic() - last < 120:
                await asyncio.sleep(0.1)
            burst_all = time.monotonic() - last
            overlap = await push.most_overlapping()

            streams = await idle_streams(
                push, http, size.streams, size.list_samples, size.idle_turns
            )
        finally:
            await push.close()
            await mesh.close()

    def met(ok: bool) -> str:
        return "met" if ok else "missed"

    p95, worst = percentile(one_hop, 0.95), max(one_hop)
    p95_two = percentile(two_hop, 0.95)
    return [
        "## Push: change hints between nodes",
        "",
        f"{started_at:%Y-%m-%d %H:%M} UTC, {machine()}, load average at the start "
        f"{load_average()}, `python -m bench.run --only push"
        f"{' --push-quick' if size == QUICK else ''}`. A full mesh of {size.nodes} `wiscat run` "
        "processes (one PostgreSQL server, a database each), every link hourly, every setting "
        "at its default (hints on) but the change-hint streams a client address may open "
        "(every node is 127.0.0.1 here: as many as the nodes); an NC node harvested into the "
        "first GISC's own set.",
        "",
        "| measured | figure | goal | |",
        "|---|---|---|---|",
        f"| one hop: {size.changes} changes at one node (new, update, deletion in turn), time "
        f"until each of the {size.nodes - 1} others holds it | p95 {p95:.2f} s, max "
        f"{worst:.2f} s | p95 ≤ 2 s, max ≤ 5 s | {met(p95 <= 2 and worst <= 5)} |",
        f"| two hops: {size.two_hop} new records at NC, time until each GISC but the first "
        f"holds it | p95 {p95_two:.2f} s, max {max(two_hop):.2f} s | p95 ≤ 5 s "
        f"| {met(p95_two <= 5)} |",
        f"| quiet mesh for {size.quiet:.0f} s: harvest runs started | {quiet_runs} | 0 "
        f"| {met(quiet_runs == 0)} |",
        f"| {size.burst} new records at one node, committed over {wrote:.1f} s (ingested, "
        f"a transaction begun every {BURST_BATCH_SECONDS:.0f} s): every node holds all, after "
        f"the last "
        f"| {burst_all:.1f} s; at most {overlap} run of one link in flight at once "
        f"| in ≤ {size.burst_seconds:.0f} s: ≤ 15 s; ≤ 1 "
        f"| {met(wrote <= size.burst_seconds and burst_all <= 15 and overlap <= 1)} |",
        *streams,
        "",
    ]
