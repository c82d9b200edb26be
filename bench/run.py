"""``make bench``: provider, harvester and many-peer benchmarks; figures go to docs/benchmarks.md.

Everything runs on this machine, on loopback: one PostgreSQL (embedded, under bench/out/, or
``WISCAT_BENCH_DATABASE_URL``), the provider and the reference servers as separate processes, and
each comparison is made in the same run, so ratios hold when the machine's speed drifts.

    python -m bench.run [--records N] [--page-size P] [--only SECTION[,SECTION...]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

import aiohttp
from lxml import etree

from bench import mesh, peers, registry
from bench.cpu import CpuUse, Group
from bench.static_server import page_key
from tests import factories, pg
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.page_records import spool_prefix, spool_root
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.generator import generate_records
from wiscat.shared.oaipmh.pages import announced_token
from wiscat.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
WISCAT = str(Path(sys.executable).with_name("wiscat"))
OAI = "{http://www.openarchives.org/OAI/2.0/}"
SOURCE_SET = "WIS-GISC-BENCH"
SECTIONS = ("provider", "harvester", "peers", "check", "mesh", "registry", "generator")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``: its children, theirs, and so on."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *descendants(int(child))]
    return found


def tree_memory_mb(members: list[int]) -> float:
    """The memory of the processes ``members`` (a process and every process under it: a
    harvester's page workers and their fork server), added up as proportional set sizes: a page
    shared by n processes counts 1/n in each, so libraries and the fork server's copy-on-write
    pages count once in all. Costly to read: the kernel walks each process's page tables."""
    total = 0.0
    for member in members:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            for line in Path(f"/proc/{member}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) / 1024
                    break
    return total


_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 1024 / 1024


def resident_mb(members: list[int]) -> float:
    """The resident memory of the processes ``members`` added up, shared pages counted in each:
    more than :func:`tree_memory_mb`, but cheap to read (a counter the kernel keeps)."""
    total = 0.0
    for member in members:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            total += int(Path(f"/proc/{member}/statm").read_text().split()[1]) * _PAGE_MB
    return total


def machine() -> str:
    cpu = "unknown cpu"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    return f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GiB, Python {platform.python_version()}"


async def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            if process.poll() is not None:
                raise RuntimeError(f"{process.args} exited {process.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


@contextlib.asynccontextmanager
async def process(
    args: list[str], ready: str, env: dict[str, str] | None = None
) -> AsyncIterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_ready(ready, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def provider_env(database_url: str, port: int, page_size: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(
        {
            "WISCAT_DATABASE_URL": database_url,
            "WISCAT_GISC_NAME": "BENCH",
            "WISCAT_BASE_URL": f"http://127.0.0.1:{port}/oai",
            "WISCAT_SETTLE_SECONDS": "0",
            "WISCAT_PAGE_SIZE": str(page_size),
            "WISCAT_TOKEN_SECRET": "bench",
            "WISCAT_LOG_LEVEL": "WARNING",
            "WISCAT_MAX_CONCURRENT_LISTS": "64",
        }
    )
    return env


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


async def loaded_database(server_url: str, records: int) -> str:
    """A database holding ``records`` generated records, vacuumed: a catalogue that has been
    served for a while, not one whose first readers still set hint bits while autovacuum runs
    beside them (as the first provider figures at 1,000,000 records were measured)."""
    url = await pg.clone_template(server_url)
    pool = await create_pool(url, max_size=2)
    try:
        await factories.load_records(pool, SOURCE_SET, range(records))
        await pool.execute("vacuum (analyze) records, set_members")
    finally:
        await pool.close()
    return url


def _row(name: str, minimal: Harvest, parsing: Harvest, memory: str) -> str:
    return (
        f"| {name} | {minimal.rate:,.0f} | {minimal.bytes / minimal.seconds / 1e6:.0f} "
        f"| {minimal.p50_ms:.0f} | {minimal.p99_ms:.0f} | {parsing.rate:,.0f} | {memory} |"
    )


async def bench_provider(
    server_url: str, source: str, records: int, load_rate: float, page_size: int
) -> list[str]:
    lines = ["## Provider: a full ListRecords harvest", ""]
    small_size = max(records // 4, page_size)
    small = await loaded_database(server_url, small_size)
    memory = {}
    results: dict[str, tuple[Harvest, Harvest]] = {}
    wiscat_cpu, zero_cpu = CpuUse(CPU_GROUPS), CpuUse(CPU_GROUPS)
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
        _row("pyoai's server (sqlite)", pyoai_minimal, pyoai_parsing, f"{pyoai_memory:.0f} MB"),
        "",
        ratios("minimal client", wiscat_minimal, zero_minimal, pyoai_minimal),
        ratios("parsing client", wiscat_parsing, zero_parsing, pyoai_parsing),
        f"- provider peak memory: {memory['small']:.0f} MB serving {small_size:,} records, "
        f"{memory['full']:.0f} MB serving {records:,} (pages are keyset reads)",
        *provider_cpu_lines(wiscat_cpu, zero_cpu, records, 0.65 * zero_minimal.rate),
        "",
    ]
    return lines


def provider_cpu_lines(wiscat: CpuUse, zero: CpuUse, records: int, goal_rate: float) -> list[str]:
    """Where the CPU of the minimal client's harvests went, and what 65% of the zero-cost
    provider's rate leaves per record on this machine's cores."""
    cores = os.cpu_count() or 1
    lines = []
    for label, use in (("wiscat provider", wiscat), ("zero-cost provider", zero)):
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


async def bench_harvester(server_url: str, source: str, records: int, page_size: int) -> list[str]:
    lines = ["## Harvester: a full harvest into an empty node", ""]
    port = free_port()
    oai = f"http://127.0.0.1:{port}/oai"
    rows = []
    async with process(
        [WISCAT, "provider", "--port", str(port)],
        oai + "?verb=Identify",
        provider_env(source, port, page_size),
    ):
        sink = await pg.clone_template(server_url)
        env = provider_env(sink, free_port(), page_size)
        env["WISCAT_GISC_NAME"] = "SINK"
        subprocess.run(
            [WISCAT, "link", "add", "bench", "--url", oai, "--set", SOURCE_SET],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        harvest_cpu = CpuUse(CPU_GROUPS)
        with harvest_cpu.measured():
            seconds, peak, code, summary = await asyncio.to_thread(
                timed_command, [WISCAT, "harvest", "bench", "--full"], env
            )
        summary = summary.strip()
        assert code == 0, summary
        stored = records / seconds
        rows.append(
            "| wiscat harvest (fetch, parse, hash, store), the process and its page workers "
            f"| {stored:,.0f} | {peak:.0f} MB |"
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
    lines += [
        f"{records:,} records from the project's provider (its own process), pages of {page_size}.",
        "",
        "| client | records/s | peak memory |",
        "|---|---|---|",
        *rows,
        "",
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
        "",
    ]
    return lines


# What each process of a harvest benchmark is, by its command name and line.
CPU_GROUPS: list[Group] = [
    # first: this benchmark's own command line names its sections ("--only provider")
    ("this benchmark's process (its client, its sampling)", lambda name, line: "bench.run" in line),
    ("page workers", lambda name, line: "forkserver" in line),
    ("PostgreSQL", lambda name, line: name == "postgres"),
    ("the harvest process", lambda name, line: " harvest " in f"{line} "),
    ("the provider", lambda name, line: " provider " in f"{line} "),
    ("the zero-cost provider", lambda name, line: "bench.static_server" in line),
]


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


def spooled_mb(pid: int) -> float:
    """The pages a harvester ``pid`` holds in its spool folder, waiting for a page worker: in
    memory too where the folder is in ``/dev/shm`` (``spool_root``), though in no process's."""
    total = 0
    for folder in Path(spool_root()).glob(spool_prefix(pid) + "*"):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in os.scandir(folder):
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
    return total / 1024 / 1024


# The share of one core that sampling a command's memory may take from it. Reading the
# proportional set sizes of a harvester and its page workers costs about 10 ms of kernel time;
# read every 20 ms, as this benchmark once did, it took a quarter of a core from the harvest it
# measured, on a machine of two. A new high of the resident memory may be read at a higher share.
_SAMPLING_SHARE = 0.02
_NEW_HIGH_SHARE = 0.10


def timed_command(
    args: list[str], env: dict[str, str] | None = None
) -> tuple[float, float, int, str]:
    """Run ``args`` to the end: wall seconds, peak memory (MB), exit code and stdout.

    The peak is the largest memory of the process and its descendants (its page workers)
    together (:func:`tree_memory_mb`) with the pages in its spool (:func:`spooled_mb`), and
    never below the process's own VmHWM: the ru_maxrss that wait4 reports would carry this
    benchmark's own peak, which a child inherits at fork, and would leave out the workers. The
    tree's resident memory, cheap to read, is watched every 20 ms; the costly proportional sizes
    are read when it reaches a new high (at most ``_NEW_HIGH_SHARE`` of a core) and otherwise at
    ``_SAMPLING_SHARE`` of a core.
    """
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.DEVNULL)
        peak = highest = 0.0
        due = soonest = 0.0
        while proc.poll() is None:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
                members = [proc.pid, *descendants(proc.pid)]
                spooled = spooled_mb(proc.pid)
                resident = resident_mb(members) + spooled
                now = time.perf_counter()
                if now >= due or (resident > highest and now >= soonest):
                    highest = max(highest, resident)
                    peak = max(peak, tree_memory_mb(members) + spooled, peak_rss_mb(proc.pid))
                    cost = time.perf_counter() - now
                    soonest = now + cost / _NEW_HIGH_SHARE
                    due = now + cost / _SAMPLING_SHARE
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        out.seek(0)
        return seconds, peak, proc.returncode, out.read().decode()


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


def merge_sections(old: str, new: list[str]) -> list[str]:
    """``old``'s text with the ``## `` sections of ``new`` put in place (or appended)."""

    def sections(lines: list[str]) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = [("", [])]
        for line in lines:
            if line.startswith("## "):
                out.append((line, []))
            out[-1][1].append(line)
        return out

    fresh = dict(sections(new)[1:])
    merged = []
    for title, lines in sections(old.splitlines()):
        merged += fresh.pop(title, lines)
    for lines in fresh.values():
        merged += lines
    return merged


def bench_generator(count: int = 20_000) -> list[str]:
    """The record generator's rate (tests, the demo and `make bench` load catalogues with it;
    the requirement is well over 5,000 records a second), the best of three runs."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        size = sum(len(record) for record in generate_records(count))
        best = min(best, time.perf_counter() - started)
    return [
        "## Record generator",
        "",
        f"{datetime.now(UTC):%Y-%m-%d}, {machine()}, `python -m bench.run --only generator`: "
        f"{count:,} records ({size / count / 1024:.1f} KB each), best of three runs: "
        f"{best:.2f} s, **{count / best:,.0f} records a second** (requirement: well over 5,000).",
        "",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--records", type=int, default=int(os.environ.get("BENCH_RECORDS", 1_000_000))
    )
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        default=set(SECTIONS),
        help="run these sections only (comma-separated): " + ", ".join(SECTIONS),
    )
    parser.add_argument(
        "--check-size",
        type=int,
        default=int(os.environ.get("BENCH_CHECK_SIZE", 1_000_000)),
        help="identifiers in the checker's set",
    )
    parser.add_argument(
        "--source",
        help="a database (on the benchmark's server) already holding --records generated "
        "records in the benchmark's set, as a previous run left it: not loaded again",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    if unknown := args.only - set(SECTIONS):
        parser.error(
            f"no section {', '.join(sorted(unknown))}; the sections: {', '.join(SECTIONS)}"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    configured = os.environ.get("WISCAT_BENCH_DATABASE_URL")
    server = None
    if configured:
        server_url = configured
    else:
        shutil.rmtree(OUT / "pg", ignore_errors=True)
        server = EmbeddedPostgres(OUT / "pg")
        server_url = server.start()
    try:
        await pg.build_template(server_url)
        database = (
            "WISCAT_BENCH_DATABASE_URL"
            if configured
            else "embedded PostgreSQL (pgserver wheel; built without lz4, so records.xml is stored "
            "uncompressed, migration 0005)"
        )
        lines = [
            "# Benchmarks",
            "",
            f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"- machine: {machine()}",
            f"- database: {database}",
            "- command: `make bench` "
            f"(`python -m bench.run --records {args.records} --page-size {args.page_size}`)",
            "",
        ]
        if args.only & {"provider", "harvester"}:
            # one catalogue for both: loading a million records takes a while
            started = time.perf_counter()
            source = args.source or await loaded_database(server_url, args.records)
            load_rate = 0.0 if args.source else args.records / (time.perf_counter() - started)
        if "provider" in args.only:
            lines += await bench_provider(
                server_url, source, args.records, load_rate, args.page_size
            )
        if "harvester" in args.only:
            lines += await bench_harvester(server_url, source, args.records, args.page_size)
        if "peers" in args.only:
            lines += await bench_peers(server_url)
        if "check" in args.only:
            lines += await bench_check(args.check_size)
        if "mesh" in args.only:
            lines += await mesh.run(server_url)
        if "registry" in args.only:
            lines += await registry.run(server_url)
        if "generator" in args.only:
            lines += bench_generator()
    finally:
        if server is not None:
            server.stop()
    if args.only != set(SECTIONS) and args.output.exists():
        # one section run again: the others keep their figures (and the header its date)
        lines = merge_sections(args.output.read_text(), lines)
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    asyncio.run(main())
