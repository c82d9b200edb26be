"""Fixtures of the end-to-end tests: real nodes as processes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.e2e.mesh import Mesh
from tests.e2e.nodes import Node, NodeFactory
from tests.support.pg import clone_template, drop_database


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


@contextlib.asynccontextmanager
async def built_mesh(template_url: str, settle: float) -> AsyncIterator[Mesh]:
    async with aiohttp.ClientSession() as http:
        built = Mesh(template_url, http, settle=settle)
        try:
            yield built
        finally:
            await built.close()


@pytest.fixture
async def mesh(template_ready: str) -> AsyncIterator[Mesh]:
    """Nodes that list a write at once (no settle window): quick rounds."""
    async with built_mesh(template_ready, 0.0) as built:
        yield built


@pytest.fixture
async def settled_mesh(template_ready: str) -> AsyncIterator[Mesh]:
    """Nodes with a settle window of 1 s, so that, as in production, a list shows a second only
    once all of it is visible (invariant 2), Identify says so, and a quiet incremental run
    transfers nothing; rounds wait for the last write to be listable."""
    async with built_mesh(template_ready, 1.0) as built:
        yield built
