"""Each peer's stream of change hints: who holds it and what it last did (the rule is in
``sql/hints.sql``; the subscriptions themselves are :mod:`wiscat.harvester.hints`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import asyncpg

from wiscat.shared.db.links import Executor
from wiscat.shared.db.queries import load
from wiscat.shared.model import fields_as_json
from wiscat.shared.urls import safe_url

_SQL = load("hints.sql")


@dataclass(frozen=True, slots=True)
class HintStream:
    """A peer's stream as its holder last saw it; ``url`` None: the peer advertises none."""

    peer: str
    url: str | None
    holder: str | None
    connected_since: datetime | None
    last_hint_at: datetime | None
    last_event_id: str | None
    last_error: str | None
    last_error_at: datetime | None
    updated_at: datetime

    def as_json(self) -> dict[str, Any]:
        """The stream as JSON, URLs' passwords shown as ``***``."""
        shown = {"peer": safe_url(self.peer), "url": safe_url(self.url) if self.url else None}
        return {**fields_as_json(self), **shown}


_FIELDS = [f.name for f in fields(HintStream)]


def _stream(row: asyncpg.Record) -> HintStream:
    return HintStream(**{name: row[name] for name in _FIELDS})


async def hold_peer(conn: asyncpg.Connection, peer: str) -> bool:
    """Take ``peer``'s stream on ``conn``'s session if nobody holds it: whether it holds it."""
    return bool(await conn.fetchval(_SQL["hold_peer"], peer))


async def advertised(db: Executor, peer: str, url: str | None, holder: str) -> None:
    """``peer``'s Identify advertises the stream ``url`` (None: none)."""
    await db.execute(_SQL["advertised"], peer, url, holder)


async def connected(db: Executor, peer: str, holder: str) -> None:
    """``peer``'s stream is connected, held by ``holder``."""
    await db.execute(_SQL["connected"], peer, holder)


async def hinted(db: Executor, peer: str, event_id: str | None) -> None:
    """A hint came on ``peer``'s stream, with id ``event_id`` (None: none)."""
    await db.execute(_SQL["hinted"], peer, event_id)


async def disconnected(db: Executor, peer: str, reason: str) -> None:
    """``peer``'s stream ended, or could not be opened, for ``reason``."""
    await db.execute(_SQL["disconnected"], peer, reason)


async def let_go(db: Executor, peer: str, holder: str) -> None:
    """``holder`` no longer holds ``peer``'s stream."""
    await db.execute(_SQL["let_go"], peer, holder)


async def last_event_id(db: Executor, peer: str) -> str | None:
    """The id of the last hint received from ``peer``, to resume from; None: none yet."""
    value: str | None = await db.fetchval(_SQL["last_event_id"], peer)
    return value


async def all_streams(db: Executor) -> dict[str, HintStream]:
    """Every peer's stream, by peer (base URL)."""
    return {row["peer"]: _stream(row) for row in await db.fetch(_SQL["all_streams"])}


async def stream_of(db: Executor, peer: str) -> HintStream | None:
    """``peer``'s stream, or None if no worker has looked at it yet."""
    row = await db.fetchrow(_SQL["stream_of"], peer)
    return _stream(row) if row else None
