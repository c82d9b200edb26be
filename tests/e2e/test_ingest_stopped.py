"""``wiscat ingest`` of a large folder stopped by its operator (Ctrl-C, SIGTERM, a closed
terminal): it says what it stored before it stopped, and run again it goes on."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.e2e.nodes import WISCAT, NodeFactory, stop_signals_by_default
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record

FILES = 1000


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
async def test_a_stopped_ingest_says_what_it_stored(
    make_node: NodeFactory, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """It ended with no word of what it had stored (SIGTERM: "stopped by SIGTERM" alone)."""
    node = await make_node("STOP")
    for n in range(FILES):
        (tmp_path / f"r{n:04}.xml").write_bytes(generate_record(n, centre="stop"))
    conn = await connect(node.database_url)
    try:
        await node.wiscat("migrate")
        ingest = await asyncio.create_subprocess_exec(
            WISCAT,
            "ingest",
            str(tmp_path),
            env=node.env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=stop_signals_by_default,
        )
        while await conn.fetchval("select count(*) from records") < 400:
            await asyncio.sleep(0.01)
        # the next batch waits on the lock: the ingest is stopped in the middle of a write
        async with conn.transaction():
            await conn.execute("lock table records in share mode")
            stored = await conn.fetchval("select count(*) from records")
            for _ in range(500):
                waiting = await conn.fetchval(
                    "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
                )
                if waiting:
                    break
                await asyncio.sleep(0.01)
            ingest.send_signal(sig)
            out, err = await asyncio.wait_for(ingest.communicate(), 60)
    finally:
        await conn.close()
    assert ingest.returncode == code, err
    assert out.decode() == f"WIS-GISC-STOP: added {stored}, bad 0\n"
    said = err.decode()
    assert "wiscat: the ingest was asked to stop. The counts above are what was stored" in said
    assert "Traceback" not in said

    _, again, _ = await node.wiscat("ingest", str(tmp_path))
    assert again == f"WIS-GISC-STOP: added {FILES - stored}, unchanged {stored}, bad 0\n"
