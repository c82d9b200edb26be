"""The provider under test: a real one on loopback over the test's database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.provider_oai.answers import OWN
from tests.support import factories
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db.pool import Pool


@pytest.fixture
async def provider(db: Pool, database_url: str) -> AsyncIterator[RunningProvider]:
    await factories.load_records(db, OWN, range(250))
    async with running_provider(database_url) as running:
        yield running
