"""``make bench``: provider, harvester and many-peer benchmarks; figures go to docs/benchmarks.md.

Everything runs on this machine, on loopback: one PostgreSQL (embedded, under bench/out/, or
``WISCAT_BENCH_DATABASE_URL``), the provider and the reference servers as separate processes, and
each comparison is made in the same run, so ratios hold when the machine's speed drifts.

    python -m bench.run [--records N] [--page-size P] [--only provider|harvester|peers]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from lxml import etree

from bench import mesh, peers, registry
from services.harvester.harvest import harvest_link
from services.harvester.service import harvest_context
from shared.db import links as link_store
from shared.db.embedded import EmbeddedPostgres
from shared.db.pool import create_pool
from shared.settings import Settings
from tests import factories, pg

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
WISCAT = str(Path(sys.executable).with_name("wiscat"))
OAI = "{http://www.openarchives.org/OAI/2.0/}"
SOURCE_SET = "WIS-GISC-BENCH"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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
    """What the bare client saw of one full ListRecords harvest."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.latencies: list[float] = []
        self.seconds = 0.0
        self.pages: list[bytes] = []

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    def row(self, name: str, memory: str) -> str:
        lat = sorted(self.latencies)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        return (
            f"| {name} | {self.records} | {self.rate:,.0f} | {self.bytes / self.seconds / 1e6:.0f} "
            f"| {statistics.median(lat) * 1000:.0f} | {p99 * 1000:.0f} | {memory} |"
        )


async def bare_harvest(url: str, keep_pages: bool = False) -> Harvest:
    """A minimal client: fetch each page, parse it with lxml, count records, follow the token."""
    result = Harvest()
    params = {"verb": "ListRecords", "metadataPrefix": "iso19139"}
    async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"}) as session:
        started = time.perf_counter()
        while True:
            t = time.perf_counter()
            async with session.get(url, params=params) as response:
                body = await response.read()
            result.latencies.append(time.perf_counter() - t)
            result.bytes += len(body)
            if keep_pages:
                result.pages.append(body)
            root = etree.fromstring(body)
            listing = root.find(f"{OAI}ListRecords")
            assert listing is not None, body[:300]
            result.records += sum(1 for e in listing if e.tag == f"{OAI}record")
            token = listing.findtext(f"{OAI}resumptionToken")
            if not token:
                break
            params = {"verb": "ListRecords", "resumptionToken": token}
        result.seconds = time.perf_counter() - started
    return result


