"""``make demo``: the mesh converges, a record added reaches the others in seconds, Ctrl-C stops
it, and nothing it started keeps running."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.nodes import stop_signals_by_default
from tools import demo


def processes_mentioning(text: str) -> list[int]:
    """Processes whose command line or environment holds ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            data = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if text.encode() in data:
            found.append(int(proc.name))
    return found


# SIGHUP: the terminal it runs in closed; its default ended the demo alone, leaving its
# PostgreSQL server running
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
async def test_demo_converges_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, sig: signal.Signals
) -> None:
    data = tmp_path / "demo"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.demo",
        "--records",
        "5",
        "--interval",
        "0.5",
        "--first-change",
        "0",
        "--port-base",
        "0",
        "--data-dir",
        str(data),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=stop_signals_by_default,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(120):
            while not any(line.startswith("converged:") for line in lines):
                line = (await process.stdout.readline()).decode()
                assert line, "the demo ended early:\n" + "".join(lines)
                lines.append(line)
            # links hourly (the default): the added record travels by change hints alone
            while not any(" reached " in line for line in lines):
                line = (await process.stdout.readline()).decode()
                assert line, "the demo ended early:\n" + "".join(lines)
                lines.append(line)
    finally:
        running = processes_mentioning(str(data))
        process.send_signal(sig)
        rest, _ = await asyncio.wait_for(process.communicate(), 60)
    output = "".join(lines) + rest.decode()
    assert process.returncode == 0, output
    # three nodes and the PostgreSQL server were running, and none of them is now
    assert len(running) >= 4, running
    assert processes_mentioning(str(data)) == []
    assert "demo stopped: every process it started has ended" in output
    table = output.split("converged:")[0].rsplit("after", 1)[1].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table[1:] if line.strip()}
    assert rows == {name: ["5", "5", "5"] for name in ("ALPHA", "BRAVO", "CHARLIE")}
    assert output.count("/oai?verb=Identify") == 3
    assert "every 1h" in output
    travelled = re.search(
        r"new record (\S+) at (\w+) reached (\w+) in ([\d.]+) s, (\w+) in ([\d.]+) s\n", output
    )
    assert travelled, output
    origin, first, second = travelled[2], travelled[3], travelled[5]
    assert {origin, first, second} == {"ALPHA", "BRAVO", "CHARLIE"}
    assert float(travelled[4]) < 5 and float(travelled[6]) < 5, travelled[0]


async def test_demo_refuses_ports_in_use_before_starting_anything(tmp_path: Path) -> None:
    # another demo's node on the port would answer this demo's readiness check in its stead
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        base = taken.getsockname()[1] - 1  # the first node's provider port is base + 1
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.demo",
            "--port-base",
            str(base),
            "--data-dir",
            str(tmp_path / "demo"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert err.decode().splitlines()[-1] == (
        f"demo: port {base + 1} is in use (another demo running?); stop it, or pass "
        "--port-base 0 for free ports"
    )
    assert out == b""
    assert not (tmp_path / "demo").exists()  # no server was started


async def test_a_node_whose_free_port_was_taken_is_started_on_others(
    database_url: str, tmp_path: Path
) -> None:
    # --port-base 0 picks a free port and the node binds it later: another program can take
    # it in between (the demo test failed so, with "exited with 2" and nothing else)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: the node cannot bind it
        port = taken.getsockname()[1]
        async with aiohttp.ClientSession() as http:
            pinned = demo.DemoNode("ALPHA", database_url, port, demo.free_port())
            with pytest.raises(demo.NodeExited) as exited:
                await demo.start_node(http, pinned, tmp_path, free_ports=False)
            assert f"cannot listen on 127.0.0.1:{port}" in str(exited.value)

            node = demo.DemoNode("ALPHA", database_url, port, demo.free_port())
            try:
                await demo.start_node(http, node, tmp_path, free_ports=True)
                assert node.provider_port != port
                async with http.get(f"{node.root}/readyz") as response:
                    assert response.status == 200
            finally:
                await demo.stop_nodes([node])
