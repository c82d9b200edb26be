"""The providers and scaling sections of ``make bench``: two providers serving one catalogue
(and one reading from a hot standby), and how the costs grow with the catalogue's size."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import time
from collections.abc import AsyncIterator
from urllib.parse import quote, urlsplit

from bench.clusters import BenchServer, Cluster, make_standby
from bench.measure import (
    OUT,
    WISCAT,
    free_port,
    load_average,
    loaded_database,
    process,
    provider_env,
    sink_node,
    timed_command,
)
from bench.provider_bench import Harvest, bare_harvest
from tests.support import pg
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db.pool import connect
from wiscat.shared.oaipmh.pages import announced_token
from wiscat.shared.settings import Settings


@contextlib.asynccontextmanager
async def provider(
    database: str, page_size: int, read_url: str | None = None
) -> AsyncIterator[str]:
    """A wiscat provider process on ``database`` (reading lists from ``read_url`` when given,
    a standby); yields its OAI-PMH base URL."""
    port = free_port()
    oai = f"http://127.0.0.1:{port}/oai"
    env = provider_env(database, port, page_size)
    if read_url:
        env["WISCAT_DATABASE_READ_URL"] = read_url
    async with process([WISCAT, "provider", "--port", str(port)], oai + "?verb=Identify", env):
        yield oai


def alternating_harvest(urls: list[str]) -> Harvest:
    """The minimal client's harvest with its pages asked of ``urls`` in turn, one connection
    each: every resumptionToken is continued by another provider than the one that gave it."""
    result = Harvest()
    conns = [http.client.HTTPConnection(urlsplit(u).hostname, urlsplit(u).port) for u in urls]
    query = "verb=ListRecords&metadataPrefix=iso19139"
    started = time.perf_counter()
    try:
        for page in range(10**9):
            conn = conns[page % len(conns)]
            t = time.perf_counter()
            conn.request("GET", f"/oai?{query}", headers={"Accept-Encoding": "identity"})
            response = conn.getresponse()
            body = response.read()
            assert response.status == 200, body[:300]
            result.latencies.append(time.perf_counter() - t)
            result.bytes += len(body)
            result.records += body.count(b"<record>")
            token = announced_token(body)
            if not token:
                break
            query = "verb=ListRecords&resumptionToken=" + quote(token, safe="")
    finally:
        for conn in conns:
            conn.close()
    result.seconds = time.perf_counter() - started
    return result


async def at_once(*harvests: tuple[str, bool]) -> tuple[float, list[Harvest]]:
    """Harvests of these (URL, whether the client parses) at once, each in a thread: the wall
    time from the first start to the last end, and each harvest."""
    started = time.perf_counter()
    done = await asyncio.gather(
        *(asyncio.to_thread(bare_harvest, url, parse=parse) for url, parse in harvests)
    )
    return time.perf_counter() - started, list(done)


async def _standby_reads(standby: Cluster, database: str) -> int:
    """Rows the standby has read in ``database`` so far, by its statistics (which an idle
    backend sends up to ten seconds late: wait them out first)."""
    await asyncio.sleep(11)
    conn = await connect(standby.url())
    try:
        value = await conn.fetchval(
            "select tup_returned + tup_fetched from pg_stat_database where datname = $1", database
        )
        return int(value or 0)
    finally:
        await conn.close()


async def _replayed(standby: Cluster, database: str, records: int) -> None:
    for _ in range(1200):
        with contextlib.suppress(Exception):  # the database not replayed yet
            conn = await connect(pg.with_database(standby.url(), database))
            try:
                if await conn.fetchval("select count(*) from records") >= records:
                    return
            finally:
                await conn.close()
        await asyncio.sleep(0.5)
    raise RuntimeError("the standby did not replay the catalogue in ten minutes")


async def bench_providers(server: BenchServer, records: int, page_size: int) -> list[str]:
    """Records/s of one provider, of two on one catalogue, and of a provider on a standby."""
    lines = [f"## Two providers on one catalogue, and a provider on a standby ({server.name})", ""]
    lines += [f"Load average at the start: {load_average()}.", ""]
    database = await loaded_database(server.url, records)
    name = urlsplit(database).path.lstrip("/")
    rows: list[str] = []

    def row(what: str, seconds: float, harvested: list[Harvest]) -> None:
        total = sum(h.records for h in harvested)
        assert all(h.records == records for h in harvested), [h.records for h in harvested]
        p99 = max(h.p99_ms for h in harvested)
        rows.append(
            f"| {what} | {total / seconds:,.0f} | {p99:.0f} | {load_average().split(',')[0]} |"
        )

    async with provider(database, page_size) as one, provider(database, page_size) as two:
        await asyncio.to_thread(bare_harvest, one, parse=False)  # warms the caches
        row("one provider, one minimal client", *await at_once((one, False)))
        row("one provider, two minimal clients at once", *await at_once((one, False), (one, False)))
        row(
            "two providers, a minimal client each at once",
            *await at_once((one, False), (two, False)),
        )
        split = await asyncio.to_thread(alternating_harvest, [one, two])
        row("two providers, one minimal client asking them in turn", split.seconds, [split])
        row("one provider, one parsing client", *await at_once((one, True)))
        row(
            "two providers, a parsing client each at once", *await at_once((one, True), (two, True))
        )
        if server.cluster is not None:
            standby = await asyncio.to_thread(
                make_standby, server.cluster, OUT / "debian-pg" / "standby"
            )
            try:
                await _replayed(standby, name, records)
                read_url = pg.with_database(standby.url(), name)
                async with provider(database, page_size, read_url) as third:
                    await asyncio.to_thread(bare_harvest, third, parse=False)
                    before = await _standby_reads(standby, name)
                    row(
                        "a provider reading from the standby, one minimal client",
                        *await at_once((third, False)),
                    )
                    read = await _standby_reads(standby, name) - before
                    row(
                        "a provider on the primary and one on the standby, a minimal client each",
                        *await at_once((one, False), (third, False)),
                    )
            finally:
                await asyncio.to_thread(standby.stop)
    lines += [
        f"{records:,} generated records, pages of {page_size}, on {server.name}; each provider "
        "a process of its own with its defaults, on the one catalogue; the clients are threads "
        "of the benchmark's process (the minimal and the parsing client of the provider "
        "section), each harvesting the whole list; a first harvest, not counted, warms the "
        "caches. Records/s counts every client's records over the wall time from the first "
        "start to the last end. The machine has two cores for everything: the providers, "
        "PostgreSQL (and the standby), and the clients.",
        "",
        "| providers and clients | records/s in all | worst p99 page ms | load (1 min) after |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
    if server.cluster is not None:
        lines += [
            "- the standby: `pg_basebackup -R` of the primary, streaming; the third provider "
            "has `WISCAT_DATABASE_READ_URL` on it, and the standby's own statistics counted "
            f"{read:,} rows read in the catalogue's database during its harvest",
            "",
        ]
    await pg.drop_database(server.url, database)
    return lines


# The relations whose sizes the scaling section reports, with their indexes.
_SIZES = """
select c.relname as relation, pg_table_size(c.oid) as heap, pg_indexes_size(c.oid) as indexes
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
 where n.nspname = current_schema() and c.relkind = 'r' and c.relname in ('records', 'set_members')
 order by c.relname