def save_static_pages(pages: list[bytes], folder: Path) -> None:
    """The real provider's pages, tokens renamed p1, p2, ... (the zero-cost provider's input)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for n, body in enumerate(pages):
        root = etree.fromstring(body)
        token = root.find(f"{OAI}ListRecords/{OAI}resumptionToken")
        if token is not None and token.text:
            token.text = f"p{n + 1}"
        (folder / f"page-{n}.xml").write_bytes(
            etree.tostring(root, xml_declaration=True, encoding="UTF-8")
        )


async def export_sqlite(pool: object, path: Path) -> None:
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.execute(
        "create table records (identifier text primary key, datestamp text, deleted int, xml text)"
    )
    rows = await pool.fetch(  # type: ignore[attr-defined]
        "select identifier, datestamp, deleted, xml from records order by datestamp, identifier"
    )
    db.executemany(
        "insert into records values (?, ?, ?, ?)",
        [
            (
                r["identifier"],
                r["datestamp"].replace(tzinfo=None).isoformat(),
                int(r["deleted"]),
                r["xml"],
            )
            for r in rows
        ],
    )
    db.commit()
    db.close()


async def loaded_database(server_url: str, records: int) -> str:
    url = await pg.clone_template(server_url)
    pool = await create_pool(url, max_size=2)
    try:
        await factories.load_records(pool, SOURCE_SET, range(records))
    finally:
        await pool.close()
    return url


async def bench_provider(server_url: str, records: int, page_size: int) -> list[str]:
    lines = ["## Provider: a full ListRecords harvest", ""]
    small = await loaded_database(server_url, max(records // 4, page_size))
    t = time.perf_counter()
    url = await loaded_database(server_url, records)
    load_rate = records / (time.perf_counter() - t)
    rows = []
    memory = {}
    harvest: Harvest | None = None
    for name, database in (("small", small), ("full", url)):
        port = free_port()
        oai = f"http://127.0.0.1:{port}/oai"
        async with process(
            [WISCAT, "provider", "--port", str(port)],
            oai + "?verb=Identify",
            provider_env(database, port, page_size),
        ) as proc:
            result = await bare_harvest(oai, keep_pages=name == "full")
            memory[name] = peak_rss_mb(proc.pid)
        if name == "full":
            harvest = result
    assert harvest is not None
    rows.append(harvest.row("wiscat provider", f"{memory['full']:.0f} MB"))

    static = OUT / "static-pages"
    save_static_pages(harvest.pages, static)
    port = free_port()
    async with process(
        [sys.executable, "-m", "bench.static_server", str(static), str(port)],
        f"http://127.0.0.1:{port}/oai",
    ) as proc:
        zero = await bare_harvest(f"http://127.0.0.1:{port}/oai")
    rows.append(zero.row("zero-cost provider (pages on disk)", "-"))

    sqlite_path = OUT / "pyoai.sqlite"
    pool = await create_pool(url, max_size=1)
    await export_sqlite(pool, sqlite_path)
    await pool.close()
    port = free_port()
    async with process(
        [sys.executable, "-m", "bench.pyoai_server", str(sqlite_path), str(port), str(page_size)],
        f"http://127.0.0.1:{port}/oai?verb=Identify",
    ) as proc:
        reference = await bare_harvest(f"http://127.0.0.1:{port}/oai")
        pyoai_memory = peak_rss_mb(proc.pid)
    rows.append(reference.row("pyoai's server (sqlite)", f"{pyoai_memory:.0f} MB"))

    lines += [
        f"{records:,} generated records "
        f"(~{harvest.bytes / harvest.records / 1024:.1f} KB each in the "
        f"response), pages of {page_size}, a bare client (aiohttp + lxml) in its own process; "
        f"records loaded at {load_rate:,.0f}/s.",
        "",
        "| server | records | records/s | MB/s | p50 page ms | p99 page ms | server peak memory |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"- wiscat / pyoai's server: **{harvest.rate / reference.rate:.1f}x** (goal: at least 4x)",
        f"- wiscat / zero-cost provider: **{harvest.rate / zero.rate:.0%}** (goal: at least 65%)",
        f"- wiscat records/s: **{harvest.rate:,.0f}** "
        "(goal: at least 15,000 on this 2-core machine)",
        f"- provider peak memory: {memory['small']:.0f} MB serving "
        f"{max(records // 4, page_size):,} "
        f"records, {memory['full']:.0f} MB serving {records:,} (flat: pages are keyset reads)",
        "",
    ]
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


async def bench_harvester(server_url: str, records: int, page_size: int) -> list[str]:
    lines = ["## Harvester: a full harvest into an empty node", ""]
    source = await loaded_database(server_url, records)
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
        t = time.perf_counter()
        proc = subprocess.Popen(
            [WISCAT, "harvest", "bench", "--full"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        peak = 0.0
        while proc.poll() is None:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                peak = max(peak, peak_rss_mb(proc.pid))
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - t
        summary = proc.stdout.read().decode().strip() if proc.stdout else ""
        assert proc.returncode == 0, summary
        stored = records / seconds
        rows.append(
            "| wiscat harvest (fetch, parse, hash, store), whole process "
            f"| {stored:,.0f} | {peak:.0f} MB |"
        )

        settings = Settings(_env_file=None, gisc_name="SINK", database_url=sink, settle_seconds=0)  # type: ignore[call-arg]
        async with harvest_context(settings, sink) as ctx:
            link = await link_store.get_link(ctx.pool, "bench")
            assert link is not None
            t = time.perf_counter()
            report = await harvest_link(ctx, link, window=False)
            incremental = time.perf_counter() - t

        rates = {}
        for client in ("sickle", "oaipmh-scythe", "pyoai"):
            t = time.perf_counter()
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
        f"- an incremental run with no changes: **{incremental:.2f} s** ({report.summary()})",
        f"- the full run as the harvester reported it: {summary}",
        "",
    ]
    return lines


async def bench_peers(server_url: str) -> list[str]:
    url = await pg.clone_template(server_url)
    return ["## Twenty peers at once, one of them slow", "", await peers.run(url), ""]


def timed_command(args: list[str]) -> tuple[float, float, int, str]:
    """Run ``args`` to the end: wall seconds, peak memory (MB), exit code and stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - started, usage.ru_maxrss / 1024, proc.returncode, out


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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=int(os.environ.get("BENCH_RECORDS", 50_000)))
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument(
        "--only", choices=["provider", "harvester", "peers", "check", "mesh", "registry"]
    )
    parser.add_argument(
        "--check-size",
        type=int,
        default=int(os.environ.get("BENCH_CHECK_SIZE", 1_000_000)),
        help="identifiers in the checker's set",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
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
        if args.only in (None, "provider"):
            lines += await bench_provider(server_url, args.records, args.page_size)
        if args.only in (None, "harvester"):
            lines += await bench_harvester(server_url, args.records, args.page_size)
        if args.only in (None, "peers"):
            lines += await bench_peers(server_url)
        if args.only in (None, "check"):
            lines += await bench_check(args.check_size)
        if args.only in (None, "mesh"):
            lines += await mesh.run(server_url)
        if args.only in (None, "registry"):
            lines += await registry.run(server_url)
    finally:
        if server is not None:
            server.stop()
    if args.only and args.output.exists():
        # one section run again: the others keep their figures (and the header its date)
        lines = merge_sections(args.output.read_text(), lines)
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    asyncio.run(main())
