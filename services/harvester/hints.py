"""Harvest on a hint: each peer's stream of change hints, subscribed to (docs/links.md).

A peer whose Identify advertises a stream (``<wiscat:changes url="..."/>``) and that has at least
one enabled link taking hints gets one stream, carrying every linked remote set of that peer
(no ``set`` at all when a link harvests the whole catalogue). One harvester worker holds a peer's
stream at a time: the one whose own database session holds the peer's advisory lock
(``sql/hints.sql``); a worker that dies frees it with its session.

A hint is a doorbell, never data: a change event naming a linked set (or any set), a catch-up, and
every successful connection mark the link's normal incremental run as pending
(:func:`wiscat.shared.db.links.hint`) and wake the scheduler. The run then harvests by OAI-PMH
exactly as a scheduled one; its schedule, its high-water mark and the rolling full re-harvest
are left as they are, so nothing is lost when hints are.

The stream is not an OAI-PMH answer: no total timeout, a read timeout of about three heartbeats,
a cap per event, and the same outbound address rules as the link's harvests. Reconnection waits
a full-jitter backoff of 1 to 30 s, reset once a stream has stayed up a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

import aiohttp

from wiscat.harvester.context import HarvestContext
from wiscat.harvester.errors import HarvestError
from wiscat.harvester.events import Event, EventReader, EventTooLong, read_change
from wiscat.harvester.harvest import IDENTIFY_MAX_AGE_SECONDS
from wiscat.harvester.transport import global_addresses_only, guarded, retry_after
from wiscat.shared.db import hints as stream_store
from wiscat.shared.db import links as link_store
from wiscat.shared.linkspec import REGISTRY_LINK_PREFIX
from wiscat.shared.model import Link
from wiscat.shared.tasks import wait_for_event
from wiscat.shared.text import clipped
from wiscat.shared.urls import safe_url

log = logging.getLogger("wiscat.harvester.hints")


@dataclass(frozen=True)
class Peer:
    """A peer to subscribe to: its base URL, its links taking hints (name and remote set), and
    whether its connections are held to global addresses (a link the registry added)."""

    base_url: str
    links: tuple[tuple[str, str | None], ...]
    guarded: bool

    @property
    def sets(self) -> tuple[str, ...] | None:
        """The sets the stream asks for; None: every set (a link harvests the whole peer)."""
        if any(remote is None for _, remote in self.links):
            return None
        return tuple(sorted({remote for _, remote in self.links if remote is not None}))


def peers_of(links: list[Link], allow_private: bool) -> dict[str, Peer]:
    """The peers to subscribe to, by base URL: those of the enabled links taking hints."""
    grouped: dict[str, list[Link]] = {}
    for link in links:
        if link.enabled and link.hints:
            grouped.setdefault(link.base_url, []).append(link)
    return {
        base: Peer(
            base,
            tuple((link.name, link.remote_set) for link in group),
            not allow_private and any(link.name.startswith(REGISTRY_LINK_PREFIX) for link in group),
        )
        for base, group in grouped.items()
    }


@dataclass(frozen=True)
class Ended:
    """Why a stream ended (stored for the operator), and how long the peer asked to wait."""

    reason: str
    wait: float = 0.0
    connected: bool = False


@dataclass(frozen=True)
class StreamLimits:
    """The stream's guards and pace (tests make them short)."""

    read_timeout: float = 45.0  # about three heartbeats
    connect_timeout: float = 15.0
    event_cap: int = 4096
    backoff_first: float = 1.0
    backoff_cap: float = 30.0
    healthy_after: float = 30.0  # a stream up this long resets the backoff
    # how long after a peer that advertises no stream, or answers 400 or 404, its Identify is
    # read again
    recheck: float = IDENTIFY_MAX_AGE_SECONDS
    lock_check: float = 5.0  # how often the holder checks its session still holds the stream


def backoff(attempt: int, limits: StreamLimits) -> float:
    """Full jitter between the first wait and a doubling ceiling, at most the cap: a provider
    restart is not met by every peer at the same instant."""
    ceiling = min(limits.backoff_cap, limits.backoff_first * 2 ** (attempt + 1))
    return random.uniform(limits.backoff_first, ceiling)


