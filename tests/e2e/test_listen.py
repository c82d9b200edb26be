"""A service whose port is taken: the command stops at once, saying where and why (exit 2).

``wiscat run`` used to go on serving OAI-PMH without its harvester, whose failure showed only
when the node was stopped.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from tests.e2e.nodes import WISCAT, NodeFactory


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another program listens on."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        yield int(other.getsockname()[1])


async def _exits(env: dict[str, str], *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        *args,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(process.communicate(), 60)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"wiscat {' '.join(args)} went on running") from None
    return process.returncode or 0, err.decode()


@pytest.mark.parametrize(
    ("command", "port_setting", "service"),
    [
        ("provider", "WISCAT_PROVIDER_PORT", "the provider"),
        ("harvester", "WISCAT_HARVESTER_PORT", "the harvester's health endpoints"),
        ("run", "WISCAT_PROVIDER_PORT", "the provider"),
        ("run", "WISCAT_HARVESTER_PORT", "the harvester's health endpoints"),
    ],
)
async def test_a_port_in_use_stops_the_command_with_the_reason(
    make_node: NodeFactory, taken: int, command: str, port_setting: str, service: str
) -> None:
    node = await make_node("LISTEN")
    env = node.env()
    env["WISCAT_PROVIDER_HOST"] = "127.0.0.1"
    env[port_setting] = str(taken)
    code, err = await _exits(env, command)
    assert code == 2, err
    assert f"wiscat: {service} cannot listen on 127.0.0.1:{taken}: Address already in use" in err
    assert "Traceback" not in err
    # the provider never said it was ready on a port it could not have
    assert port_setting != "WISCAT_PROVIDER_PORT" or "provider ready" not in err
