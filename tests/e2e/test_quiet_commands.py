"""A one-shot command on the embedded PostgreSQL prints its result, not the server's start and
stop: those lines are for services (and at ``WISCAT_LOG_LEVEL=DEBUG``, for whoever asks)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pgserver._commands import pg_ctl

from tests.e2e.nodes import run_wiscat
from wiscat.shared.db.migrate import available


async def test_a_one_shot_command_says_nothing_of_the_embedded_server() -> None:
    # outside pytest's basetemp, like the session's server (see tests/conftest.py)
    folder = Path(tempfile.mkdtemp(prefix="wiscat-test-quiet-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(WISCAT_DATA_DIR=str(folder), WISCAT_GISC_NAME="QUIET", WISCAT_LOG_FORMAT="text")
    try:
        # the first command makes the server and its schema; its result says which migrations
        code, out, err = await run_wiscat(env, "migrate")
        assert code == 0, err
        names = [migration.name for migration in available()]
        assert (out, err) == (f"applied {len(names)} migration(s): {', '.join(names)}\n", "")

        code, out, err = await run_wiscat(env, "link", "list")
        assert (code, out, err) == (0, "no links\n", "")
    finally:
        data = folder / "postgres"
        if (data / "postmaster.pid").exists():  # a server a failed command left running
            user = {"user": "pgserver"} if os.geteuid() == 0 else {}
            with contextlib.suppress(subprocess.CalledProcessError):
                pg_ctl(["stop", "-m", "immediate"], pgdata=data, **user)
        shutil.rmtree(folder, ignore_errors=True)
