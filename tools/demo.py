"""``make demo``: a local mesh of three wiscat nodes that harvest each other until they agree.

One embedded PostgreSQL server (under ``var/demo``) holds a database per node; each node is a
``wiscat run`` process (provider and harvester) on its own loopback ports, with a generated
catalogue in its own set and a link to every other node's own set. The demo prints the records
per node and set as the harvesters' schedules bring them together, then the URLs to open, and
keeps the mesh running (adding a record somewhere now and then, to watch it travel) until Ctrl-C,
which stops every process it started.

The links are scheduled hourly: what moves a change within about a second is the providers'
change hints, and the demo prints how long each added record took to reach every other node.

    python -m tools.demo [--nodes 3] [--records 200] [--every 1h] [--port-base 8100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from wiscat.cli.signals import stop_signals
from wiscat.shared.db.embedded import EmbeddedPostgres
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record

ROOT = Path(__file__).resolve().parents[1]
WISCAT = str(Path(sys.executable).with_name("wiscat"))
READY_TIMEOUT = aiohttp.ClientTimeout(total=2)
TRAVEL_TIMEOUT = 30.0
NAMES = ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO", "FOXTROT"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_running(pg_dir: Path) -> bool:
    """Whether a PostgreSQL server runs from ``pg_dir`` (its postmaster.pid names a live
    process); a stale file left by a crash does not count."""
    try:
        pid = int((pg_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class DemoNode:
    name: str
    database_url: str
    provider_port: int
    harvester_port: int
    process: asyncio.subprocess.Process | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.provider_port}"

    @property
    def own_set(self) -> str:
        return f"WIS-GISC-{self.name}"

    @property
    def token(self) -> str:
        return f"demo-{self.name.lower()}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
        env.update(
            {
                "WISCAT_DATABASE_URL": self.database_url,
                "WISCAT_GISC_NAME": self.name,
                "WISCAT_BASE_URL": f"{self.root}/oai",
                "WISCAT_PROVIDER_PORT": str(self.provider_port),
                "WISCAT_HARVESTER_PORT": str(self.harvester_port),
                "WISCAT_ADMIN_TOKEN": self.token,
                "WISCAT_SETTLE_SECONDS": "1",
                "WISCAT_HARVEST_POLL_SECONDS": "0.5",
                "WISCAT_PAGE_SIZE": "100",
            }
        )
        return env


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def create_databases(server_url: str, names: list[str]) -> None:
    conn = await connect(server_url)
    try:
        for name in names:
            await conn.execute(f'drop database if exists "{name}" with (force)')
            await conn.execute(f'create database "{name}"')
    finally:
        await conn.close()


class NodeExited(RuntimeError):
    """A node ended before it was ready; ``log`` is the end of what it wrote."""

    def __init__(self, node: DemoNode, log: str) -> None:
        assert node.process is not None
        super().__init__(f"node {node.name} exited with {node.process.returncode}:\n{log}")
        self.log = log


def log_tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


async def wait_ready(http: aiohttp.ClientSession, node: DemoNode, log_file: Path) -> None:
    for _ in range(600):
        if node.process is not None and node.process.returncode is not None:
            raise NodeExited(node, log_tail(log_file))
        # a program holding the port may accept and never answer: a short timeout per try
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.get(f"{node.root}/readyz", timeout=READY_TIMEOUT) as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"node {node.name} did not become ready")


async def admin(
    http: aiohttp.ClientSession, node: DemoNode, method: str, path: str, **kwargs: object
) -> None:
    headers = {"Authorization": f"Bearer {node.token}"}
    async with http.request(method, node.root + path, headers=headers, **kwargs) as response:  # type: ignore[arg-type]
        if response.status >= 400:
            raise RuntimeError(f"{method} {path} at {node.name}: {await response.text()}")


async def put_record(http: aiohttp.ClientSession, node: DemoNode, n: int, version: int = 0) -> str:
    data = generate_record(n, centre=node.name.lower(), version=version)
    identifier = parse_record(data).identifier
    await admin(http, node, "PUT", f"/admin/records/{identifier}", data=data)
    return identifier


async def counts(nodes: list[DemoNode]) -> dict[str, dict[str, int]]:
    """Live records per node and set."""
    out: dict[str, dict[str, int]] = {}
    for node in nodes:
        conn = await connect(node.database_url)
        try:
            rows = await conn.fetch(
                "select set_spec, count(*) filter (where not deleted) as live "
                "from set_members group by set_spec"
            )
        finally:
            await conn.close()
        out[node.name] = {row["set_spec"]: row["live"] for row in rows}
    return out


async def travel(
    nodes: list[DemoNode], origin: DemoNode, identifier: str, stop: asyncio.Event
) -> str:
    """How long ``identifier``, just written at ``origin``, takes to be served by every other
    node (polled in their databases), as one line; a node it has not reached within
    ``TRAVEL_TIMEOUT`` seconds is named as such."""
    started = time.monotonic()
    others = [node for node in nodes if node is not origin]
    conns = {node.name: await connect(node.database_url) for node in others}
    reached: dict[str, float] = {}
    try:
        while len(reached) < len(others) and not stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed > TRAVEL_TIMEOUT:
                break
            for node in others:
                if node.name not in reached and await conns[node.name].fetchval(
                    "select true from records where identifier = $1 and not deleted", identifier
                ):
                    reached[node.name] = time.monotonic() - started
            await asyncio.sleep(0.05)
    finally:
        for conn in conns.values():
            await conn.close()
    parts = [
        f"{node.name} in {reached[node.name]:.1f} s"
        if node.name in reached
        else f"{node.name} not within {TRAVEL_TIMEOUT:.0f} s"
        for node in others
    ]
    return f"new record {identifier} at {origin.name} reached " + ", ".join(parts)


def table(nodes: list[DemoNode], found: dict[str, dict[str, int]], elapsed: float) -> str:
    sets = [node.own_set for node in nodes]
    width = max(len(s) for s in sets)
    lines = [f"after {elapsed:5.1f} s" + " " * 3 + "  ".join(f"{s:>{width}}" for s in sets)]
    for node in nodes:
        cells = "  ".join(f"{found[node.name].get(s, 0):>{width}}" for s in sets)
        lines.append(f"{node.name:<13}" + cells)
    return "\n".join(lines)


async def run(args: argparse.Namespace, stop: asyncio.Event) -> int:
    names = NAMES[: args.nodes]
    if args.port_base:
        # A node whose port is taken exits at once, but another demo's node on that port would
        # answer its /readyz first: this demo would then drive the other one's nodes.
        wanted = [args.port_base + offset + n for offset in (1, 51) for n in range(len(names))]
        taken = [port for port in wanted if port_in_use(port)]
        if taken:
            print(
                f"demo: port {taken[0]} is in use (another demo running?); stop it, or pass "
                "--port-base 0 for free ports",
                file=sys.stderr,
            )
            return 1
    data_dir = args.data_dir
    if server_running(data_dir / "pg"):
        # the demo starts from a fresh server: removing the data of one in use would wreck it
        print(f"demo: another demo is running in {data_dir}; stop it first", file=sys.stderr)
        return 1
    logs = data_dir / "logs"
    shutil.rmtree(data_dir / "pg", ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    server = EmbeddedPostgres(data_dir / "pg")
    server_url = server.start()
    nodes: list[DemoNode] = []
    try:
        await create_databases(server_url, [f"demo_{n.lower()}" for n in names])
        for index, name in enumerate(names):
            provider = args.port_base + 1 + index if args.port_base else free_port()
            harvester = args.port_base + 51 + index if args.port_base else free_port()
            url = with_database(server_url, f"demo_{name.lower()}")
            nodes.append(DemoNode(name, url, provider, harvester))
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(
                *(start_node(http, node, logs, free_ports=not args.port_base) for node in nodes)
            )
            print(f"{len(nodes)} nodes up; logs in {logs}", flush=True)
            for node in nodes:
                await asyncio.gather(*(put_record(http, node, n) for n in range(args.records)))
            for node in nodes:
                for other in nodes:
                    if other is not node:
                        body = {
                            "name": other.name.lower(),
                            "url": f"{other.root}/oai",
                            "set": other.own_set,
                            "every": args.every,
                        }
                        await admin(http, node, "POST", "/admin/links", json=body)
            total = args.records * len(nodes)
            print(
                f"each node holds {args.records} records of its own; links: a full mesh, "
                f"every {args.every}\n",
                flush=True,
            )
            started = time.monotonic()
            converged = shown = False
            rng = random.Random()
            next_change = 0.0
            while not stop.is_set():
                found = await counts(nodes)
                print(table(nodes, found, time.monotonic() - started) + "\n", flush=True)
                everywhere = all(
                    sum(found[node.name].get(n.own_set, 0) for n in nodes) == total
                    for node in nodes
                )
                if everywhere and not converged and shown:
                    converged = True
                    print("converged again\n", flush=True)
                elif everywhere and not converged:
                    converged = shown = True
                    print("converged: every node holds every record, each in its origin's set\n")
                    for node in nodes:
                        print(
                            f"  {node.name:<8} {node.root}/oai?verb=Identify   dashboard "
                            f"{node.root}/   admin token {node.token}"
                        )
                    print("\nCtrl-C stops the demo.\n", flush=True)
                    next_change = time.monotonic() + args.first_change
                if converged and args.changes and time.monotonic() >= next_change:
                    node = rng.choice(nodes)
                    identifier = await put_record(http, node, total + rng.randrange(10_000))
                    total += 1
                    converged = False
                    print(await travel(nodes, node, identifier, stop) + "\n", flush=True)
                    next_change = time.monotonic() + 10
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), args.interval)
        return 0
    finally:
        await stop_nodes(nodes)
        server.stop()
        print("demo stopped: every process it started has ended", flush=True)


async def start_node(
    http: aiohttp.ClientSession, node: DemoNode, logs: Path, *, free_ports: bool
) -> None:
    """Start ``node`` and wait until it is ready. A free port can be taken by another program
    between the moment it is picked and the node's bind: with ``free_ports`` such a node is
    started again on new ones."""
    log_file = logs / f"{node.name.lower()}.log"
    tries = 3 if free_ports else 1
    for attempt in range(tries):
        with log_file.open("wb") as log:
            node.process = await asyncio.create_subprocess_exec(
                WISCAT,
                "run",
                env=node.env(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops them
            )
        try:
            await wait_ready(http, node, log_file)
            return
        except NodeExited as exited:
            if attempt == tries - 1 or "cannot listen" not in exited.log:
                raise
        print(f"demo: a port of {node.name} was taken; starting it on others", flush=True)
        node.provider_port, node.harvester_port = free_port(), free_port()


async def stop_nodes(nodes: list[DemoNode]) -> None:
    for node in nodes:
        if node.process is not None and node.process.returncode is None:
            node.process.send_signal(signal.SIGTERM)
    for node in nodes:
        if node.process is None:
            continue
        try:
            await asyncio.wait_for(node.process.wait(), 20)
        except TimeoutError:
            node.process.kill()
            await node.process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=3, choices=range(2, len(NAMES) + 1))
    parser.add_argument("--records", type=int, default=200, help="records per node")
    parser.add_argument(
        "--every", default="1h", help="harvest interval of every link (change hints move records)"
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between tables")
    parser.add_argument(
        "--port-base",
        type=int,
        default=8100,
        help="providers on BASE+1.., harvesters on BASE+51..; 0 picks free ports",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=ROOT / "var" / "demo", help="PostgreSQL and logs"
    )
    parser.add_argument(
        "--first-change",
        type=float,
        default=10.0,
        help="seconds after converging before the first added record",
    )
    parser.add_argument(
        "--no-changes", dest="changes", action="store_false", help="add no records after converging"
    )
    args = parser.parse_args()

    async def guarded() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in stop_signals():  # SIGHUP too: a closed terminal stops the demo in order
            loop.add_signal_handler(sig, stop.set)
        return await run(args, stop)

    return asyncio.run(guarded())


if __name__ == "__main__":
    sys.exit(main())
