"""Two nodes in one test: a source node's provider on loopback and a sink node's harvester."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tests.support.pg import clone_template, drop_database
from tests.support.servers import RunningProvider, running_provider
from wiscat.harvester.context import HarvestContext, RunReport
from wiscat.harvester.harvest import harvest_link
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.linkspec import build_link
from wiscat.shared.model import Link, NewLink
from wiscat.shared.settings import Settings

SOURCE_SET = "WIS-GISC-TEST"


@dataclass
class Pair:
    source: Pool
    provider: RunningProvider
    sink: Pool
    ctx: HarvestContext


def sink_settings(url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "gisc_name": "SINK",
        "database_url": url,
        "settle_seconds": 0,
        "harvest_max_retries": 1,
        "mass_delete_min": 0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


@contextlib.asynccontextmanager
async def open_pair(db: Pool, database_url: str, template_ready: str) -> AsyncIterator[Pair]:
    sink_url = await clone_template(template_ready)
    try:
        async with (
            running_provider(database_url) as provider,
            harvest_context(sink_settings(sink_url), sink_url) as ctx,
        ):
            yield Pair(db, provider, ctx.pool, ctx)
    finally:
        await drop_database(template_ready, sink_url)


async def link_to(ctx: HarvestContext, url: str, name: str = "test", **kwargs: object) -> Link:
    """A link of ``ctx``'s node to the source's set at ``url``, stored with its local set."""
    new = build_link(
        name=name,
        url=url,
        remote_set=SOURCE_SET,
        into=kwargs.pop("into", None),
        own_set=ctx.settings.own_set,
        **kwargs,  # type: ignore[arg-type]
    )
    await store.ensure_set(ctx.pool, new.local_set, new.local_set, "remote")
    return await link_store.add_link(ctx.pool, new)


async def add_link(pair: Pair, name: str = "test", **kwargs: object) -> Link:
    return await link_to(pair.ctx, pair.provider.oai, name, **kwargs)


async def content(pool: Pool, set_spec: str) -> dict[str, tuple[bytes | None, bool]]:
    rows = await pool.fetch(
        "select r.identifier, r.content_hash, m.deleted from set_members m "
        "join records r using (identifier) where m.set_spec = $1",
        set_spec,
    )
    return {
        r["identifier"]: (None if r["deleted"] else r["content_hash"], r["deleted"]) for r in rows
    }


async def run(pair: Pair, name: str = "test", **kwargs: Any) -> RunReport:
    link = await link_store.get_link(pair.sink, name)
    assert link is not None
    return await harvest_link(pair.ctx, link, window=False, **kwargs)  # type: ignore[arg-type]


def new_link(name: str, url: str) -> NewLink:
    """A link of the sink to ``url`` for the source's set (a registry link by its name)."""
    from wiscat.shared.linkspec import REGISTRY_LINK_PREFIX, build_link

    return build_link(
        name=name,
        url=url,
        remote_set=SOURCE_SET,
        into=None,
        own_set="WIS-GISC-SINK",
        window_slices=0,
        by_registry=name.startswith(REGISTRY_LINK_PREFIX),
    )