class Hints:
    """Every peer's subscription, followed from the links at each poll (a link added, removed,
    disabled or switched off hints changes them at once)."""

    def __init__(
        self, ctx: HarvestContext, wake: asyncio.Event, limits: StreamLimits | None = None
    ) -> None:
        self.ctx = ctx
        self.wake = wake
        self.limits = limits or StreamLimits()
        self.subscriptions: dict[str, tuple[Subscription, asyncio.Task[None]]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    links = await link_store.all_links(self.ctx.pool)
                except Exception as exc:  # the database may be restarting: the next poll
                    log.warning("hints: cannot read the links: %s", exc)
                else:
                    settings = self.ctx.settings
                    on = settings.hints  # WISCAT_HINTS=false: every link on its schedule
                    self.follow(peers_of(links, settings.allow_private_fetch) if on else {})
                await wait_for_event(stop, self.ctx.settings.harvest_poll_seconds)
        finally:
            tasks = [task for _, task in self.subscriptions.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.subscriptions.clear()

    def follow(self, peers: dict[str, Peer]) -> None:
        """Start, change and end subscriptions to match ``peers``."""
        for base, (subscription, task) in list(self.subscriptions.items()):
            peer = peers.get(base)
            same = peer is not None and (peer.sets, peer.guarded) == (
                subscription.peer.sets,
                subscription.peer.guarded,
            )
            if same and not task.done():
                subscription.peer = peer  # type: ignore[assignment]  # same is not None
                continue
            task.cancel()  # other sets: a new stream asks for them
            del self.subscriptions[base]
        for base, peer in peers.items():
            if base not in self.subscriptions:
                subscription = Subscription(self.ctx, peer, self.wake, self.limits)
                task = asyncio.create_task(subscription.hold(), name=f"hints {safe_url(base)}")
                self.subscriptions[base] = (subscription, task)


class Subscription:
    """One peer's stream: held while this worker's session holds the peer's lock."""

    def __init__(
        self, ctx: HarvestContext, peer: Peer, wake: asyncio.Event, limits: StreamLimits
    ) -> None:
        self.ctx = ctx
        self.peer = peer
        self.wake = wake
        self.limits = limits
        self.shown = safe_url(peer.base_url)
        self.last_id: str | None = None
        self.held = False  # whether this worker holds the peer's stream now
        self.reader = EventReader(limits.event_cap)  # the connection's, once connected

    async def hold(self) -> None:
        """Take the peer's stream when no other worker holds it, and follow it while held."""
        session = stream_store.StreamSession(self.ctx.database_url)
        poll = self.ctx.settings.harvest_poll_seconds
        try:
            while True:
                try:
                    self.held = await session.hold(self.peer.base_url)
                except Exception as exc:  # the database may be restarting
                    log.warning("hints of %s: cannot take the stream: %s", self.shown, exc)
                    self.held = False
                if not self.held:
                    await asyncio.sleep(poll)
                    continue
                await self._while_held(session)
                self.held = False
        finally:
            self.held = False
            with contextlib.suppress(Exception):
                await stream_store.let_go(self.ctx.pool, self.peer.base_url, self.ctx.worker)
            await session.close()

    async def _while_held(self, session: stream_store.StreamSession) -> None:
        """Follow the stream until the session that holds it is lost."""
        following = asyncio.create_task(self._follow())
        try:
            while not following.done():
                await asyncio.wait({following}, timeout=self.limits.lock_check)
                if following.done():
                    break
                try:
                    await asyncio.wait_for(session.alive(), self.limits.lock_check)
                except Exception as exc:
                    log.warning("hints of %s: lost the stream's session: %s", self.shown, exc)
                    return
            following.result()  # _follow returns only by raising
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following

    async def _follow(self) -> None:
        """Read the peer's Identify, open its stream, read it, reconnect: until cancelled."""
        pool = self.ctx.pool
        with contextlib.suppress(Exception):
            self.last_id = await stream_store.last_event_id(pool, self.peer.base_url)
        attempt = 0
        with global_addresses_only(self.peer.guarded):
            while True:
                started = time.monotonic()
                ended = await self._once()
                if ended is None:  # the peer advertises no stream: polled as before
                    await asyncio.sleep(self.limits.recheck)
                    continue
                log.warning("hints of %s: %s", self.shown, ended.reason)
                with contextlib.suppress(Exception):
                    await stream_store.disconnected(pool, self.peer.base_url, ended.reason)
                if ended.connected and time.monotonic() - started >= self.limits.healthy_after:
                    attempt = 0
                await asyncio.sleep(max(ended.wait, backoff(attempt, self.limits)))
                attempt += 1

    async def _changes_url(self) -> str | None:
        """The stream the peer's Identify advertises (read at most hourly, as its runs do)."""
        known = self.ctx.identified.get(self.peer.base_url)
        now = time.monotonic()
        if known is None or now - known[0] > IDENTIFY_MAX_AGE_SECONDS:
            known = (now, await self.ctx.client.identify(self.peer.base_url))
            self.ctx.identified[self.peer.base_url] = known
        return known[1].changes_url

    async def _once(self) -> Ended | None:
        """One connection to the stream; None when the peer advertises none."""
        base = self.peer.base_url
        try:
            url = await self._changes_url()
        except HarvestError as exc:
            return Ended(f"cannot read the peer's Identify: {exc}")
        except Exception as exc:
            return Ended(f"cannot read the peer's Identify: {type(exc).__name__}: {exc}")
        try:
            await stream_store.advertised(self.ctx.pool, base, url, self.ctx.worker)
        except Exception as exc:
            return Ended(f"cannot record the stream: {exc}")
        if url is None:
            return None
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https") or (base[:6].lower() == "https:" and scheme != "https"):
            return Ended(
                f"the peer advertises {safe_url(url)!r} as its stream: not an https URL of a peer "
                "harvested over https, nor an http URL",
                wait=self.limits.recheck,
            )
        try:
            return await self._read(url)
        except EventTooLong as exc:
            return Ended(f"{exc}: the stream was closed", connected=True)
        except HarvestError as exc:  # a connection refused by the address rules, say
            return Ended(str(exc))
        except Exception as exc:  # the database, while a hint was recorded
            return Ended(f"{type(exc).__name__}: {exc}", connected=True)

    async def _read(self, url: str) -> Ended:
        limits = self.limits
        sets = self.peer.sets
        params = [("set", spec) for spec in sets] if sets else []
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        proxy = None if self.ctx.settings.proxy is None or guarded() else self.ctx.settings.proxy
        proxy_url = proxy.for_url(url) if proxy else None
        if proxy and proxy_url and url[:5].lower() == "http:":
            headers.update(proxy.headers)  # as a harvest's request carries them (client.fetch)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=limits.connect_timeout, sock_read=limits.read_timeout
        )
        shown = safe_url(url)
        connected = False
        try:
            async with self.ctx.client.http.get(
                url,
                params=params,
                headers=headers,
                timeout=timeout,
                proxy=proxy_url,
                allow_redirects=False,
            ) as response:
                refused = self._refused(response, shown)
                if refused is not None:
                    return refused
                connected = True
                self.ctx.metrics.hint_streams.inc()
                try:
                    await stream_store.connected(self.ctx.pool, self.peer.base_url, self.ctx.worker)
                    log.info("hints of %s: connected to %s", self.shown, shown)
                    # what changed while no stream was connected: the links' runs catch up
                    await self._ring(None, "connected", None)
                    return await self._events(response)
                finally:
                    self.ctx.metrics.hint_streams.dec()
        except TimeoutError:
            if not connected:
                return Ended(f"no answer from {shown} in {limits.connect_timeout:g} s")
            return Ended(
                f"nothing received for {limits.read_timeout:g} s, not even a heartbeat: the "
                "stream stalled",
                connected=True,
            )
        except aiohttp.ClientPayloadError as exc:
            where = " in the middle of an event" if self.reader.in_event else ""
            return Ended(f"the stream broke{where}: {exc}", connected=connected)
        except aiohttp.ClientError as exc:
            what = "the stream's connection was lost" if connected else f"cannot reach {shown}"
            return Ended(f"{what}: {exc}", connected=connected)
        except OSError as exc:
            return Ended(f"cannot reach {shown}: {exc}", connected=connected)

    def _refused(self, response: aiohttp.ClientResponse, shown: str) -> Ended | None:
        """Why an answer is no stream to read, and how long to wait; None: it is one."""
        status = response.status
        wait = retry_after(response.headers.get("Retry-After"), 300.0) or 0.0
        if status == 404:
            self.ctx.identified.pop(self.peer.base_url, None)  # it may advertise none now
            return Ended(f"{shown} answered HTTP 404: the peer has hints off", self.limits.recheck)
        if status == 400:
            return Ended(f"{shown} answered HTTP 400: it refused the request", self.limits.recheck)
        if status == 503:
            return Ended(f"{shown} answered HTTP 503: it has too many streams", wait)
        if status != 200:
            return Ended(f"{shown} answered HTTP {status}", wait)
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "text/event-stream":
            return Ended(f"{shown} answered {clipped(kind or 'no Content-Type', 60)}, not events")
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return Ended(f"{shown} sent the stream compressed ({clipped(encoding, 40)})")
        return None

    async def _events(self, response: aiohttp.ClientResponse) -> Ended:
        reader = self.reader = EventReader(self.limits.event_cap)
        while True:
            chunk = await response.content.readany()
            if not chunk:
                if reader.in_event:
                    return Ended("the peer closed the stream in the middle of an event", 0, True)
                return Ended("the peer closed the stream", connected=True)
            for event in reader.feed(chunk):
                if event.id is not None:
                    self.last_id = event.id
                await self._dispatch(event)

    async def _dispatch(self, event: Event) -> None:
        if event.kind == "change":
            change = read_change(event.data)
            if change is None:
                log.warning(
                    "hints of %s: a change event that names no sets and until (%r): taken as a "
                    "catch-up",
                    self.shown,
                    clipped(event.data, 200),
                )
                await self._ring(None, "catch-up", event.id)
            else:
                await self._ring(change.sets, "change", event.id, change.until)
        elif event.kind == "catch-up":
            await self._ring(None, "catch-up", event.id)

    async def _ring(
        self,
        sets: frozenset[str] | None,
        kind: str,
        event_id: str | None,
        until: datetime | None = None,
    ) -> None:
        """Mark the runs of the links ``sets`` concern (None: every link of the peer) pending,
        and wake the scheduler."""
        pool = self.ctx.pool
        self.ctx.metrics.hints.labels(self.shown, kind).inc()
        for name, remote in self.peer.links:
            if sets is None or remote is None or remote in sets:
                await link_store.hint(pool, name, until)
        if kind != "connected":
            await stream_store.hinted(pool, self.peer.base_url, event_id)
        self.wake.set()
