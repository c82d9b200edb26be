"""The harvester, peers and check sections of ``make bench``: wiscat's harvester against
third-party OAI-PMH clients, many peers at once, and ``wiscat check`` against its references."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time

import aiohttp
import asyncpg

from bench import peers
from bench.cpu import CpuUse
from bench.floor import floor_lines, library_costs
from bench.measure import (
    CPU_GROUPS,
    OUT,
    ROOT,
    SOURCE_SET,
    WISCAT,
    free_port,
    load_average,
    process,
    provider_env,
    sink_node,
    timed_command,
)
from tests.support import pg
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.settings import Settings


def iterate_with(client: str, url: str) -> int:
    """Third-party clients merely iterating the list (no storing)."""
    if client == "sickle":
        from sickle import Sickle

        return sum(
            1 for _ in Sickle(url).ListRecords(metadataPrefix="iso19139", ignore_deleted=False)
        )
    if client == "oaipmh-scythe":
        from oaipmh_scythe import Scythe

        with Scythe(url) as scythe:
            return sum(1 for _ in scythe.list_records(metadata_prefix="iso19139"))
    import oaipmh.client
    import oaipmh.metadata
    from oaipmh.client import Client
    from oaipmh.metadata import MetadataRegistry

    from tests.integration.test_interop_clients import _pyoai_compatible_etree

    oaipmh.client.etree = _pyoai_compatible_etree()
    oaipmh.metadata.etree = _pyoai_compatible_etree()
    registry = MetadataRegistry()
    registry.registerReader("iso19139", lambda element: element)
    return sum(1 for _ in Client(url, registry).listRecords(metadataPrefix="iso19139"))


async def bench_harvester(
    server_url: str,
    source: str,
    records: int,
    page_size: int,
    on: str = "",
    figures: dict[str, float] | None = None,
) -> list[str]:
    """The section's lines, titled with ``on`` (the server's name) when given; its main figures
    also go in ``figures`` when given (the side-by-side table of the servers)."""
    lines = ["## Harvester: a full harvest into an empty node" + (f", {on}" if on else ""), ""]
    lines += [f"Load average at the start: {load_average()}.", ""]
    port = free_port()
    oai = f"http://127.0.0.1:{port}/oai"
    rows = []
    async with process(
        [WISCAT, "provider", "--port", str(port)],
        oai + "?verb=Identify",
        provider_env(source, port, page_size),
    ):
        sink, env = await sink_node(server_url, oai, page_size)
        harvest_cpu = CpuUse(CPU_GROUPS)
        written = await server_writes(server_url)
        with harvest_cpu.measured():
            seconds, peak, code, summary = await asyncio.to_thread(
                timed_command, [WISCAT, "harvest", "bench", "--full"], env
            )
        written = {k: v - written[k] for k, v in (await server_writes(server_url)).items()}
        summary = summary.strip()
        assert code == 0, summary
        stored = records / seconds
        rows.append(
            "| wiscat harvest (fetch, parse, hash, store), the process and its page workers "
            f"| {stored:,.0f} | {peak:.0f} MB |"
        )

        # the reference: fetch, parse, COPY, in turn, into a node's database of its own
        reference = await pg.clone_template(server_url)
        sequential_cpu = CpuUse(CPU_GROUPS)
        with sequential_cpu.measured():
            seq_seconds, seq_peak, code, out = await asyncio.to_thread(
                timed_command,
                [sys.executable, "-m", "bench.sequential", oai, SOURCE_SET, reference],
                {**os.environ, "PYTHONPATH": str(ROOT)},
            )
        assert code == 0 and int(out) == records, out
        sequential = records / seq_seconds
        sequential_shown, sequential_total = sequential_cpu.per_item(records, digits=0)
        rows.append(
            "| the minimal sequential harvester (fetch, parse, COPY, in turn) "
            f"| {sequential:,.0f} | {seq_peak:.0f} MB |"
        )

        settings = Settings(_env_file=None, gisc_name="SINK", database_url=sink, settle_seconds=0)  # type: ignore[call-arg]
        async with harvest_context(settings, sink) as ctx:
            # twice in one harvester context: the first run also starts its page workers, as
            # the first run after a harvester starts does; the second is every run after it
            quiet = []
            for _ in range(2):
                link = await link_store.get_link(ctx.pool, "bench")
                assert link is not None
                t = time.perf_counter()
                report = await harvest_link(ctx, link, window=False)
                quiet.append(time.perf_counter() - t)

        rates = {}
        pyoai_cpu = CpuUse(CPU_GROUPS)
        for client in ("sickle", "oaipmh-scythe", "pyoai"):
            t = time.perf_counter()
            with pyoai_cpu.measured() if client == "pyoai" else contextlib.nullcontext():
                count = await asyncio.to_thread(iterate_with, client, oai)
            rates[client] = count / (time.perf_counter() - t)
            rows.append(f"| {client}, merely iterating | {rates[client]:,.0f} | - |")
    costs = library_costs(page_size=page_size)
    if figures is not None:
        figures.update(
            sequential=sequential,
            harvest_stored=stored,
            harvest_memory=peak,
            noop_seconds=quiet[1],
            pyoai=rates["pyoai"],
        )
    lines += [
        f"{records:,} records from the project's provider (its own process), pages of {page_size}.",
        "",
        "| client | records/s | peak memory |",
        "|---|---|---|",
        *rows,
        "",
        f"- wiscat storing / the minimal sequential harvester storing: "
        f"**{stored / sequential:.2f}x** (goal: at least 1.5x)",
        f"- wiscat storing / Sickle iterating: **{stored / rates['sickle']:.1f}x** "
        "(goal: at least 3x)",
        f"- wiscat storing / oaipmh-scythe iterating: **{stored / rates['oaipmh-scythe']:.1f}x**",
        f"- wiscat storing / pyoai's client iterating: **{stored / rates['pyoai']:.2f}** "
        "(goal: at least 0.9)",
        f"- wiscat records/s stored end to end: **{stored:,.0f}** (goal: at least 4,000); "
        "peak memory "
        f"**{peak:.0f} MB** (goal: under 300 MB)",
        f"- an incremental run with no changes: **{quiet[1]:.2f} s** ({report.summary()}); "
        f"{quiet[0]:.2f} s for the first run of a harvester process, which starts its page "
        "workers",
        f"- the full run as the harvester reported it: {summary}",
        *harvester_cpu_lines(harvest_cpu, pyoai_cpu, records, 0.9 * rates["pyoai"]),
        f"- what the server wrote during the full harvest: {written['wal_bytes'] / records:,.0f}"
        f" bytes of write-ahead log a record stored ({written['wal_records'] / records:.1f} WAL "
        f"records); {written['buffers']:,.0f} buffers written (backends, background writer and "
        f"checkpoints), {written['checkpoints']:.0f} checkpoints (the last forced at its end, so "
        "that every buffer it left to write is counted)",
        "- CPU per record stored by the minimal sequential harvester, in µs, by process: "
        f"{sequential_shown}; in all {sequential_total:.0f} µs",
        *floor_lines(
            costs,
            page_size,
            sequential_cpu.seconds.get("PostgreSQL", 0.0) / records * 1e6,
            harvest_cpu.seconds.get("the provider", 0.0) / records * 1e6,
        ),
        "",
    ]
    return lines


# What a server has written since it started: its write-ahead log, its buffers, its checkpoints
# (the views of PostgreSQL 14 to 16).
_WRITES = """
select w.wal_bytes::float8, w.wal_records::float8,
       (b.buffers_backend + b.buffers_clean + b.buffers_checkpoint)::float8 as buffers,
       (b.checkpoints_timed + b.checkpoints_req)::float8 as checkpoints
