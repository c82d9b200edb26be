"""``make bench``: provider, harvester, many-peer and WIS 2.0 bridge benchmarks; figures go to
docs/benchmarks.md.

Everything runs on this machine, on loopback: the PostgreSQL servers (the embedded one under
bench/out/pg, or ``WISCAT_BENCH_DATABASE_URL``, and a throwaway cluster of Debian's ``postgresql``
package under bench/out/debian-pg, with a hot standby of it for the providers section), the
provider and the reference servers as separate processes, and each comparison is made in the same
run, so ratios hold when the machine's speed drifts. The provider and harvester sections run on
each server in turn, then side by side; the providers and scaling sections on the last server
(Debian's by default); the others on the first.

    python -m bench.run [--records N] [--page-size P] [--only SECTION[,SECTION...]]
                        [--servers embedded,debian] [--scaling N[,N...]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import mesh, push_bench, registry, wis2_bench
from bench import scale_bench as scale
from bench.clusters import SERVERS, BenchServer, bench_server
from bench.harvester_bench import bench_check, bench_harvester, bench_peers
from bench.measure import OUT, ROOT, load_average, loaded_database, machine
from bench.provider_bench import bench_provider
from wiscat.shared.generator import generate_records

SECTIONS = (
    "provider",
    "harvester",
    "providers",
    "scaling",
    "peers",
    "check",
    "mesh",
    "registry",
    "generator",
    "wis2",
    "push",
)


#: The section of docs/benchmarks.md no benchmark writes: figures behind choices the code makes,
#: kept by hand. Every run keeps it.
BY_HAND = "## Measurements behind the code"


def kept_by_hand(old: str) -> list[str]:
    """``old``'s :data:`BY_HAND` section, up to the next section; none if it has none."""
    lines = old.splitlines()
    if BY_HAND not in lines:
        return []
    start = lines.index(BY_HAND)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
    return lines[start:end]


def with_kept(lines: list[str], output: Path, *, every_section: bool) -> list[str]:
    """``lines`` with what ``output`` holds that this run does not write: after a run of every
    section, the section kept by hand; after a run of some, every other section (and the
    header its date)."""
    if not output.exists():
        return lines
    old = output.read_text()
    if every_section:
        kept = kept_by_hand(old)
        return [*lines, "", *kept] if kept else lines
    return merge_sections(old, lines)


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


# The side-by-side table's rows: a figure of the provider and harvester sections, its label and
# its format.
_COMPARED = (
    ("load_rate", "records loaded a second (the catalogue, before the sections)", "{:,.0f}"),
    ("provider_minimal", "provider, minimal client: records/s", "{:,.0f}"),
    ("provider_parsing", "provider, parsing client: records/s", "{:,.0f}"),
    ("provider_p99_ms", "provider, minimal client: p99 page ms", "{:.0f}"),
    ("provider_memory", "provider peak memory, MB", "{:.0f}"),
    (
        "zero_minimal",
        "zero-cost provider, minimal client: records/s (the machine's pace)",
        "{:,.0f}",
    ),
    ("pyoai_minimal", "pyoai's server, minimal client: records/s (the machine's pace)", "{:,.0f}"),
    ("harvest_stored", "wiscat harvest, stored end to end: records/s", "{:,.0f}"),
    ("harvest_memory", "wiscat harvest peak memory, MB", "{:.0f}"),
    ("sequential", "the minimal sequential harvester, stored: records/s", "{:,.0f}"),
    ("noop_seconds", "incremental run with no changes, s", "{:.2f}"),
    ("pyoai", "pyoai's client iterating: records/s (the machine's pace)", "{:,.0f}"),
)


