"""The provider section of ``make bench``: wiscat's provider against pyoai's server and a
zero-cost provider, harvested by a minimal and a parsing client."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

from lxml import etree

from bench.cpu import CpuUse
from bench.measure import (
    CPU_GROUPS,
    OUT,
    WISCAT,
    free_port,
    load_average,
    loaded_database,
    peak_rss_mb,
    process,
    provider_env,
)
from bench.static_server import page_key
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.oaipmh.pages import announced_token

OAI = "{http://www.openarchives.org/OAI/2.0/}"


class Harvest:
    """What one client saw of one full ListRecords harvest."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.latencies: list[float] = []
        self.seconds = 0.0

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def p99_ms(self) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


def _token(body: bytes, parse: bool) -> tuple[int, str | None]:
    """Records on a page and its resumptionToken: parsed whole with lxml, or only looked up."""
    if not parse:
        # the minimal client: the token from the page's tail, records counted by their tags
        return body.count(b"<record>"), announced_token(body)
    root = etree.fromstring(body)
    listing = root.find(f"{OAI}ListRecords")
    assert listing is not None, body[:300]
    records = sum(1 for e in listing if e.tag == f"{OAI}record")
    return records, listing.findtext(f"{OAI}resumptionToken") or None


def bare_harvest(url: str, *, parse: bool, save_to: Path | None = None) -> Harvest:
    """A client on one HTTP/1.1 connection: fetch each page whole, follow the token.

    ``parse`` False is the minimal client (it costs the server's machine almost nothing, so the
    server's own speed shows); True parses every page with lxml, as a real harvester must.
    ``save_to`` keeps every page there, named for the zero-cost provider (``page_key``).
    """
    result = Harvest()
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    query = "verb=ListRecords&metadataPrefix=iso19139"
    asked_with: str | None = None
    started = time.perf_counter()
    try:
        while True:
            t = time.perf_counter()
            conn.request("GET", f"{parts.path}?{query}", headers={"Accept-Encoding": "identity"})
            response = conn.getresponse()
            body = response.read()
            assert response.status == 200, body[:300]
            result.latencies.append(time.perf_counter() - t)
            result.bytes += len(body)
            if save_to is not None:
                (save_to / f"{page_key(asked_with)}.xml").write_bytes(body)
            records, token = _token(body, parse)
            result.records += records
            if not token:
                break
            asked_with = token
            query = "verb=ListRecords&resumptionToken=" + quote(token, safe="")
    finally:
        conn.close()
    result.seconds = time.perf_counter() - started
    return result


async def both_clients(
    url: str, expected: int, save_to: Path | None = None, cpu: CpuUse | None = None
) -> tuple[Harvest, Harvest]:
    """The minimal client's harvest, then the parsing client's; both must see every record.

    A first pass, not counted, warms the server's caches (and keeps the pages in ``save_to``).
    ``cpu`` measures where the CPU goes during the minimal client's harvest.
    """
    await asyncio.to_thread(bare_harvest, url, parse=False, save_to=save_to)
    with cpu.measured() if cpu else contextlib.nullcontext():
        minimal = await asyncio.to_thread(bare_harvest, url, parse=False)
    parsing = await asyncio.to_thread(bare_harvest, url, parse=True)
    for harvest in (minimal, parsing):
        assert harvest.records == expected, (url, harvest.records, expected)
    return minimal, parsing


async def export_sqlite(pool: Pool, path: Path) -> None:
    """The catalogue as pyoai's server reads it, streamed by a cursor (a million records would
    not fit in memory at once)."""
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.execute(
        "create table records (identifier text primary key, datestamp text, deleted int, xml text)"
    )
    query = "select identifier, datestamp, deleted, xml from records order by datestamp, identifier"
    batch: list[tuple[str, str, int, str | None]] = []
    async with pool.acquire() as conn, conn.transaction():
        async for r in conn.cursor(query, prefetch=1000):
            batch.append(
                (
                    r["identifier"],
                    r["datestamp"].replace(tzinfo=None).isoformat(),
                    int(r["deleted"]),
                    r["xml"],
                )
            )
            if len(batch) == 1000:
                db.executemany("insert into records values (?, ?, ?, ?)", batch)
                batch = []
    db.executemany("insert into records values (?, ?, ?, ?)", batch)
    db.commit()
    db.close()


