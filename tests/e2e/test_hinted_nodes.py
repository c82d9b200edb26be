"""Two real nodes as processes, hints on (the other e2e nodes turn them off): a record ingested
at A reaches B within seconds, though B's link to A runs hourly (docs/links.md, "Harvest on a
hint")."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tests.e2e.nodes import NodeFactory, hinted_pair
from wiscat.shared.db.pool import create_pool
from wiscat.shared.generator import generate_record


async def test_a_record_ingested_at_a_reaches_b_in_seconds_on_an_hourly_link(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    a, b = await hinted_pair(make_node, tmp_path)
    await b.start("harvester", f"http://127.0.0.1:{b.harvester_port}/readyz")
    for _ in range(150):  # the first run, and the stream of A's hints connected
        _, shown, _ = await b.wiscat("link", "show", "alpha", "--json")
        link = json.loads(shown)
        if link["last_success_at"] and link["subscription"]["state"] == "connected":
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"B never subscribed to A's hints: {link['subscription']}")
    assert link["every"] == 3600.0
    pool = await create_pool(b.database_url, max_size=1)
    try:
        (tmp_path / "second").mkdir()
        record = generate_record(1, centre="alpha")
        (tmp_path / "second" / "r1.xml").write_bytes(record)
        held = "select count(*) from records where not deleted"
        before = await pool.fetchval(held)
        start = time.monotonic()
        await a.wiscat("ingest", str(tmp_path / "second"))
        while time.monotonic() - start < 15:
            if await pool.fetchval(held) > before:
                break
            await asyncio.sleep(0.05)
        took = time.monotonic() - start
        assert await pool.fetchval(held) == before + 1, "the record never reached B"
        # the ingest command's own start (a process) counts in this
        print(f"the record reached B {took:.2f} s after the ingest began")
        assert took < 5, f"the record reached B {took:.1f} s after the ingest began"
        next_run = await pool.fetchval("select next_run_at - now() from links")
        assert next_run.total_seconds() > 50 * 60, "the hourly schedule moved"
    finally:
        await pool.close()
