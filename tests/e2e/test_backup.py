"""``wiscat backup`` and ``wiscat restore`` of an embedded node (the node of ``make run``), with
the tools shipped with its server: a node restored from a backup on a new machine (a new data
folder) goes on harvesting from its links' high-water marks, asking its peer only for what is
newer, not the whole list again."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web

from tests.e2e.nodes import NodeFactory, run_wiscat
from tests.support.servers import list_records_page, serving
from wiscat.shared.db.backup import without_password
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.errors import NoRecordsMatch

RECORDS = 20
STAMP = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class Peer:
    """A peer whose catalogue is RECORDS records of one datestamp; it keeps every list request
    it was asked, and has nothing newer for an incremental one (noRecordsMatch)."""

    def __init__(self) -> None:
        self.asked: list[dict[str, str]] = []
        pieces = []
        for n in range(RECORDS):
            record = parse_record(generate_record(n, centre="peer"))
            pieces.append(render.record(record.identifier, STAMP, [], False, record.xml))
        self.page = list_records_page(pieces)

    async def answer(self, request: web.Request) -> bytes:
        self.asked.append(dict(request.query))
        if "from" in request.query:
            return render.render_error(
                datetime.now(UTC), "http://peer/oai", None, [NoRecordsMatch()]
            )
        return self.page


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, str]]:
    made = Peer()
    async with serving(b"", pages=made.answer) as url:
        yield made, url


@contextlib.contextmanager
def folders() -> Iterator[Path]:
    # outside pytest's basetemp, like the session's server (see tests/conftest.py)
    folder = Path(tempfile.mkdtemp(prefix="wiscat-test-backup-"))
    try:
        yield folder
    finally:
        from pgserver._commands import pg_ctl

        for data in folder.glob("*/postgres"):
            if (data / "postmaster.pid").exists():  # a server a failed command left running
                user = {"user": "pgserver"} if os.geteuid() == 0 else {}
                with contextlib.suppress(subprocess.CalledProcessError):
                    pg_ctl(["stop", "-m", "immediate"], pgdata=data, **user)
        shutil.rmtree(folder, ignore_errors=True)


async def _wiscat(data_dir: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(WISCAT_DATA_DIR=str(data_dir), WISCAT_GISC_NAME="SINK", WISCAT_LOG_FORMAT="text")
    return await run_wiscat(env, *args)


def _lists(peer: Peer) -> list[dict[str, str]]:
    return [query for query in peer.asked if query.get("verb") == "ListRecords"]


async def test_a_restored_node_harvests_on_from_its_high_water_mark(
    peer: tuple[Peer, str],
) -> None:
    source, url = peer
    with folders() as folder:
        node, restored, dump = folder / "node", folder / "restored", folder / "node.dump"
        code, _, err = await _wiscat(node, "migrate")
        assert code == 0, err
        await _wiscat(node, "link", "add", "peer", "--url", url, "--into", "WIS-GISC-PEER")
        code, out, err = await _wiscat(node, "harvest", "peer")
        assert code == 0 and f"added {RECORDS}" in out, out + err
        assert [("from" in query) for query in _lists(source)] == [False]  # the whole list

        code, out, err = await _wiscat(node, "backup", str(dump))
        assert (code, err) == (0, ""), out + err
        assert out.startswith(f"backed up the database of WIS-GISC-SINK to {dump} (")
        assert dump.stat().st_size > 0 and [p.name for p in folder.glob(".*")] == []

        # a non-empty node is not restored over unless asked
        code, out, err = await _wiscat(node, "restore", str(dump))
        assert (code, out) == (1, ""), err
        assert err.startswith(f"wiscat: not restored: the database holds {RECORDS + 1} records")

        # a new node, restored from the backup: its records, its link and its high-water mark
        code, out, err = await _wiscat(restored, "restore", str(dump))
        assert (code, err) == (0, ""), out + err
        assert out.startswith(f"restored {dump} (")
        code, out, err = await _wiscat(restored, "harvest", "peer")
        assert code == 0, out + err
        assert out.startswith("peer incremental run 2: ok;"), out
        assert f"added {RECORDS}" not in out, out
        # the peer was asked only for what is newer than the mark: not the whole list again
        lists = _lists(source)
        assert len(lists) == 2 and lists[1]["from"] == "2026-11-01T12:00:00Z", lists
        code, out, err = await _wiscat(restored, "link", "runs", "peer")
        assert code == 0, err
        assert "peer full: ok" in out and f"added {RECORDS}" in out, out  # run 1, restored


def test_the_password_goes_in_the_environment_not_on_the_command_line() -> None:
    assert without_password("postgresql://wiscat:s3cr%40t@db.internal:5432/wiscat") == (
        "postgresql://wiscat@db.internal:5432/wiscat",
        {"PGPASSWORD": "s3cr@t"},
    )
    assert without_password("postgresql://wiscat@db/wiscat?password=pw&sslmode=require") == (
        "postgresql://wiscat@db/wiscat?sslmode=require",
        {"PGPASSWORD": "pw"},
    )
    assert without_password("postgresql://postgres:@/postgres?host=/srv/var/postgres") == (
        "postgresql://postgres@/postgres?host=%2Fsrv%2Fvar%2Fpostgres",
        {},
    )


async def test_a_server_node_backs_up_with_the_tools_on_path(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """With ``WISCAT_DATABASE_URL`` the tools come from ``PATH`` (here the server's own, first on
    it: Debian's may be older than the test server); missing, the command says what to install.
    The restore goes into a migrated, empty database (a new node's), then one that holds data
    with ``--force``."""
    from pgserver._commands import POSTGRES_BIN_PATH

    node, other = await make_node("SERVER"), await make_node("SERVER")
    records = tmp_path / "records"
    for n in range(5):
        records.mkdir(exist_ok=True)
        (records / f"r{n}.xml").write_bytes(generate_record(n, centre="server"))
    await node.wiscat("ingest", str(records))
    dump = tmp_path / "server.dump"

    node.extra["PATH"] = str(tmp_path / "no-tools-here")
    code, out, err = await node.wiscat("backup", str(dump), check=False)
    assert (code, out) == (2, ""), err
    assert err == (
        "wiscat: pg_dump is not on PATH: install PostgreSQL's client tools, of the server's "
        "major version or newer (Debian: apt-get install postgresql-client)\n"
    )
    assert not dump.exists()

    tools = f"{POSTGRES_BIN_PATH}:{os.environ['PATH']}"
    node.extra["PATH"] = other.extra["PATH"] = tools
    _, out, _ = await node.wiscat("backup", str(dump))
    assert out.startswith(f"backed up the database of WIS-GISC-SERVER to {dump} (")
    _, out, _ = await other.wiscat("restore", str(dump))
    assert out.startswith(f"restored {dump} (")
    code, _, err = await other.wiscat("restore", str(dump), check=False)
    assert code == 1 and "the database holds 5 records and links" in err
    _, out, _ = await other.wiscat("restore", "--force", str(dump))
    assert out.startswith(f"restored {dump} (")
    code, out, err = await other.wiscat("delete", identifier_for(4, "server"))
    assert (code, out) == (0, f"deleted: {identifier_for(4, 'server')}\n"), err
