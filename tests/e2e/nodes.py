"""Real wiscat processes on loopback, driven only through the ``wiscat`` command and HTTP."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.support.metrics import sample_value
from wiscat.shared.generator import generate_record

WISCAT = str(Path(sys.executable).with_name("wiscat"))


_HANDED_OUT: set[int] = set()


async def run_wiscat(
    env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 120
) -> tuple[int, str, str]:
    """``wiscat ARGS`` with exactly ``env`` and no input: its exit code, output and errors."""
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode or 0, out.decode(), err.decode()


def free_port() -> int:
    """A free loopback port for a process to bind later, never one this process handed out
    before (two nodes of one test must not be given the same port between its release here
    and their bind).

    It is taken below the kernel's ephemeral range, from a block of the xdist worker's own: a
    port of the ephemeral range (what a bind to port 0 gives) can be taken in between by any
    outgoing connection, as the source port the kernel picks for it ("Address already in use"
    at the node's start), and the other worker's ports are in another block."""
    low, count = _port_block()
    start = random.randrange(count)
    for step in range(count):
        port = low + (start + step) % count
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {low}-{low + count - 1}")


def _port_block() -> tuple[int, int]:
    """The first port and the size of this xdist worker's block, below the ephemeral range."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % 8 if worker.isdigit() else 0
    count = min(2000, (ephemeral - 10000) // 8)
    return ephemeral - (8 - index) * count, count


def stop_signals_by_default() -> None:
    """In the child, before exec: SIGINT and SIGHUP as a terminal delivers them, even where the
    tests run in the background (SIGINT ignored) or under ``nohup`` (SIGHUP ignored): the child
    would inherit that, and a command leaves an ignored signal alone, as it should."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@dataclass
class Node:
    """One node's settings; its services are started with :meth:`start`."""

    name: str
    database_url: str
    provider_port: int = field(default_factory=free_port)
    harvester_port: int = field(default_factory=free_port)
    extra: dict[str, str] = field(default_factory=dict)
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    @property
    def oai(self) -> str:
        return f"http://127.0.0.1:{self.provider_port}/oai"

    @property
    def own_set(self) -> str:
        return f"WIS-GISC-{self.name}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
        env.update(
            {
                "WISCAT_DATABASE_URL": self.database_url,
                "WISCAT_GISC_NAME": self.name,
                "WISCAT_BASE_URL": self.oai,
                "WISCAT_PROVIDER_PORT": str(self.provider_port),
                "WISCAT_HARVESTER_PORT": str(self.harvester_port),
                "WISCAT_ADMIN_TOKEN": f"token-{self.name}",
                "WISCAT_SETTLE_SECONDS": "0",  # a test node shows writes at once
                "WISCAT_HARVEST_POLL_SECONDS": "0.2",
                "WISCAT_LOG_FORMAT": "json",
                # the tests written for the schedule count its runs: one made on a hint would
                # come in between (tests/e2e/test_hinted_nodes.py turns hints on)
                "WISCAT_HINTS": "false",
            }
        )
        env.update(self.extra)
        return env

    async def wiscat(
        self, *args: str, check: bool = True, stdin: bytes | None = None
    ) -> tuple[int, str, str]:
        code, out, err = await self.wiscat_bytes(*args, stdin=stdin)
        if check and code != 0:
            raise AssertionError(
                f"wiscat {' '.join(args)} exited {code}:\n{out.decode()}\n{err.decode()}"
            )
        return code, out.decode(), err.decode()

    async def wiscat_bytes(
        self, *args: str, stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run ``wiscat ARGS`` as this node, ``stdin`` its input (none: /dev/null); its exit
        status, stdout and stderr as bytes."""
        process = await asyncio.create_subprocess_exec(
            WISCAT,
            *args,
            env=self.env(),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate(stdin)
        return process.returncode or 0, out, err

    async def start(self, command: str, ready_url: str) -> asyncio.subprocess.Process:
        # the service's log goes to a file, so that a start that fails can say why
        with tempfile.NamedTemporaryFile(
            prefix=f"wiscat-{self.name}-{command}-", suffix=".log", delete=False
        ) as log:
            process = await asyncio.create_subprocess_exec(
                WISCAT,
                command,
                env=self.env(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                preexec_fn=stop_signals_by_default,
            )
        self.processes.append(process)
        self.logs.append(Path(log.name))
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                try:
                    async with session.get(ready_url) as response:
                        if response.status == 200:
                            await self._check_identity(session, command)
                            return process
                except aiohttp.ClientError:
                    pass
                if process.returncode is not None:
                    raise AssertionError(
                        f"wiscat {command} exited {process.returncode}:\n{_tail(log.name)}"
                    )
                await asyncio.sleep(0.1)
        raise AssertionError(f"wiscat {command} did not become ready:\n{_tail(log.name)}")

    async def _check_identity(self, session: aiohttp.ClientSession, command: str) -> None:
        """The server that answered is this node's (not another process on a reused port)."""
        if command not in ("run", "provider"):
            return
        async with session.get(self.oai, params={"verb": "Identify"}) as response:
            body = await response.text()
        if f"<baseURL>{self.oai}</baseURL>" not in body:
            raise AssertionError(f"port {self.provider_port} is answered by another server")

    async def stop(self) -> list[int]:
        codes = []
        for process in self.processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            try:
                codes.append(await asyncio.wait_for(process.wait(), 20))
            except TimeoutError:
                process.kill()
                codes.append(await process.wait())
        self.processes.clear()
        for log in self.logs:
            log.unlink(missing_ok=True)
        self.logs.clear()
        return codes


def _tail(path: str, lines: int = 40) -> str:
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])


NodeFactory = Callable[[str], Awaitable[Node]]


async def hinted_pair(make_node: NodeFactory, folder: Path) -> tuple[Node, Node]:
    """Two nodes with change hints on: ALPHA serving its own set, one record ingested, and BETA
    holding an hourly link to it (its harvesters are the test's to start)."""
    a, b = await make_node("ALPHA"), await make_node("BETA")
    for node in (a, b):
        node.extra["WISCAT_HINTS"] = "true"
    (folder / "first").mkdir()
    (folder / "first" / "r0.xml").write_bytes(generate_record(0, centre="alpha"))
    await a.wiscat("ingest", str(folder / "first"))
    await a.start("provider", f"http://127.0.0.1:{a.provider_port}/readyz")
    await b.wiscat("link", "add", "alpha", "--url", a.oai, "--set", a.own_set, "--every", "1h")
    return a, b


async def hint_streams_open(node: Node) -> float:
    """The gauge of change-hint streams open at the node's provider."""
    return await sample_value(f"http://127.0.0.1:{node.provider_port}", "wiscat_hint_streams_open")
