"""Two harvester processes of one node, hints on: one stream to the peer, held by one of them,
taken over by the other once its holder is SIGKILLed (docs/links.md, "Harvest on a hint")."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path

from tests.e2e.nodes import Node, NodeFactory, hint_streams_open, hinted_pair
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.generator import generate_record

# the other worker tries to take the stream every WISCAT_HARVEST_POLL_SECONDS (0.2 s here), and
# PostgreSQL frees the lock of a killed worker's session as soon as its connection closes
TAKEN_OVER_WITHIN = 10.0


async def connected_holder(pool: Pool) -> str | None:
    """The worker holding the peer's stream, once connected (None: none connected)."""
    row = await pool.fetchrow("select holder, connected_since from hint_streams")
    return row["holder"] if row and row["connected_since"] else None


async def test_two_workers_hold_one_stream_and_the_other_takes_it_over_when_killed(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    a, b = await hinted_pair(make_node, tmp_path)
    second = Node("BETA", b.database_url, extra={"WISCAT_HINTS": "true"})
    workers = await asyncio.gather(
        b.start("harvester", f"http://127.0.0.1:{b.harvester_port}/readyz"),
        second.start("harvester", f"http://127.0.0.1:{second.harvester_port}/readyz"),
    )
    names = {f"{socket.gethostname()}:{worker.pid}": worker for worker in workers}
    pool = await create_pool(b.database_url, max_size=1)
    try:
        deadline = time.monotonic() + 30
        while (holder := await connected_holder(pool)) is None:
            assert time.monotonic() < deadline, "no worker of B connected to A's stream"
            await asyncio.sleep(0.1)
        assert holder in names, f"{holder} is not one of B's workers {sorted(names)}"
        # both workers poll the links every 0.2 s the while: the other never opens one
        for _ in range(10):
            assert await hint_streams_open(a) == 1
            assert await connected_holder(pool) == holder
            await asyncio.sleep(0.2)

        names[holder].send_signal(signal.SIGKILL)
        await names[holder].wait()
        killed = time.monotonic()
        (other,) = set(names) - {holder}
        while (await connected_holder(pool), await hint_streams_open(a)) != (other, 1):
            took = time.monotonic() - killed
            assert took < TAKEN_OVER_WITHIN, (
                f"the other worker did not take the stream over in {took:.1f} s: holder "
                f"{await connected_holder(pool)}, {await hint_streams_open(a)} open at A"
            )
            await asyncio.sleep(0.1)
        print(f"taken over {time.monotonic() - killed:.2f} s after the holder was killed")

        # the taken-over stream still hints: a record ingested at A arrives in seconds
        (tmp_path / "second").mkdir()
        (tmp_path / "second" / "r1.xml").write_bytes(generate_record(1, centre="alpha"))
        held = "select count(*) from records where not deleted"
        before = await pool.fetchval(held)
        start = time.monotonic()
        await a.wiscat("ingest", str(tmp_path / "second"))
        while await pool.fetchval(held) == before and time.monotonic() - start < 15:
            await asyncio.sleep(0.05)
        took = time.monotonic() - start
        assert await pool.fetchval(held) == before + 1, "the record never reached B"
        assert took < 5, f"the record reached B {took:.1f} s after the ingest began"
        next_run = await pool.fetchval("select next_run_at - now() from links")
        assert next_run.total_seconds() > 50 * 60, "the hourly schedule moved"
        assert await hint_streams_open(a) == 1
    finally:
        await pool.close()
        await second.stop()
