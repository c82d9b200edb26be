"""The harvester against a provider it was not written with: pyoai's OAI-PMH server (the
benchmark's reference provider, ``bench/pyoai_server.py``), its own XML, resumptionTokens and
deleted headers, over several pages. The copy must equal what that server holds."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.harvest_pair import Pair
from tests.support.servers import loopback_socket
from wiscat.shared.db import links as link_store
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link

RECORDS = 450
PAGE = 100


def _catalogue(path: Path) -> dict[str, tuple[bytes | None, bool]]:
    """Records for pyoai's server in ``path``, every 30th deleted; what a copy must hold."""
    db = sqlite3.connect(path)
    db.execute("create table records (identifier text, datestamp text, deleted int, xml text)")
    expected: dict[str, tuple[bytes | None, bool]] = {}
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for n in range(RECORDS):
        record = parse_record(generate_record(n, centre="pyoai"))
        deleted = n % 30 == 0
        stamp = (start + timedelta(seconds=n)).replace(tzinfo=None).isoformat()
        db.execute(
            "insert into records values (?, ?, ?, ?)",
            (record.identifier, stamp, int(deleted), record.xml),
        )
        expected[record.identifier] = (None if deleted else record.content_hash, deleted)
    db.commit()
    db.close()
    return expected


async def _until_listening(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
        else:
            writer.close()
            return
    raise AssertionError("pyoai's server did not start")


async def test_a_pyoai_server_is_harvested_exactly(pair: Pair, tmp_path: Path) -> None:
    expected = _catalogue(tmp_path / "records.sqlite")
    sock = loopback_socket()
    port = sock.getsockname()[1]
    sock.close()
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.pyoai_server",
        str(tmp_path / "records.sqlite"),
        str(port),
        str(PAGE),
    )
    try:
        await link_store.add_link(
            pair.sink,
            build_link(
                name="pyoai",
                url=f"http://127.0.0.1:{port}/oai",
                remote_set=None,
                into="PYOAI",
                own_set=pair.ctx.settings.own_set,
                window_slices=0,
            ),
        )
        link = await link_store.get_link(pair.sink, "pyoai")
        assert link is not None
        from wiscat.harvester.harvest import harvest_link

        await _until_listening(port)
        report = await harvest_link(pair.ctx, link, window=False)
        assert report.status == "ok", report.summary()
        assert report.pages == -(-RECORDS // PAGE)
        assert report.counts["added"] == RECORDS - RECORDS // 30
        rows = await pair.sink.fetch(
            "select r.identifier, r.content_hash, m.deleted from set_members m "
            "join records r using (identifier) where m.set_spec = 'PYOAI'"
        )
        copy = {
            r["identifier"]: (None if r["deleted"] else r["content_hash"], r["deleted"])
            for r in rows
        }
        assert copy == expected
    finally:
        server.terminate()
        await server.wait()
