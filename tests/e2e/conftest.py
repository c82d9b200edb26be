"""Fixtures of the end-to-end tests: real nodes as processes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.e2e.mesh import Mesh
from tests.e2e.nodes import Node, NodeFactory
from tests.pg import clone_template, drop_database


@pytest.fixture
async def make_node(template_ready: str) -> AsyncIterator[NodeFactory]:
    """Make nodes by name, each on a fresh database; every one is stopped and dropped after."""
    made: list[Node] = []

    async def make(name: str) -> Node:
        node = Node(name, await clone_template(template_ready))
        made.append(node)
        return node

    try:
        yield make
    finally:
        for node in made:
            await node.stop()
        for node in made:
            await drop_database(template_ready, node.database_url)


@pytest.fixture
async def mesh(template_ready: str) -> AsyncIterator[Mesh]:
    async with aiohttp.ClientSession() as http:
        built = Mesh(template_ready, http)
        try:
            yield built
        finally:
            await built.close()
