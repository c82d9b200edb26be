"""A worker SIGKILLed mid-list frees its link at once: its lease is tied to its database session
(a session-level advisory lock that PostgreSQL releases when the session dies), so the next run,
by hand or by a harvester's schedule, is not refused for WISCAT_HARVEST_LEASE_SECONDS."""

from __future__ import annotations

import asyncio
import signal

from tests.e2e.nodes import Node, NodeFactory

# the fixture of the slow peer, as the harvest command's tests use it
from tests.e2e.test_harvest_command import (
    SlowPeer,
    pages_done,
    peer_url,  # noqa: F401  (a fixture)
    runs,
    start_harvest,
)
from wiscat.shared.db.pool import connect


async def killed_mid_list(node: Node, url: str) -> int:
    """Add the slow peer's link, start ``wiscat harvest`` on it, SIGKILL it after 3 pages;
    the killed process's id."""
    await node.wiscat("link", "add", "slow", "--url", url, "--into", "WIS-GISC-SLOW")
    process = await start_harvest(node)
    await pages_done(node, 3)
    process.send_signal(signal.SIGKILL)
    await process.communicate()
    assert process.returncode == -signal.SIGKILL
    return process.pid


async def test_a_run_by_hand_after_a_killed_one_is_not_refused(
    make_node: NodeFactory,
    peer_url: tuple[SlowPeer, str],  # noqa: F811
) -> None:
    peer, url = peer_url
    node = await make_node("KILLED")  # the default lease: 300 s
    await killed_mid_list(node, url)
    peer.delay = 0

    code, out, err = await node.wiscat("harvest", "slow", check=False)
    assert code == 0, err
    assert "pages 30;" in out  # the whole list again: no high-water mark was reached
    assert await runs(node) == [("failed", "abandoned"), ("ok", None)]
    assert await records(node) == 30


async def test_a_harvester_takes_a_killed_workers_link_at_once(
    make_node: NodeFactory,
    peer_url: tuple[SlowPeer, str],  # noqa: F811
) -> None:
    peer, url = peer_url
    node = await make_node("TAKEN")
    await killed_mid_list(node, url)
    peer.delay = 0

    # the link is still due (its run never ended): the harvester's first look finds it free
    await node.start("harvester", f"http://127.0.0.1:{node.harvester_port}/readyz")
    conn = await connect(node.database_url)
    try:
        for _ in range(200):  # 20 s, far below the 300 s lease the dead worker left
            if len(await runs(node)) == 2 and (await runs(node))[1][0] != "running":
                break
            await asyncio.sleep(0.1)
        assert await runs(node) == [("failed", "abandoned"), ("ok", None)]
        assert await conn.fetchval("select count(*) from records") == 30
    finally:
        await conn.close()


async def records(node: Node) -> int:
    conn = await connect(node.database_url)
    try:
        return int(await conn.fetchval("select count(*) from records"))
    finally:
        await conn.close()
