"""Change hints (docs/links.md#change-hints): what the provider's streams of them
(:mod:`wiscat.provider.changes`) are told, and when.

A write transaction in which a datestamp moved notifies channel :data:`CHANNEL` once, with its
write stamp (migration 0012). One session per provider process LISTENs there
(``LISTEN_DATABASE_URL``, else the session URL: a direct session with the primary), reconnected
with backoff when it dies, every open stream then told to catch up. A notification is a
wake-up, never the news itself: once the bound lists stop at
(:meth:`wiscat.provider.lists.Lists.upper_bound`) has passed the stamp, the sets in which a
datestamp lies between the bound last checked and the bound now are read from the database
(where lists are read: a standby's bound is one it has replayed), and every stream that asked
for one of them is told. A change is hinted only once a list can show it, and none is skipped
for a notification lost: the range read covers whatever committed in it.

Each stream holds at most one hint it has not sent (the sets changed since, and the latest
bound) and one catch-up: a client that never reads costs the same memory after a day as after a
second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

from wiscat.provider.lists import Lists
from wiscat.provider.metrics import ProviderMetrics
from wiscat.shared.db import records as store
from wiscat.shared.db.errors import kind_of
from wiscat.shared.db.pool import Connection, connect
from wiscat.shared.oaipmh.dates import Granularity, format_datestamp, parse_datestamp
from wiscat.shared.oaipmh.errors import BadArgument
from wiscat.shared.settings import UNION_SET, Settings
from wiscat.shared.tasks import forget, wait_for_event

log = logging.getLogger("wiscat.provider")

CHANNEL = "wiscat_changes"
MAX_EVENT_BYTES = 512
# the listener's reconnection backoff, doubled each failure up to the last
RECONNECT_FIRST = 0.5
RECONNECT_MAX = 10.0
# how long the listening session may take to answer its liveness probe
PROBE_TIMEOUT = 5.0
# a change notified, which lists do not show yet although the settle window has passed (a write
# transaction in progress holds them back), is looked for again this often
HELD_BACK_RETRY = 0.25
# after a failed check (the database unavailable), the next one
FAILED_RETRY = 1.0
SECOND = timedelta(seconds=1)
MICROSECOND = timedelta(microseconds=1)


def change_event(sets: list[str] | None, until: datetime) -> bytes:
    """A change event: ``sets`` changed (None: any), listable up to ``until``; past
    :data:`MAX_EVENT_BYTES` with its sets, it says "any"."""
    event = _change(sets, until)
    return event if len(event) <= MAX_EVENT_BYTES else _change(None, until)


def _change(sets: list[str] | None, until: datetime) -> bytes:
    stamp = format_datestamp(until)
    data = json.dumps({"sets": sets, "until": stamp})
    return f"id: {stamp}\nevent: change\ndata: {data}\n\n".encode()


def catch_up_event(reason: str) -> bytes:
    """An event that tells the client to run its incremental harvest from its own mark."""
    return f"event: catch-up\ndata: {json.dumps({'reason': reason})}\n\n".encode()


def matches(wanted: str, changed: frozenset[str]) -> bool:
    """Whether a change in ``changed`` is a change of set ``wanted`` (a set lists its
    subsets' records too, OAI-PMH 2.0 §2.7.2)."""
    return any(spec == wanted or spec.startswith(wanted + ":") for spec in changed)


class Stream:
    """One client's stream: the sets it asked for (None: every set), and what it has not been
    sent yet, coalesced: the sets changed (or "any", once they would not fit one event), the
    latest bound, and a catch-up."""

    def __init__(self, wanted: frozenset[str] | None, client: str) -> None:
        self.wanted = wanted
        self.client = client
        self.sets: set[str] = set()
        self.any_set = False
        self.until: datetime | None = None
        self.catch_up: str | None = None
        self.closing = False
        self.wake = asyncio.Event()

    def offer(self, changed: frozenset[str], until: datetime) -> bool:
        """Note that ``changed`` sets changed, listable up to ``until``; False when none of
        them is one this stream asked for."""
        if self.wanted is None:
            sets = set(changed)
        else:
            sets = {wanted for wanted in self.wanted if matches(wanted, changed)}
        if not sets:
            return False
        self.until = until if self.until is None else max(self.until, until)
        if not self.any_set:
            self.sets |= sets
            if len(_change(sorted(self.sets), self.until)) > MAX_EVENT_BYTES:
                self.sets.clear()
                self.any_set = True
        self.wake.set()
        return True

    def tell_catch_up(self, reason: str) -> None:
        self.catch_up = reason
        self.wake.set()

    def close(self) -> None:
        self.closing = True
        self.wake.set()

    def take(self) -> tuple[bytes, list[str]]:
        """What is to be sent (b"": nothing), and the kinds of its events; forgotten here."""
        chunk = b""
        kinds = []
        if self.catch_up is not None:
            chunk += catch_up_event(self.catch_up)
            kinds.append("catch-up")
            self.catch_up = None
        if self.until is not None:
            chunk += change_event(None if self.any_set else sorted(self.sets), self.until)
            kinds.append("change")
            self.sets.clear()
            self.any_set = False
            self.until = None
        self.wake.clear()
        return chunk, kinds


class TooManyStreams(Exception):
    """A stream refused for the provider's bounds (503)."""


class Hints:
    """The provider process's change hints: its listening session, its open streams, and the
    bound up to which changes have been looked for."""

    def __init__(
        self, settings: Settings, lists: Lists, database_url: str, metrics: ProviderMetrics
    ) -> None:
        """``database_url``: the database URL in use (LISTEN goes to LISTEN_DATABASE_URL, else
        to its session URL: a LISTEN needs a session of its own)."""
        self.settings = settings
        self.lists = lists
        self.listen_url = settings.listen_database_url or settings.session_url(database_url)
        self.metrics = metrics
        self.streams: set[Stream] = set()
        self.per_client: Counter[str] = Counter()
        # the bound up to which changes have been looked for, and the latest stamp notified
        # that lists were not yet known to show
        self.checked: datetime | None = None
        self.awaiting: datetime | None = None
        self.due = asyncio.Event()
        self.listening = asyncio.Event()  # the listening session is up
        self.listen_pid: int | None = None  # its server process (pg_stat_activity.pid)
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        with contextlib.suppress(Exception):  # the database down: set at the first check
            self.checked = await self.lists.upper_bound()
        self.tasks = [
            asyncio.create_task(self._listen(), name="hint listener"),
            asyncio.create_task(self._check_loop(), name="hint checks"),
        ]

    async def close(self) -> None:
        for stream in list(self.streams):
            stream.close()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def open(self, wanted: frozenset[str] | None, client: str) -> Stream:
        """A new stream for ``client`` (:func:`wiscat.provider.limits.client_key`);
        :class:`TooManyStreams` past the bounds."""
        if len(self.streams) >= self.settings.hints_max_streams:
            raise TooManyStreams(f"{len(self.streams)} change-hint streams are open")
        if self.per_client[client] >= self.settings.hints_max_streams_per_client:
            raise TooManyStreams(
                f"{self.per_client[client]} change-hint streams are open from {client}"
            )
        stream = Stream(wanted, client)
        self.streams.add(stream)
        self.per_client[client] += 1
        self.metrics.hint_streams.set(len(self.streams))
        return stream

    def close_stream(self, stream: Stream) -> None:
        if stream in self.streams:
            self.streams.remove(stream)
            self.per_client[stream.client] -= 1
            if not self.per_client[stream.client]:
                del self.per_client[stream.client]
            self.metrics.hint_streams.set(len(self.streams))

    def sent(self, kinds: list[str]) -> None:
        for kind in kinds:
            self.metrics.hints_sent.labels(kind).inc()

    async def resume(self, stream: Stream, last_event_id: str) -> None:
        """A stream resumed from ``last_event_id``: told at once of a change since, or to catch
        up when the id is none this provider can resume from."""
        try:
            seen, granularity = parse_datestamp(last_event_id.strip())
            if granularity is not Granularity.SECONDS:
                raise BadArgument("a day")
        except BadArgument:
            stream.tell_catch_up("the Last-Event-ID is not a datestamp this provider sent")
            return
        try:
            bound = await self.lists.upper_bound()
            if seen > bound:
                stream.tell_catch_up("the Last-Event-ID lies beyond this provider's list bound")
                return
            # an id is a whole second, all of it listable when lists keep to whole seconds
            after = seen + SECOND - MICROSECOND if self.whole_seconds else seen
            if bound > after:
                changed = await store.changed_sets(self.lists.read_pool, after, bound, UNION_SET)
                stream.offer(changed, bound)
        except Exception as exc:  # the database unavailable: the client is told to catch up
            log.warning("change hints: cannot check a resumed stream: %s: %s", kind_of(exc), exc)
            stream.tell_catch_up("the provider could not check the changes since Last-Event-ID")

    @property
    def whole_seconds(self) -> bool:
        return self.settings.settle_seconds > 0

    def _tell_catch_up(self, reason: str) -> None:
        for stream in self.streams:
            stream.tell_catch_up(reason)

    def _notified(self, conn: object, pid: int, channel: str, payload: object) -> None:
        try:
            stamp = datetime.fromisoformat(str(payload))
        except ValueError:  # a write that kept its datestamps (a backup's): look now
            stamp = None
        self._await(stamp)

    def _await(self, stamp: datetime | None) -> None:
        """Look for changes now, and until lists show ``stamp`` (a database time)."""
        if stamp is not None and (self.awaiting is None or stamp > self.awaiting):
            self.awaiting = stamp
        self.due.set()

    async def _listen(self) -> None:
        """LISTEN on :data:`CHANNEL`, in a session reconnected with backoff whenever it dies;
        every (re)connection tells the open streams to catch up, and looks for changes."""
        delay = RECONNECT_FIRST
        heartbeat = self.settings.hints_heartbeat_seconds
        failed = False  # the session failed since it was first up
        while True:
            conn: Connection | None = None
            try:
                conn = await connect(self.listen_url)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._notified)
                # whatever committed before now, while no one listened, is looked for until
                # lists show it, as a notified write would be
                self._await(await conn.fetchval("select clock_timestamp()"))
                self.listen_pid = conn.get_server_pid()
                self.listening.set()
                if failed:
                    self._tell_catch_up("the provider's change listener reconnected")
                delay = RECONNECT_FIRST
                while not await wait_for_event(lost, heartbeat):
                    async with asyncio.timeout(PROBE_TIMEOUT):  # a session that died unheard of
                        await conn.execute("select 1")
                raise ConnectionError("the listening session was closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failed = failed or self.listening.is_set()
                self.listening.clear()
                self.metrics.hint_listener_failures.inc()
                log.warning(
                    "change hints: the listening database session failed (%s: %s); "
                    "reconnecting in %.1f s",
                    kind_of(exc),
                    exc,
                    delay,
                )
            finally:
                if conn is not None and not conn.is_closed():
                    closing = asyncio.ensure_future(conn.close(timeout=PROBE_TIMEOUT))
                    forget(closing)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)

    async def _check_loop(self) -> None:
        wait: float | None = None
        failing = False  # logged once a streak of failures, and once at its end
        while True:
            await wait_for_event(self.due, wait)
            self.due.clear()
            try:
                wait = await self._check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    log.warning(
                        "change hints: cannot look for changes (tried again every %g s): %s: %s",
                        FAILED_RETRY,
                        kind_of(exc),
                        exc,
                    )
                failing = True
                wait = FAILED_RETRY
            else:
                if failing:
                    log.info("change hints: looking for changes again")
                failing = False

    async def _check(self) -> float | None:
        """Tell the streams of the changes lists show now that were not looked for yet; how
        long until the next look (None: at the next notification)."""
        bound = await self.lists.upper_bound()
        if self.checked is None:
            self.checked = self.awaiting - MICROSECOND if self.awaiting else bound
        if bound > self.checked:
            changed = await store.changed_sets(self.lists.read_pool, self.checked, bound, UNION_SET)
            self.checked = bound
            if changed:
                for stream in self.streams:
                    stream.offer(changed, bound)
        if self.awaiting is not None and self.awaiting <= bound:
            self.awaiting = None
        if self.awaiting is None:
            return None
        wait = (self._listable_at(self.awaiting) - datetime.now(UTC)).total_seconds()
        return wait + 0.01 if wait > 0 else HELD_BACK_RETRY

    def _listable_at(self, stamp: datetime) -> datetime:
        """When lists pass ``stamp``, unless a write in progress holds them back."""
        settle = timedelta(seconds=self.settings.settle_seconds)
        if self.whole_seconds:
            return stamp.replace(microsecond=0) + SECOND + settle
        return stamp + settle
