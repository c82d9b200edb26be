"""The provider's state, built once in the app's lifespan, and the routes' typed dependency on it.

A route takes ``state: State`` (FastAPI resolves it from the app), never the app's attributes:
what a route depends on is then in its signature, and a type checker sees it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request

from wiscat.provider.hints import Hints
from wiscat.provider.lists import Lists
from wiscat.provider.metrics import ProviderMetrics
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh.tokens import TokenCodec
from wiscat.shared.settings import Settings


@dataclass
class ProviderState:
    """What the routes need: the settings, the database (and the standby lists are read from),
    the token codec, the metrics, and the lists in progress."""

    settings: Settings
    pool: Pool
    codec: TokenCodec
    metrics: ProviderMetrics
    # where lists and GetRecord read: a hot standby's pool (DATABASE_READ_URL), else ``pool``
    read_pool: Pool | None = None
    lists: Lists = dataclasses.field(init=False)
    # the change hints (None: WISCAT_HINTS=false), set by the lifespan
    hints: Hints | None = None

    def __post_init__(self) -> None:
        self.lists = Lists(self.settings, self.pool, self.metrics, self.read_pool)
        self.read_pool = self.lists.read_pool

    @property
    def admin_on(self) -> bool:
        """The admin API answers: WISCAT_ADMIN_TOKEN is set, and not empty."""
        token = self.settings.admin_token
        return token is not None and bool(token.get_secret_value())


def provider_state(request: Request) -> ProviderState:
    """The state of the app serving ``request``."""
    return cast(ProviderState, request.app.state.provider)


State = Annotated[ProviderState, Depends(provider_state)]