"""


async def _sizes(database: str) -> dict[str, tuple[int, int]]:
    conn = await connect(database)
    try:
        return {r["relation"]: (r["heap"], r["indexes"]) for r in await conn.fetch(_SIZES)}
    finally:
        await conn.close()


async def _full_and_quiet(
    server: BenchServer, source_oai: str, records: int, page_size: int
) -> tuple[float, float, float]:
    """A full harvest of ``source_oai`` into an empty node (records/s, peak MB), then the
    second incremental run with no changes in one harvester context (seconds)."""
    sink, env = await sink_node(server.url, source_oai, page_size)
    seconds, peak, code, summary = await asyncio.to_thread(
        timed_command, [WISCAT, "harvest", "bench", "--full"], env
    )
    assert code == 0, summary
    settings = Settings(_env_file=None, gisc_name="SINK", database_url=sink, settle_seconds=0)  # type: ignore[call-arg]
    quiet = 0.0
    async with harvest_context(settings, sink) as ctx:
        for _ in range(2):  # the first run also starts the page workers
            link = await link_store.get_link(ctx.pool, "bench")
            assert link is not None
            t = time.perf_counter()
            await harvest_link(ctx, link, window=False)
            quiet = time.perf_counter() - t
    await pg.drop_database(server.url, sink)
    return records / seconds, peak, quiet


async def bench_scaling(server: BenchServer, sizes: list[int], page_size: int) -> list[str]:
    """List and harvest rates, the no-op incremental run and the sizes on disk at each size."""
    rows = []
    for size in sizes:
        load = load_average().split(",")[0]
        started = time.perf_counter()
        database = await loaded_database(server.url, size)
        load_rate = size / (time.perf_counter() - started)
        sizes_on_disk = await _sizes(database)
        async with provider(database, page_size) as oai:
            await asyncio.to_thread(bare_harvest, oai, parse=False)
            listed = await asyncio.to_thread(bare_harvest, oai, parse=False)
            assert listed.records == size, (listed.records, size)
            stored, peak, quiet = await _full_and_quiet(server, oai, size, page_size)
        await pg.drop_database(server.url, database)
        records_heap, records_indexes = sizes_on_disk["records"]
        members_heap, members_indexes = sizes_on_disk["set_members"]
        rows.append(
            f"| {size:,} | {load_rate:,.0f} | {listed.rate:,.0f} | {listed.p99_ms:.0f} "
            f"| {stored:,.0f} | {peak:.0f} | {quiet:.2f} | {records_heap / 2**20:,.0f} "
            f"| {records_indexes / 2**20:,.1f} | {members_heap / 2**20:,.1f} "
            f"| {members_indexes / 2**20:,.1f} | {load} |"
        )
    return [
        f"## How the costs grow with the catalogue ({server.name})",
        "",
        f"At each size, in one run: a catalogue of generated records loaded (and vacuumed), "
        f"listed whole by the minimal client from one provider (pages of {page_size}, after a "
        "first harvest not counted), harvested whole by `wiscat harvest --full` into an empty "
        "node, then an incremental run with no changes (the second in one harvester context). "
        "Sizes are PostgreSQL's (`pg_table_size`, `pg_indexes_size`) in MiB, of the loaded "
        "catalogue, vacuumed.",
        "",
        "| records | loaded/s | listed/s | p99 page ms | harvested/s | harvest peak MB "
        "| no-op incremental s | records heap | records indexes | set_members heap "
        "| set_members indexes | load (1 min) at start |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
