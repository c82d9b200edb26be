"""The mutation runner (tools/mutants.py) leaves no PostgreSQL running behind tests it killed.

When a mutation's tests run past the time bound, the runner kills their process group; the
embedded server those tests started runs in a session of its own (pg_ctl's), which the kill does
not reach. A real server, started the way the tests' fixture starts it, by a process then
killed with its group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from tools.mutants import running, stop_servers

_STARTER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from wiscat.shared.db.embedded import EmbeddedPostgres

    EmbeddedPostgres(Path(sys.argv[1])).start()
    print("up", flush=True)
    time.sleep(600)
    """
)


def test_a_server_left_by_killed_tests_is_stopped() -> None:
    # a short path: the server's Unix socket lives in its folder
    scratch = Path(tempfile.mkdtemp(prefix="wiscat-mr-"))
    folder = Path(tempfile.mkdtemp(prefix="wiscat-test-pg-", dir=scratch))
    pid = None
    try:
        with subprocess.Popen(
            [sys.executable, "-c", _STARTER, str(folder)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as starter:
            assert starter.stdout is not None
            assert starter.stdout.readline().strip() == "up"
            os.killpg(starter.pid, signal.SIGKILL)  # as the runner ends timed-out tests
        pid = int((folder / "postgres" / "postmaster.pid").read_text().split()[0])
        assert running(pid)  # what the runner meets: the kill did not reach the server

        assert stop_servers(scratch) == [pid]
        assert not running(pid)
    finally:
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGQUIT)
        shutil.rmtree(scratch, ignore_errors=True)
