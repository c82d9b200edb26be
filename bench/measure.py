"""What the benchmark sections share: how processes are started and measured (free ports, the
memory of a process tree, a command's time and peak memory, the machine's description), the
provider's environment, the generated catalogue and the CPU groups."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp

from bench.cpu import Group
from tests.support import factories, pg
from wiscat.harvester.page_workers import spool_prefix, spool_root
from wiscat.shared.db.pool import create_pool

ROOT = Path(__file__).resolve().parents[1]


OUT = ROOT / "bench" / "out"


WISCAT = str(Path(sys.executable).with_name("wiscat"))


SOURCE_SET = "WIS-GISC-BENCH"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (0 < q <= 1): the least of them that at
    least that fraction of them do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


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


def load_average() -> str:
    """The machine's load average (1, 5 and 15 minutes): other work shares its cores."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


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


async def sink_node(server_url: str, source_oai: str, page_size: int) -> tuple[str, dict[str, str]]:
    """An empty node's database on ``server_url`` with a link ``bench`` to the benchmark's set
    at ``source_oai``; its URL and the environment of its commands."""
    sink = await pg.clone_template(server_url)
    env = provider_env(sink, free_port(), page_size)
    env["WISCAT_GISC_NAME"] = "SINK"
    subprocess.run(
        [WISCAT, "link", "add", "bench", "--url", source_oai, "--set", SOURCE_SET],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return sink, env


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


# What each process of a harvest benchmark is, by its command name and line.
CPU_GROUPS: list[Group] = [
    # first: this benchmark's own command line names its sections ("--only provider")
    ("this benchmark's process (its client, its sampling)", lambda name, line: "bench.run" in line),
    ("the minimal sequential harvester", lambda name, line: "bench.sequential" in line),
    ("page workers", lambda name, line: "forkserver" in line),
    ("PostgreSQL", lambda name, line: name == "postgres"),
    ("the harvest process", lambda name, line: " harvest " in f"{line} "),
    ("the provider", lambda name, line: " provider " in f"{line} "),
    ("the zero-cost provider", lambda name, line: "bench.static_server" in line),
    ("the minimal provider", lambda name, line: "bench.minimal_provider" in line),
]


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
