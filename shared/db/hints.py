"""Each peer's stream of change hints: who holds it and what it last did (the rule is in
``sql/hints.sql``; the subscriptions themselves are :mod:`wiscat.harvester.hints`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import asyncpg

from wiscat.shared.db.errors import DatabaseError
from wiscat.shared.db.links import Executor
from wiscat.shared.db.pool import connect
from wiscat.shared.db.queries import load
from wiscat.shared.model import Link, fields_as_json
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


class StreamSession:
    """A database session of its own, on which a worker holds peers' streams: PostgreSQL frees
    them when the session ends, however it ends (a worker killed, its machine gone)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: asyncpg.Connection | None = None

    async def hold(self, peer: str) -> bool:
        """Take ``peer``'s stream if nobody holds it (opening the session where it is not
        open, or was lost): whether this session holds it."""
        if self.conn is None or self.conn.is_closed():
            self.conn = await connect(self.url)
        return bool(await self.conn.fetchval(_SQL["hold_peer"], peer))

    async def alive(self) -> None:
        """Raise when the session is lost (its streams with it)."""
        if self.conn is None:
            raise DatabaseError("the stream's session is not open")
        await self.conn.fetchval("select 1")

    async def close(self) -> None:
        """End the session, and with it every stream it holds."""
        if self.conn is not None and not self.conn.is_closed():
            try:
                await self.conn.close(timeout=5)
            except Exception:  # a connection that cannot close cleanly is dropped
                self.conn.terminate()


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


def hint_state(hints_on: bool, link: tuple[bool, bool], stream: tuple[bool, bool, bool]) -> str:
    """A link's subscription in a word or three: ``hints_on`` (WISCAT_HINTS), ``link`` (whether
    it takes hints, whether it is enabled), ``stream`` (whether a worker looked at its peer,
    whether the peer advertises a stream, whether it is connected)."""
    takes, enabled = link
    known, advertised, up = stream
    if not hints_on:
        return "off"
    if not takes:
        return "off for this link"
    if not enabled:
        return "link disabled"
    if not known:
        return "not yet looked at"
    if not advertised:
        return "not advertised"
    return "connected" if up else "down"


def subscription(link: Link, stream: HintStream | None, hints_on: bool) -> dict[str, Any]:
    """Whether ``link`` is subscribed to its peer's hints, for the operator: ``state`` (one of
    ``connected``, ``down``, ``not advertised``, ``not yet looked at``, ``off`` with
    WISCAT_HINTS=false, ``off for this link``, ``link disabled``) and, where its peer has a
    stream, that stream's URL, connected since, last hint and last error with its time."""
    known = stream is not None
    advertised = stream is not None and stream.url is not None
    up = stream is not None and stream.connected_since is not None
    state = hint_state(hints_on, (link.hints, link.enabled), (known, advertised, up))
    shown: dict[str, Any] = {"state": state}
    if stream is not None and stream.url is not None:
        as_json = stream.as_json()
        for name in ("url", "connected_since", "last_hint_at", "last_error", "last_error_at"):
            shown[name] = as_json[name]
    return shown
