"""The embedded server: a start that takes longer than pgserver waits for.

After an unclean stop the server replays its write-ahead log before it accepts connections; for
a large catalogue that takes longer than the 10 seconds pgserver's ``pg_ctl`` waits. Here a real
server is made that slow on purpose: started in archive recovery whose ``restore_command`` waits
for a file to appear, it stays "starting" until the test lets its recovery end (or stops it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pgserver
import psutil
import pytest
from pgserver._commands import pg_ctl

from tests.e2e.nodes import Node
from wiscat.shared.db.embedded import EmbeddedPostgres, _attached, _last_words
from wiscat.shared.db.errors import EmbeddedServerError
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record


@pytest.fixture
def folder() -> Iterator[Path]:
    # outside pytest's basetemp, like the session's server (see tests/conftest.py)
    path = Path(tempfile.mkdtemp(prefix="wiscat-test-slow-pg-"))
    yield path
    data = path / "postgres"
    if (data / "postmaster.pid").exists():  # a server a failed start left running
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["stop", "-m", "immediate"], pgdata=data, **_as_server_user())
    shutil.rmtree(path, ignore_errors=True)


def _as_server_user() -> dict[str, str]:
    # pgserver runs the server as its own user when started by root
    return {"user": "pgserver"} if os.geteuid() == 0 else {}


def _slow_next_start(server: EmbeddedPostgres) -> Path:
    """The next start stays "starting" until the returned file exists (or it is stopped)."""
    go = server.path / "recovery-may-end"
    (server.path / "recovery.signal").touch()
    with open(server.path / "postgresql.conf", "a") as conf:
        # no archive to restore from: each call fails, once the file exists; the replay of the
        # server's own log then ends, and it starts
        conf.write(
            f"\nrestore_command = 'while [ ! -e {go} ]; do sleep 0.2; done; false'\n"
            "hot_standby = off\n"
        )
    return go


async def _until_waiting(caplog: pytest.LogCaptureFixture) -> None:
    """Until start() says it waits for the server (pgserver's pg_ctl gave up, after 10 s)."""
    deadline = time.monotonic() + 60
    while "is still starting" not in caplog.text:
        assert time.monotonic() < deadline, "start() never said it waits"
        await asyncio.sleep(0.2)


async def test_start_waits_for_a_server_slower_than_pgserver_waits(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wiscat.db")
    server = EmbeddedPostgres(folder)
    conn = await connect(server.start())
    await conn.execute("create table kept (value text); insert into kept values ('before')")
    await conn.close()
    server.stop()
    go = _slow_next_start(server)

    starting = asyncio.create_task(asyncio.to_thread(server.start))
    try:
        await _until_waiting(caplog)
        assert not starting.done()  # pg_ctl's timeout did not end the start
        go.touch()
        url = await asyncio.wait_for(starting, 60)
        conn = await connect(url)
        assert await conn.fetchval("select value from kept") == "before"
        await conn.close()
        assert "embedded PostgreSQL ready after" in caplog.text
        # pgserver's copy of the server's whole log on its timeout is not passed on
        assert "Timeout starting server" not in caplog.text
    finally:
        await asyncio.gather(starting, return_exceptions=True)
        server.stop()


async def test_a_start_that_cannot_finish_fails_with_the_reason(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wiscat.db")
    server = EmbeddedPostgres(folder)
    server.start()
    server.stop()
    _slow_next_start(server)

    # out of time: the server goes on starting, and the error says so
    hurried = EmbeddedPostgres(folder, start_timeout=1)
    out_of_time = r"did not become ready within 1 s \(still 'starting'\)"
    with pytest.raises(EmbeddedServerError, match=out_of_time):
        await asyncio.to_thread(hurried.start)

    # a second start finds that server still starting, and waits for it; it stops instead
    caplog.clear()
    starting = asyncio.create_task(asyncio.to_thread(EmbeddedPostgres(folder).start))
    await _until_waiting(caplog)
    pg_ctl(["stop", "-m", "immediate"], pgdata=server.path, **_as_server_user())
    with pytest.raises(EmbeddedServerError, match="stopped while starting; see its log"):
        await asyncio.wait_for(starting, 60)


def test_a_data_folder_the_server_refuses_is_told_by_its_cause(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder another PostgreSQL version made (pgserver's wheel moved on a major version):
    the error names the server's own reason, and pgserver's copy of the whole log is dropped."""
    server = EmbeddedPostgres(folder)
    server.start()
    server.stop()
    (server.path / "PG_VERSION").write_text("15\n")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(EmbeddedServerError) as refused:
        EmbeddedPostgres(folder).start()
    assert str(refused.value).startswith(f"embedded PostgreSQL failed to start in {server.path}")
    assert "database files are incompatible with server" in str(refused.value)
    assert "initialized by PostgreSQL version 15" in str(refused.value)
    dumped = [r for r in caplog.records if "database system is ready" in r.getMessage()]
    assert dumped == []


def test_starting_says_nothing_about_xdg_runtime_dir() -> None:
    # servers and containers seldom set it; platformdirs then warns at pgserver's import
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    probe = "from wiscat.shared.db.embedded import import_pgserver; import_pgserver()"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", probe], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["with space", "a$(touch x)b", 'quote"d'])
def test_a_folder_the_server_cannot_start_in_is_refused_untouched(
    tmp_path: Path, name: str
) -> None:
    # pg_ctl hands the server its socket folder in a shell command line, unquoted: with a space
    # the start failed with pgserver's dump of the command and the server's log
    data_dir = tmp_path / name / "var"
    with pytest.raises(EmbeddedServerError, match="set WISCAT_DATA_DIR to a plain path"):
        EmbeddedPostgres(data_dir).start()
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing run


def _killed(server: EmbeddedPostgres) -> list[str]:
    """Kill the running server as a power cut would, once its processes have all ended; return
    the ``postmaster.pid`` it left."""
    lines = (server.path / "postmaster.pid").read_text().splitlines()
    os.kill(int(lines[0]), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while psutil.pid_exists(int(lines[0])) or _attached(lines):
        assert time.monotonic() < deadline, "the killed server's processes did not end"
        time.sleep(0.1)
    server._server = None  # the handle of a server that is gone
    pgserver.PostgresServer._instances.pop(server.path, None)
    return lines


def test_a_lock_file_naming_another_process_is_removed_and_that_process_left_alone(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # After a restart the process id in the lock files an unclean stop left is often another
    # process's (in a container, almost always): pgserver took it for the server, the start
    # failed ("psql ... returned non-zero exit status 2"), and at exit pgserver stopped that
    # process with SIGTERM.
    server = EmbeddedPostgres(folder)
    server.start()
    lines = _killed(server)
    with subprocess.Popen(["sleep", "600"]) as other:
        try:
            socket_lock = Path(lines[4].strip(), f".s.PGSQL.{lines[3].strip()}.lock")
            for lock in (server.path / "postmaster.pid", socket_lock):
                kept = lock.read_text().splitlines()[1:]
                lock.write_text("\n".join([str(other.pid), *kept]) + "\n")

            again = EmbeddedPostgres(folder)
            url = again.start()
            assert f"names process {other.pid}, which is not this folder's server" in caplog.text
            running = (server.path / "postmaster.pid").read_text().splitlines()[0]
            assert running != str(other.pid) and psutil.Process(int(running)).name() == "postgres"
            assert asyncio.run(_one(url)) == 1
            again.stop()
            assert not (server.path / "postmaster.pid").exists()  # that server stopped
            time.sleep(0.5)
            assert other.poll() is None  # and the other process was left alone
        finally:
            other.kill()


def test_a_lock_file_of_this_server_is_kept(folder: Path) -> None:
    server = EmbeddedPostgres(folder)
    server.start()
    try:
        # a second user of the running server (another wiscat process) attaches to it
        second = EmbeddedPostgres(folder)
        assert asyncio.run(_one(second.start())) == 1
        second.stop()
    finally:
        server.stop()


def test_a_user_killed_with_sigkill_does_not_keep_the_server_running(folder: Path) -> None:
    # pgserver stops the server when the last process using it exits; a process killed with
    # SIGKILL stayed on its list for ever, so the server was never stopped again.
    start = (
        "import sys, time; from pathlib import Path; from wiscat.shared.db.embedded import "
        "EmbeddedPostgres; EmbeddedPostgres(Path(sys.argv[1])).start(); print('up', flush=True); "
        "time.sleep(600)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", start, str(folder)], stdout=subprocess.PIPE, text=True
    ) as user:
        try:
            assert user.stdout is not None and user.stdout.readline() == "up\n"
        finally:
            user.kill()
    assert (folder / "postgres" / "postmaster.pid").exists()  # its server runs on

    server = EmbeddedPostgres(folder)
    server.start()
    server.stop()
    assert not (folder / "postgres" / "postmaster.pid").exists()


async def _one(url: str) -> int:
    conn = await connect(url)
    try:
        return int(await conn.fetchval("select 1"))
    finally:
        await conn.close()


async def test_a_node_whose_embedded_server_stops_stops_and_says_why(folder: Path) -> None:
    """Nothing would start the embedded server again: a node that answered "unavailable" for
    ever would hide it. It stops instead, failing, with the end of the server's log."""
    node = Node("LONE", "", extra={"WISCAT_DATA_DIR": str(folder), "WISCAT_LOG_FORMAT": "text"})
    try:
        process = await node.start("run", f"http://127.0.0.1:{node.provider_port}/readyz")
        # stopped as a full disk or an operator's pg_ctl would stop it
        pg_ctl(["stop", "-m", "fast"], pgdata=folder / "postgres", **_as_server_user())
        assert await asyncio.wait_for(process.wait(), 30) == 2
        err = node.logs[-1].read_text()
    finally:
        await node.stop()
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"wiscat: the embedded PostgreSQL in {folder / 'postgres'} is no longer")
    assert "database system is shut down" in last  # the server's own last words
    logged = [line for line in err.splitlines() if " ERROR " in line]
    assert logged and logged[0].endswith("database system is shut down; stopping")


# The end of the log of a server whose disk filled up, as a node's ingest made it (a tmpfs of
# 120 MB): its recovery could not write, and it shut down.
FULL_DISK_LOG = [
    "2026-11-24 02:31:54.351 UTC [26191] LOG:  database system was interrupted",
    "2026-11-24 02:31:54.356 UTC [26194] FATAL:  the database system is in recovery mode",
    "2026-11-24 02:31:54.363 UTC [26191] LOG:  redo starts at 0/1480470",
    "2026-11-24 02:31:54.459 UTC [26191] FATAL:  could not write to file "
    '"pg_wal/xlogtemp.26191": No space left on device',
    "2026-11-24 02:31:54.463 UTC [26171] LOG:  startup process (PID 26191) exited with exit code 1",
    "2026-11-24 02:31:54.463 UTC [26171] LOG:  shutting down due to startup process failure",
    "2026-11-24 02:31:54.474 UTC [26171] LOG:  database system is shut down",
]


def test_a_stopped_server_is_told_by_its_cause_and_its_last_line() -> None:
    assert _last_words(FULL_DISK_LOG) == (
        'FATAL:  could not write to file "pg_wal/xlogtemp.26191": No space left on device'
        " | LOG:  database system is shut down"
    )
    assert _last_words([]) == ""
    # a connection refused while the server stops says nothing of why it stopped
    stopped_by_hand = [
        "2026-11-24 03:08:54.101 UTC [9] LOG:  received fast shutdown request",
        "2026-11-24 03:08:54.112 UTC [11] FATAL:  the database system is shutting down",
        "2026-11-24 03:08:54.190 UTC [9] LOG:  database system is shut down",
    ]
    assert _last_words(stopped_by_hand) == "LOG:  database system is shut down"


async def test_an_ingest_whose_database_stops_says_what_it_stored(folder: Path) -> None:
    """The database gone in the middle of an ingest: the command fails with the reason and the
    counts of the batches stored before (which stay stored), not a traceback."""
    records = folder / "records"
    records.mkdir()
    for n in range(3000):
        (records / f"r{n:04}.xml").write_bytes(generate_record(n))
    server = EmbeddedPostgres(folder)  # the same server the ingest will attach to
    conn = await connect(server.start())
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
        env.update(WISCAT_DATA_DIR=str(folder), WISCAT_GISC_NAME="LONE")
        wiscat = str(Path(sys.executable).with_name("wiscat"))
        ingest = await asyncio.create_subprocess_exec(
            wiscat, "ingest", str(records), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        stored = 0
        while not stored and ingest.returncode is None:
            with contextlib.suppress(Exception):  # the schema may not be there yet
                stored = await conn.fetchval("select count(*) from records")
            await asyncio.sleep(0.01)
        pg_ctl(["stop", "-m", "immediate"], pgdata=folder / "postgres", **_as_server_user())
        out, err = await asyncio.wait_for(ingest.communicate(), 60)
    finally:
        with contextlib.suppress(Exception):
            await conn.close(timeout=1)
        server.stop()
    assert ingest.returncode == 2, (out, err)
    summary = out.decode().strip()
    assert summary.startswith("WIS-GISC-LONE: added ")
    added = int(summary.split("added ")[1].split(",")[0])
    assert stored <= added < 3000 and added % 200 == 0  # whole batches, from before the stop
    message = err.decode().strip().splitlines()[-1]
    assert message.startswith("wiscat: the database failed during the ingest: ")
    assert "The same ingest, run again, goes on" in message
    assert "Traceback" not in err.decode()

    # the server started again (it recovers): the same ingest stores the rest
    again = subprocess.run(
        [wiscat, "ingest", str(records)], env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"WIS-GISC-LONE: added {3000 - added}, unchanged {added}, bad 0\n"
