"""A provider SIGKILLed and started again, hints on (docs/links.md, "Harvest on a hint"): its
peers, each a real harvester process on an hourly link, reconnect spread out in time (the
subscription's full-jitter backoff, as the harvester ships it), catch up with what was written
while the provider was down, and a record ingested after the restart reaches every one of them
within 5 s, without waiting for the schedule."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import datetime
from pathlib import Path

from tests.e2e.nodes import Node, NodeFactory
from tests.support import factories
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.generator import generate_record, identifier_for

PEERS = ("BETA", "GAMMA", "DELTA", "EPSILON")
HELD = "select count(*) from records where identifier = $1 and not deleted"


async def ingest(node: Node, directory: Path, number: int) -> str:
    directory.mkdir()
    (directory / f"r{number}.xml").write_bytes(generate_record(number, centre="alpha"))
    await node.wiscat("ingest", str(directory))
    return identifier_for(number, centre="alpha")


async def connected_since(pool: Pool) -> datetime | None:
    since: datetime | None = await pool.fetchval("select connected_since from hint_streams")
    return since


async def until_all(pools: list[Pool], check: str, *args: object, timeout: float) -> float:
    """Wait until ``check`` is true at every peer; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if all([await pool.fetchval(check, *args) for pool in pools]):
            return time.monotonic() - start
        await asyncio.sleep(0.05)
    raise AssertionError(f"{check} {args}: not at every peer within {timeout} s")


async def test_a_provider_killed_and_restarted_its_peers_reconnect_spread_out_and_catch_up(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    a = await make_node("ALPHA")
    peers = [await make_node(name) for name in PEERS]
    for node in (a, *peers):
        node.extra["WISCAT_HINTS"] = "true"
    await ingest(a, tmp_path / "first", 0)
    await a.start("provider", f"http://127.0.0.1:{a.provider_port}/readyz")
    add = ("link", "add", "alpha", "--url", a.oai, "--set", a.own_set, "--every", "1h")
    await asyncio.gather(*(peer.wiscat(*add) for peer in peers))
    await asyncio.gather(
        *(p.start("harvester", f"http://127.0.0.1:{p.harvester_port}/readyz") for p in peers)
    )
    pools = [await create_pool(peer.database_url, max_size=1) for peer in peers]
    try:
        subscribed = (
            "select bool_and(s.connected_since is not null and l.last_success_at is not null) "
            "from hint_streams s, links l"
        )
        await until_all(pools, subscribed, timeout=30)
        killed_at = await pools[0].fetchval("select clock_timestamp()")
        [provider] = a.processes
        provider.send_signal(signal.SIGKILL)
        await provider.wait()
        a.processes.clear()
        source = await create_pool(a.database_url, max_size=1)
        try:  # written while the provider is down: no hint is sent for it
            [while_down] = await factories.load_records(source, a.own_set, [1], centre="alpha")
        finally:
            await source.close()
        await a.start("provider", f"http://127.0.0.1:{a.provider_port}/readyz")
        back = "select connected_since > $1 from hint_streams"
        await until_all(pools, back, killed_at, timeout=40)
        instants = sorted([since for pool in pools if (since := await connected_since(pool))])
        spread = (instants[-1] - instants[0]).total_seconds()
        print(f"the peers reconnected {[(t - killed_at).total_seconds() for t in instants]} s")
        # with the backoff's jitter taken out they reconnect within some 25 ms of each other;
        # attempts made while the provider starts wait in its listen queue (its socket listens
        # before its app is ready) and are answered together: the spread comes from the others
        assert spread > 0.1, f"the peers reconnected within {spread * 1000:.0f} ms of each other"
        # the connection's own run catches up: the hourly schedule is far away
        await until_all(pools, HELD, while_down, timeout=10)
        start = time.monotonic()
        after = await ingest(a, tmp_path / "after", 2)
        await until_all(pools, HELD, after, timeout=15)
        took = time.monotonic() - start
        print(f"the record reached every peer {took:.2f} s after the ingest began")
        assert took < 5, f"the record reached every peer {took:.1f} s after the ingest began"
        for pool in pools:
            next_run = await pool.fetchval("select next_run_at - now() from links")
            assert next_run.total_seconds() > 50 * 60, "the hourly schedule moved"
    finally:
        for pool in pools:
            await pool.close()
