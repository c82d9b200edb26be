"""``wiscat settings``: every setting as this node reads it, and where it comes from.

An operator who wonders whether the ``.env`` file was read, which base URL the node announces,
or whether a variable reached a container, asks the node itself: the value each ``WISCAT_``
setting has (derived ones, such as an unset ``BASE_URL``, as derived) and its source: the
environment, ``.env``, or the default. Secrets are never shown: a token is ``(set)``, a URL's
password ``***``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic import SecretStr

from wiscat.cli.arguments import command
from wiscat.cli.output import table
from wiscat.shared.settings import Settings
from wiscat.shared.urls import safe_url

ENV_FILE = Path(".env")  # where Settings reads it: the working folder


def add_parsers(sub: Any) -> None:
    p = command(
        sub,
        "settings",
        help="every WISCAT_ setting as this node reads it, and where it comes from "
        "(environment, .env, default); secrets not shown",
        handler=cmd_settings,
        examples=[
            "wiscat settings",
            "wiscat settings --json | jq '.[] | select(.from != \"default\")'",
        ],
        exits={0: "shown", 2: "a setting is bad (each named, with its reason)"},
    )
    p.add_argument("--json", action="store_true", help="the settings as a JSON list")


def _shown(name: str, value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        secret = value.get_secret_value()
        if name == "proxy_url":  # its host is worth seeing; its password never
            return safe_url(secret)
        return "(set)" if secret else "(empty)"
    if name in ("database_url", "database_session_url", "database_read_url"):
        return safe_url(str(value))
    if isinstance(value, Path):  # where it is, whichever folder the command was run from
        return str(value.resolve())
    if isinstance(value, tuple):  # shown as it is set: 80,443,8080,8443
        return ",".join(map(str, value))
    return str(value) if value != "" else "(empty)"


def settings_rows(
    settings: Settings, environ: dict[str, str], env_file: Path
) -> list[dict[str, str]]:
    """One row a setting: its variable, the value shown and where it came from."""
    given = {key.upper() for key in environ}
    in_file = {key.upper() for key in dotenv_values(env_file)} if env_file.is_file() else set()
    rows = []
    for name in Settings.model_fields:
        variable = f"WISCAT_{name.upper()}"
        source = (
            "environment" if variable in given else ".env" if variable in in_file else "default"
        )
        value = getattr(settings, name)
        if name == "base_url" and not settings.base_url_set:
            source = "derived"
        rows.append({"setting": variable, "value": _shown(name, value), "from": source})
    return rows


async def cmd_settings(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat settings``: every WISCAT_ setting as this node reads it, and where it comes from
    (environment, .env, default); secrets not shown."""
    rows = settings_rows(settings, dict(os.environ), ENV_FILE)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for line in table(
        ["SETTING", "FROM", "VALUE"], [[r["setting"], r["from"], r["value"]] for r in rows]
    ):
        print(line)
    return 0
