"""The provider's lifespan: what it makes at start-up and closes at shutdown (the database
pools, the resumptionToken codec, the state the routes stand on, the registry node, the purge
loop), and the checks and warnings of start-up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI

from wiscat.provider import registry
from wiscat.provider.hints import Hints
from wiscat.provider.metrics import ProviderMetrics
from wiscat.provider.state import ProviderState
from wiscat.shared.db import checks as check_store
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db import refusals as refusal_store
from wiscat.shared.db.errors import kind_of
from wiscat.shared.db.migrate import check_current
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.ingest import ensure_own_set
from wiscat.shared.oaipmh.tokens import RetiredSecret, TokenCodec
from wiscat.shared.settings import Settings
from wiscat.shared.version import VERSION

log = logging.getLogger("wiscat.provider")

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]

PURGE_EVERY = 3600.0

# What .env.example sets, to be replaced: a node that keeps one is open to whoever read it
PLACEHOLDER_SECRETS = frozenset({"change-me", "change-me-too", "changeme"})


def warn_placeholder_secrets(settings: Settings) -> None:
    """Warn while the admin token or the token secret is still the example's placeholder."""
    for name, secret in (
        ("WISCAT_ADMIN_TOKEN", settings.admin_token),
        ("WISCAT_TOKEN_SECRET", settings.token_secret),
    ):
        if secret is not None and secret.get_secret_value().strip().lower() in PLACEHOLDER_SECRETS:
            log.warning(
                "%s is the placeholder of .env.example: set a long random one "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))')",
                name,
            )


async def _purge_loop(state: ProviderState) -> None:
    """Drop what has outlived its retention period: tombstones (WIS guidelines: kept three months),
    and the history (harvest runs, quarantined records, check reports), which would otherwise
    grow without end."""
    settings = state.settings
    tombstones = timedelta(days=settings.deleted_retention_days)
    history = timedelta(days=settings.history_retention_days)
    # hourly; a retention shorter than a few hours (a test, a demo) is checked more often
    shortest = min(r for r in (tombstones, history) if r > timedelta(0))
    every = min(PURGE_EVERY, max(shortest.total_seconds() / 4, 1.0))
    while True:
        try:
            if tombstones:
                purged = await store.purge_tombstones(state.pool, tombstones)
                if purged:
                    state.metrics.tombstones_purged.inc(purged)
                    log.info("purged %d tombstones older than %s", purged, tombstones)
            if history:
                runs, quarantined = await link_store.purge_history(state.pool, history)
                reports = await check_store.purge_reports(state.pool, history)
                refused = await refusal_store.purge_refusals(state.pool, history)
                if runs or quarantined or reports or refused:
                    log.info(
                        "purged %d harvest runs, %d quarantined records, %d refused records "
                        "and %d check reports older than %s",
                        runs,
                        quarantined,
                        refused,
                        reports,
                        history,
                    )
        except Exception as exc:  # a database outage: logged, tried again next round
            log.warning("purge failed: %s: %s", kind_of(exc), exc)
        await asyncio.sleep(every)


def token_codec(settings: Settings, secret: bytes) -> TokenCodec:
    """The resumptionToken codec: signing with ``secret``, taking tokens of the previous secret
    until the end of its grace period (a rotation), expiring them if a lifetime is set."""
    hours = settings.token_lifetime_hours
    retired = []
    if settings.token_secret_previous and settings.token_secret_previous_until:
        until = settings.token_secret_previous_until
        if until <= datetime.now(UTC):
            log.warning(
                "the grace period of WISCAT_TOKEN_SECRET_PREVIOUS ended at %s: its tokens are "
                "refused; remove it and WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL",
                until.isoformat(),
            )
        else:
            log.info("tokens of WISCAT_TOKEN_SECRET_PREVIOUS are taken until %s", until.isoformat())
        retired.append(
            RetiredSecret(
                settings.token_secret_previous.get_secret_value().encode(),
                settings.token_secret_previous_until,
            )
        )
    return TokenCodec(
        secret, lifetime=timedelta(hours=hours) if hours > 0 else None, retired=retired
    )


def lifespan(settings: Settings, database_url: str) -> Lifespan:
    """The provider's lifespan: ``database_url``'s pool (and the standby's), the state the routes
    stand on, the registry node and the purge loop, made at start-up and closed at shutdown."""

    @contextlib.asynccontextmanager
    async def provider_lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(
            database_url, max_size=10, statement_cache=settings.database_statement_cache
        )
        read_pool: Pool | None = None
        try:
            if settings.database_read_url:
                read_pool = await create_pool(
                    settings.database_read_url,
                    max_size=10,
                    statement_cache=settings.database_statement_cache,
                )
            async with pool.acquire() as conn:
                await check_current(conn)
            await ensure_own_set(pool, settings.own_set)
            secret = (
                settings.token_secret.get_secret_value().encode()
                if settings.token_secret
                else await store.node_secret(pool, "resumption_token")
            )
            codec = token_codec(settings, secret)
            state = ProviderState(settings, pool, codec, ProviderMetrics(), read_pool)
            app.state.provider = state
            await registry.start(app, state)
            if settings.hints:
                state.hints = Hints(settings, state.lists, database_url, state.metrics)
                await state.hints.start()
            purge = (
                asyncio.create_task(_purge_loop(state))
                if settings.deleted_retention_days > 0 or settings.history_retention_days > 0
                else None
            )
            log.info(
                "provider ready: %s (own set %s, wiscat %s)",
                settings.base_url,
                settings.own_set,
                VERSION,
            )
            warn_placeholder_secrets(settings)
            yield
            await registry.stop(app)
            if state.hints is not None:
                await state.hints.close()
            await state.lists.close()
            if purge:
                purge.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await purge
        finally:
            if read_pool is not None:
                await read_pool.close()
            await pool.close()

    return provider_lifespan
