"""Hints relayed in two hops, NC -> GISC1 -> GISC2, every node a real process and every link
hourly: a record GISC1 harvests is a change of its set there, so GISC1's own stream hints
GISC2 (docs/links.md, "Change hints")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.e2e.nodes import Node, NodeFactory
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.generator import generate_record

# the bound for two hops in a test
TWO_HOPS = 5.0


async def subscribed(node: Node, pool: Pool) -> None:
    """Wait for the node's link's first run, its stream of hints connected and the NC's first
    record held."""
    for _ in range(300):
        state = await pool.fetchrow(
            "select last_success_at, connected_since,"
            " (select count(*) from records where not deleted) as held from links, hint_streams"
        )
        if state and state["last_success_at"] and state["connected_since"] and state["held"] == 1:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{node.name} never subscribed to its link's hints: {state}")


async def test_a_record_ingested_at_an_nc_reaches_the_second_gisc_in_two_hops(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    nc, gisc1, gisc2 = await make_node("NC"), await make_node("ONE"), await make_node("TWO")
    for node in (nc, gisc1, gisc2):
        node.extra["WISCAT_HINTS"] = "true"
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "r0.xml").write_bytes(generate_record(0, centre="nc"))
    await nc.wiscat("ingest", str(tmp_path / "first"))
    # GISC1 harvests the NC's set, and holds its records in that set: GISC2 harvests it there
    await gisc1.wiscat("link", "add", "nc", "--url", nc.oai, "--set", nc.own_set, "--every", "1h")
    await gisc2.wiscat(
        "link", "add", "one", "--url", gisc1.oai, "--set", nc.own_set, "--every", "1h"
    )
    await asyncio.gather(
        nc.start("provider", f"http://127.0.0.1:{nc.provider_port}/readyz"),
        gisc1.start("provider", f"http://127.0.0.1:{gisc1.provider_port}/readyz"),
    )
    await asyncio.gather(
        gisc1.start("harvester", f"http://127.0.0.1:{gisc1.harvester_port}/readyz"),
        gisc2.start("harvester", f"http://127.0.0.1:{gisc2.harvester_port}/readyz"),
    )
    pools = [await create_pool(node.database_url, max_size=1) for node in (gisc1, gisc2)]
    try:
        await asyncio.gather(subscribed(gisc1, pools[0]), subscribed(gisc2, pools[1]))
        held = "select count(*) from records where not deleted"
        (tmp_path / "second").mkdir()
        (tmp_path / "second" / "r1.xml").write_bytes(generate_record(1, centre="nc"))
        start = time.monotonic()
        await nc.wiscat("ingest", str(tmp_path / "second"))
        arrived: dict[int, float] = {}
        while len(arrived) < 2 and time.monotonic() - start < 3 * TWO_HOPS:
            for hop, pool in enumerate(pools):
                if hop not in arrived and await pool.fetchval(held) == 2:
                    arrived[hop] = time.monotonic() - start
            await asyncio.sleep(0.05)
        assert sorted(arrived) == [0, 1], f"the record reached only hops {sorted(arrived)}"
        # the ingest command's own start (a process) counts in these
        print(f"the record reached GISC1 in {arrived[0]:.2f} s, GISC2 in {arrived[1]:.2f} s")
        assert arrived[1] < TWO_HOPS, f"the record reached GISC2 in {arrived[1]:.1f} s"
        for pool in pools:
            every, next_run = await pool.fetchrow("select every, next_run_at - now() from links")
            assert every.total_seconds() == 3600
            assert next_run.total_seconds() > 50 * 60, "an hourly schedule moved"
    finally:
        for pool in pools:
            await pool.close()