def side_by_side(figures: dict[str, dict[str, float]], records: int) -> list[str]:
    """The provider and harvester sections' main figures, one column a server."""
    names = list(figures)
    lines = [
        "## The servers side by side",
        "",
        f"The provider and harvester sections above, {records:,} records, run on each server "
        "in turn in the same run (each section notes the load average at its start; the "
        "machine's pace is read from the servers that do not use PostgreSQL).",
        "",
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label, form in _COMPARED:
        if all(key in figures[name] for name in names):
            cells = " | ".join(form.format(figures[name][key]) for name in names)
            lines.append(f"| {label} | {cells} |")
    return [*lines, ""]


async def other_sections(args: argparse.Namespace, servers: list[BenchServer]) -> list[str]:
    """The sections after the provider's and the harvester's, those chosen, in turn."""
    first = servers[0].url
    lines: list[str] = []
    if "providers" in args.only:
        lines += await scale.bench_providers(servers[-1], args.records, args.page_size)
    if "scaling" in args.only:
        lines += await scale.bench_scaling(servers[-1], args.scaling, args.page_size)
    if "peers" in args.only:
        lines += await bench_peers(first)
    if "check" in args.only:
        lines += await bench_check(args.check_size)
    if "mesh" in args.only:
        lines += await mesh.run(first)
    if "registry" in args.only:
        lines += await registry.run(first)
    if "generator" in args.only:
        lines += bench_generator()
    if "wis2" in args.only:
        lines += await wis2_bench.run(first, args.servers[0])
    if "push" in args.only:
        size = push_bench.QUICK if args.push_quick else push_bench.FULL
        lines += await push_bench.run(first, size)
    return lines


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
    parser.add_argument(
        "--servers",
        type=lambda text: text.split(","),
        default=os.environ.get("BENCH_SERVERS", "embedded,debian").split(","),
        help="the PostgreSQL servers the provider and harvester sections run on, in turn "
        "(comma-separated): embedded (or WISCAT_BENCH_DATABASE_URL), debian (a throwaway "
        "cluster of Debian's postgresql package; `make postgresql` installs it)",
    )
    parser.add_argument(
        "--scaling",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[int(n) for n in os.environ.get("BENCH_SCALING", "10000,100000").split(",")],
        help="the catalogue sizes of the scaling section (comma-separated)",
    )
    parser.add_argument(
        "--push-quick",
        action="store_true",
        help="the push section at its smoke size (3 nodes, well under 2 minutes)",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    if bad := set(args.servers) - set(SERVERS):
        parser.error(f"no server {', '.join(sorted(bad))}; the servers: {', '.join(SERVERS)}")
    if unknown := args.only - set(SECTIONS):
        parser.error(
            f"no section {', '.join(sorted(unknown))}; the sections: {', '.join(SECTIONS)}"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(bench_server(name)) for name in args.servers]
        lines = [
            "# Benchmarks",
            "",
            f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"- machine: {machine()}; load average at the start {load_average()}",
            *[f"- database, {server.name}: {server.description}" for server in servers],
            "- command: `make bench` "
            f"(`python -m bench.run --records {args.records} --page-size {args.page_size}`)",
            "",
        ]
        figures: dict[str, dict[str, float]] = {}
        for server in servers if args.only & {"provider", "harvester"} else []:
            # one catalogue for both sections: loading a million records takes a while
            started = time.perf_counter()
            reuse = args.source if server is servers[0] else None
            source = reuse or await loaded_database(server.url, args.records)
            load_rate = 0.0 if reuse else args.records / (time.perf_counter() - started)
            on = server.name if len(servers) > 1 else ""
            found = figures[server.name] = {}
            if "provider" in args.only:
                lines += await bench_provider(
                    server.url, source, args.records, load_rate, args.page_size, on, found
                )
            if "harvester" in args.only:
                lines += await bench_harvester(
                    server.url, source, args.records, args.page_size, on, found
                )
        if len(figures) > 1:
            lines += side_by_side(figures, args.records)
        lines += await other_sections(args, servers)
    lines = with_kept(lines, args.output, every_section=args.only == set(SECTIONS))
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    asyncio.run(main())
