"""``wiscat settings``: each setting's value and source (environment, .env, default, derived),
as the node reads them, with no secret shown."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from tests.e2e.nodes import WISCAT

SECRETS = ("t0k3n-secret", "pw-secret", "db-secret")


async def test_settings_say_their_value_and_source_and_hide_secrets(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("WISCAT_PAGE_SIZE=250\nWISCAT_GISC_NAME=FROMFILE\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(
        WISCAT_GISC_NAME="ENVNODE",  # the environment wins over .env
        WISCAT_ADMIN_TOKEN="t0k3n-secret",
        WISCAT_PROXY_URL="http://harvester:pw-secret@gate.internal:3128",
        WISCAT_DATABASE_URL="postgresql://wiscat:db-secret@127.0.0.1:1/wiscat",
        WISCAT_PROVIDER_PORT="8190",
    )
    process = await asyncio.create_subprocess_exec(
        WISCAT,
        "settings",
        "--json",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err
    rows = {row["setting"]: (row["from"], row["value"]) for row in json.loads(out)}
    assert rows["WISCAT_GISC_NAME"] == ("environment", "ENVNODE")
    assert rows["WISCAT_PAGE_SIZE"] == (".env", "250")
    assert rows["WISCAT_BASE_URL"] == ("derived", "http://127.0.0.1:8190/oai")
    assert rows["WISCAT_SETTLE_SECONDS"] == ("default", "0.5")
    assert rows["WISCAT_ADMIN_TOKEN"] == ("environment", "(set)")
    assert rows["WISCAT_TOKEN_SECRET"] == ("default", "unset")
    assert rows["WISCAT_PROXY_URL"] == ("environment", "http://harvester:***@gate.internal:3128")
    assert rows["WISCAT_DATABASE_URL"][1] == "postgresql://wiscat:***@127.0.0.1:1/wiscat"
    assert rows["WISCAT_NO_PROXY"] == ("default", "(empty)")
    for secret in SECRETS:
        assert secret not in (out + err).decode()
