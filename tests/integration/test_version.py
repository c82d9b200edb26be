"""Which wiscat a node runs, as an operator and a fleet's monitoring see it: ``wiscat
--version``, the ``wiscat_build_info`` metric of the provider and of the harvester, and the
User-Agent its harvests send (peers' logs name the version). All read from the installed
package, whose version pyproject.toml sets."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import aiohttp
from aiohttp import web

from tests.e2e.nodes import WISCAT
from tests.support.harvest_pair import Pair
from tests.support.servers import running_provider, serving, serving_app
from wiscat.harvester.client import OAIClient
from wiscat.harvester.service import client_settings, health_app
from wiscat.shared.settings import Settings

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
VERSION = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
BUILD_INFO = f'wiscat_build_info{{version="{VERSION}"}} 1.0'


async def test_wiscat_version_names_the_installed_version() -> None:
    process = await asyncio.create_subprocess_exec(
        WISCAT, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err
    assert out.decode().strip() == f"wiscat {VERSION}"


async def scrape(root: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(root + "/metrics") as response:
        assert response.status == 200
        return await response.text()


async def test_both_services_export_their_version(database_url: str, pair: Pair) -> None:
    async with running_provider(database_url) as provider:
        assert BUILD_INFO in (await scrape(provider.root)).splitlines()
    async with serving_app(health_app(pair.ctx)) as root:
        assert BUILD_INFO in (await scrape(root)).splitlines()


async def test_harvests_tell_peers_their_version() -> None:
    """H23: harvest requests name wiscat and its version in User-Agent."""
    agents: list[str] = []

    async def pages(request: web.Request) -> bytes:
        agents.append(request.headers.get("User-Agent", ""))
        return b""

    config = client_settings(Settings(_env_file=None))  # type: ignore[call-arg]
    async with serving(b"", pages=pages) as url, OAIClient.session(config) as session:
        await OAIClient(session, config).fetch(url, {"verb": "ListSets"})
    assert agents == [f"wiscat-harvester/{VERSION} (OAI-PMH 2.0)"]
