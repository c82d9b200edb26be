"""``make bench``: provider, harvester and many-peer benchmarks; figures go to docs/benchmarks.md.

Everything runs on this machine, on loopback: one PostgreSQL (embedded, under bench/out/, or
``WISCAT_BENCH_DATABASE_URL``), the provider and the reference servers as separate processes, and
each comparison is made in the same run, so ratios hold when the machine's speed drifts.

    python -m bench.run [--records N] [--page-size P] [--only SECTION[,SECTION...]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import mesh, registry
from bench.harvester_bench import bench_check, bench_harvester, bench_peers
from bench.measure import OUT, ROOT, loaded_database, machine
from bench.provider_bench import bench_provider
from tests import pg
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.generator import generate_records

SECTIONS = ("provider", "harvester", "peers", "check", "mesh", "registry", "generator")


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