from pg_stat_wal w, pg_stat_bgwriter b
"""


async def server_writes(server_url: str) -> dict[str, float]:
    """What the server at ``server_url`` has written so far (:data:`_WRITES`), after a
    checkpoint, so that what a measure then counts is its own."""
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute("checkpoint")
        row = await conn.fetchrow(_WRITES)
        assert row is not None
        return {name: float(value) for name, value in row.items()}
    finally:
        await conn.close()


def harvester_cpu_lines(
    harvest: CpuUse, pyoai: CpuUse, records: int, goal_rate: float
) -> list[str]:
    """Where the CPU of the full harvest and of pyoai's iteration went, and what the 0.9 goal
    leaves per record on this machine's cores."""
    cores = os.cpu_count() or 1
    harvest_shown, harvest_total = harvest.per_item(records, digits=0)
    pyoai_shown, pyoai_total = pyoai.per_item(records, digits=0)
    budget = cores / goal_rate * 1e6
    return [
        f"- CPU per record stored, in µs, by process: {harvest_shown}; in all "
        f"**{harvest_total:.0f} µs**, so at most {cores / harvest_total * 1e6:,.0f} records/s on "
        f"{cores} cores kept busy all the time",
        f"- CPU per record of pyoai's client merely iterating, in µs: {pyoai_shown}; in all "
        f"{pyoai_total:.0f} µs",
        f"- 0.9 of pyoai's rate is {goal_rate:,.0f} records/s: at most **{budget:.0f} µs** of CPU "
        f"per record on {cores} cores, every core busy all the time, for fetching, parsing, "
        "hashing and storing, the provider and PostgreSQL included",
    ]


