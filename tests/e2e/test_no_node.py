"""A one-shot command never makes a node: run from a folder that holds none (no
``WISCAT_DATA_DIR/postgres``, no ``WISCAT_DATABASE_URL``), it says where it looked and how to
point at the node, and leaves the folder as it was. Only ``run``, ``provider``, ``harvester``,
``migrate`` and ``restore`` make a new embedded database; the commands that need none work
anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.nodes import run_wiscat

# every command that works on the database, as an operator would type it
ONE_SHOT = [
    ["link", "list"],
    ["link", "runs"],
    ["link", "runs", "tokyo"],
    ["link", "quarantine"],
    ["link", "add", "tokyo", "--url", "http://127.0.0.1:9/oai", "--set", "WIS-GISC-TOKYO"],
    ["link", "set", "tokyo", "--every", "1h"],
    ["link", "remove", "tokyo"],
    ["link", "test", "tokyo"],
    ["harvest", "tokyo"],
    ["ingest", "."],
    ["delete", "urn:x-wmo:md:int.wmo.wis::xx.synop.0"],
    ["checks", "list"],
    ["checks", "reports"],
    ["checks", "remove", "daily"],
    ["registry", "peers"],
    ["backup", "node.dump"],
    ["wis2", "render", "urn:x-wmo:md:int.wmo.wis::xx.synop.0"],
]


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(settings)
    return env


async def _wiscat(folder: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    return await run_wiscat(env, *args, cwd=folder, timeout=60)


def _no_node(folder: Path) -> str:
    return (
        f"wiscat: no node database in {folder} (WISCAT_DATA_DIR); run from the node's folder, "
        "or set WISCAT_DATA_DIR or WISCAT_DATABASE_URL\n"
    )


async def test_link_list_from_an_empty_folder_makes_no_node(tmp_path: Path) -> None:
    code, out, err = await _wiscat(tmp_path, _env(), "link", "list")
    assert (code, out, err) == (2, "", _no_node(tmp_path.resolve() / "var"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", ONE_SHOT, ids=[" ".join(args[:2]) for args in ONE_SHOT])
async def test_no_one_shot_command_makes_a_node(tmp_path: Path, args: list[str]) -> None:
    # a relative WISCAT_DATA_DIR is named as the absolute folder it means here
    code, out, err = await _wiscat(tmp_path, _env(WISCAT_DATA_DIR="nodes/local"), *args)
    assert (code, out, err) == (2, "", _no_node(tmp_path.resolve() / "nodes" / "local"))
    assert list(tmp_path.iterdir()) == []


async def test_commands_that_need_no_database_work_anywhere(tmp_path: Path) -> None:
    code, out, _ = await _wiscat(tmp_path, _env(), "--version")
    assert code == 0 and out.startswith("wiscat ")
    code, out, _ = await _wiscat(tmp_path, _env(), "link", "--help")
    assert code == 0 and "manage harvest links" in out.lower()
    code, out, err = await _wiscat(tmp_path, _env(), "settings")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert ["WISCAT_DATA_DIR", "default", str(tmp_path.resolve() / "var")] in rows
    code, out, err = await _wiscat(tmp_path, _env(), "generate", "2", "samples")
    assert code == 0, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["samples"]  # no var/
