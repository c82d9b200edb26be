"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.harvest_pair import Pair, open_pair
from wiscat.shared.db.pool import Pool


@pytest.fixture
async def pair(db: Pool, database_url: str, template_ready: str) -> AsyncIterator[Pair]:
    """A source node's provider on loopback and a sink node's harvest context."""
    async with open_pair(db, database_url, template_ready) as opened:
        yield opened