async def bench_peers(server_url: str) -> list[str]:
    url = await pg.clone_template(server_url)
    return ["## Twenty peers at once, one of them slow", "", await peers.run(url), ""]


async def fetch_only(urls: list[str]) -> float:
    """Seconds to fetch every page of every list at once, parsing nothing (the HTTP floor)."""
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:

        async def one(url: str) -> None:
            params = {"verb": "ListIdentifiers", "metadataPrefix": "iso19139"}
            page = 0
            while True:
                async with session.get(url, params=params) as response:
                    body = await response.read()
                if b"</resumptionToken>" not in body:
                    return
                page += 1
                params = {"verb": "ListIdentifiers", "resumptionToken": str(page)}

        await asyncio.gather(*(one(url) for url in urls))
    return time.perf_counter() - started


async def bench_check(size: int) -> list[str]:
    """The consistency checker on a set of ``size`` identifiers against five peers."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    urls = [f"{root}/source/oai"] + [f"{root}/peer{k}/oai" for k in range(1, 6)]
    server_args = [sys.executable, "-m", "bench.check_peers", "--port", str(port)]
    async with process([*server_args, "--size", str(size)], f"{root}/healthz"):
        floor = await fetch_only(urls)
        report = OUT / "check.json"
        check_args = [WISCAT, "check", "--set", "WIS-GISC-BENCH", "--source", urls[0], *urls[1:]]
        seconds, memory, code, out = await asyncio.to_thread(
            timed_command, [*check_args, "--json", str(report)]
        )
        outcome = out.strip().splitlines()[-2] if out.strip() else "(no output)"
        reference = await asyncio.to_thread(
            timed_command, [sys.executable, "-m", "bench.check_reference", *urls]
        )
    rows = [line for line in out.splitlines() if line.startswith("http")]
    return [
        "## Consistency checker: one set against five peers",
        "",
        f"A set of {size:,} identifiers (1% deleted) listed by a source and five peers, 1,000 "
        "headers a page, each peer with a few of every fault; all six lists served by one "
        "process on loopback (`bench/check_peers.py`). `wiscat check` runs as a process of its "
        f"own and exits {code} ({outcome}).",
        "",
        "| | wall time | peak memory |",
        "|---|---|---|",
        f"| `wiscat check` (sorted spills on disk, merge) | {seconds:.1f} s | {memory:.0f} MB |",
        "| every list in a dict, then compared (`bench/check_reference.py`) "
        f"| {reference[0]:.1f} s | {reference[1]:.0f} MB |",
        f"| fetching the six lists, parsing nothing | {floor:.1f} s | - |",
        "",
        f"- time: **{seconds / reference[0]:.2f}x** the dict reference's, "
        f"**{seconds / floor:.1f}x** the fetch floor's",
        f"- memory: **{memory / reference[1]:.2f}x** the dict reference's "
        "(the checker's memory is one sorted run per list, whatever the set's size)",
        "- what the checker found, per peer:",
        "",
        "```",
        *[line.rstrip() for line in rows],
        "```",
        "",
    ]