def _row(name: str, minimal: Harvest, parsing: Harvest, memory: str) -> str:
    return (
        f"| {name} | {minimal.rate:,.0f} | {minimal.bytes / minimal.seconds / 1e6:.0f} "
        f"| {minimal.p50_ms:.0f} | {minimal.p99_ms:.0f} | {parsing.rate:,.0f} | {memory} |"
    )


async def bench_provider(
    server_url: str,
    source: str,
    records: int,
    load_rate: float,
    page_size: int,
    on: str = "",
    figures: dict[str, float] | None = None,
) -> list[str]:
    """The section's lines, titled with ``on`` (the server's name) when given; its main figures
    also go in ``figures`` when given (the side-by-side table of the servers)."""
    lines = ["## Provider: a full ListRecords harvest" + (f", {on}" if on else ""), ""]
    lines += [f"Load average at the start: {load_average()}.", ""]
    small_size = max(records // 4, page_size)
    small = await loaded_database(server_url, small_size)
    memory = {}
    results: dict[str, tuple[Harvest, Harvest]] = {}
    wiscat_cpu, zero_cpu, minimal_cpu = CpuUse(CPU_GROUPS), CpuUse(CPU_GROUPS), CpuUse(CPU_GROUPS)
    static = OUT / "static-pages"
    shutil.rmtree(static, ignore_errors=True)
    static.mkdir(parents=True)
    for name, database, size in (("small", small, small_size), ("full", source, records)):
        port = free_port()
        oai = f"http://127.0.0.1:{port}/oai"
        async with process(
            [WISCAT, "provider", "--port", str(port)],
            oai + "?verb=Identify",
            provider_env(database, port, page_size),
        ) as proc:
            results[name] = await both_clients(
                oai,
                size,
                save_to=static if name == "full" else None,
                cpu=wiscat_cpu if name == "full" else None,
            )
            memory[name] = peak_rss_mb(proc.pid)
    wiscat_minimal, wiscat_parsing = results["full"]

    port = free_port()
    async with process(
        [sys.executable, "-m", "bench.static_server", str(static), str(port)],
        f"http://127.0.0.1:{port}/oai",
    ):
        zero_minimal, zero_parsing = await both_clients(
            f"http://127.0.0.1:{port}/oai", records, cpu=zero_cpu
        )
    shutil.rmtree(static, ignore_errors=True)

    port = free_port()
    async with process(
        [sys.executable, "-m", "bench.minimal_provider", source, str(port), str(page_size)],
        f"http://127.0.0.1:{port}/oai",
    ) as proc:
        least_minimal, least_parsing = await both_clients(
            f"http://127.0.0.1:{port}/oai", records, cpu=minimal_cpu
        )
        least_memory = peak_rss_mb(proc.pid)

    sqlite_path = OUT / "pyoai.sqlite"
    pool = await create_pool(source, max_size=1)
    await export_sqlite(pool, sqlite_path)
    await pool.close()
    port = free_port()
    async with process(
        [sys.executable, "-m", "bench.pyoai_server", str(sqlite_path), str(port), str(page_size)],
        f"http://127.0.0.1:{port}/oai?verb=Identify",
    ) as proc:
        pyoai_minimal, pyoai_parsing = await both_clients(f"http://127.0.0.1:{port}/oai", records)
        pyoai_memory = peak_rss_mb(proc.pid)
    sqlite_path.unlink(missing_ok=True)

    if figures is not None:
        figures.update(
            provider_minimal=wiscat_minimal.rate,
            provider_parsing=wiscat_parsing.rate,
            provider_p99_ms=wiscat_minimal.p99_ms,
            provider_memory=memory["full"],
            zero_minimal=zero_minimal.rate,
            pyoai_minimal=pyoai_minimal.rate,
            load_rate=load_rate,
        )

    def ratios(label: str, wiscat: Harvest, zero: Harvest, pyoai: Harvest) -> str:
        return (
            f"- {label}: wiscat **{wiscat.rate:,.0f}** records/s (goal: at least 15,000); "
            f"**{wiscat.rate / pyoai.rate:.1f}x** pyoai's server (goal: at least 4x); "
            f"**{wiscat.rate / zero.rate:.0%}** of the zero-cost provider (goal: at least 65%)"
        )

    lines += [
        f"{records:,} generated records "
        f"(~{wiscat_minimal.bytes / records / 1024:.1f} KB each in the response), pages of "
        f"{page_size}, "
        + (
            f"records loaded at {load_rate:,.0f}/s"
            if load_rate
            else "catalogue loaded by a run before"
        )
        + ". Two clients, each in a thread of "
        "the benchmark's process on one HTTP/1.1 connection: the *minimal* client reads each "
        "page whole, counts its records and takes the resumptionToken from the page's tail "
        "(it costs almost nothing, so the server's own speed shows); the *parsing* client "
        "parses every page with lxml, as any real harvester must, and on this machine that "
        "parse costs more than serving the page, so it bounds every server alike. The wiscat "
        "provider runs with its defaults, so it reads the next four pages of each list ahead of "
        "the client (`WISCAT_READ_AHEAD_PAGES`), as it does for any harvester.",
        "",
        "| server | minimal client records/s | MB/s | p50 page ms | p99 page ms "
        "| parsing client records/s | server peak memory |",
        "|---|---|---|---|---|---|---|",
        _row("wiscat provider", wiscat_minimal, wiscat_parsing, f"{memory['full']:.0f} MB"),
        _row("zero-cost provider (pages on disk, sendfile)", zero_minimal, zero_parsing, "-"),
        _row(
            "the minimal provider (keyset pages from PostgreSQL, in turn)",
            least_minimal,
            least_parsing,
            f"{least_memory:.0f} MB",
        ),
        _row("pyoai's server (sqlite)", pyoai_minimal, pyoai_parsing, f"{pyoai_memory:.0f} MB"),
        "",
        ratios("minimal client", wiscat_minimal, zero_minimal, pyoai_minimal),
        ratios("parsing client", wiscat_parsing, zero_parsing, pyoai_parsing),
        f"- provider peak memory: {memory['small']:.0f} MB serving {small_size:,} records, "
        f"{memory['full']:.0f} MB serving {records:,} (pages are keyset reads)",
        f"- the minimal provider: **{least_minimal.rate / zero_minimal.rate:.0%}** of the "
        "zero-cost provider's rate to the minimal client; wiscat's provider "
        f"**{wiscat_minimal.rate / least_minimal.rate:.0%}** of the minimal provider's",
        *provider_cpu_lines(
            {
                "wiscat provider": wiscat_cpu,
                "zero-cost provider": zero_cpu,
                "minimal provider": minimal_cpu,
            },
            records,
            0.65 * zero_minimal.rate,
        ),
        "",
    ]
    return lines


def provider_cpu_lines(uses: dict[str, CpuUse], records: int, goal_rate: float) -> list[str]:
    """Where the CPU of the minimal client's harvests of each server (by its name) went, and what
    65% of the zero-cost provider's rate leaves per record on this machine's cores."""
    cores = os.cpu_count() or 1
    lines = []
    for label, use in uses.items():
        shown, total = use.per_item(records, digits=1)
        lines.append(
            f"- CPU per record served to the minimal client by the {label}, in µs: {shown}; in "
            f"all **{total:.1f} µs**, so at most {cores / total * 1e6:,.0f} records/s on {cores} "
            "cores kept busy all the time"
        )
    lines.append(
        f"- 65% of the zero-cost provider's rate is {goal_rate:,.0f} records/s: at most "
        f"**{cores / goal_rate * 1e6:.1f} µs** of CPU per record on {cores} cores, every core busy "
        "all the time, the client's and PostgreSQL's included"
    )
    return lines
