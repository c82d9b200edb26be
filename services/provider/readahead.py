"""Reading a list's next pages from the database before they are asked for.

A harvester asks for page n + 1 as soon as it has page n, so when the provider sends page n it
knows the request that comes next: the one carrying the resumptionToken just sent. The read of
that page starts then, and runs in PostgreSQL (another process, another core) while page n is
sent and read. A page read ahead that nobody has taken yet starts the read of the page after it,
up to ``depth`` pages ahead of the client.

The resumptionToken stays the whole state of a list (none is kept in memory): a request whose page
was not read ahead (the first, an expired one, one that lands on another replica) reads its page
then, with the same result. A page read ahead is what a client asking at that moment would have been
given: the list's bound is frozen in its token, so the read shows the rows the list shows at any
later moment, except for a record changed in between, which this list then shows as it was (its new
version has a datestamp past the bound, for the next incremental harvest).

Memory is bounded: at most ``capacity`` pages are held, each for at most ``ttl`` seconds; a
harvester that stops midway costs its pages read ahead for that long.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from wiscat.shared.db.records import ListScope
from wiscat.shared.oaipmh.tokens import ListPosition
from wiscat.shared.tasks import abandon, forget

log = logging.getLogger("wiscat.provider")


class PageKey(NamedTuple):
    """What a list page depends on: its list's verb, arguments and frozen bound, and the key of
    the last record before it (``last_datestamp`` None for the first page). These are fields of
    :class:`ListPosition`, by the same names; the counts and the expiry are left out."""

    verb: str
    metadata_prefix: str
    set_spec: str | None
    from_: datetime | None
    until_exclusive: datetime | None
    upper_bound: datetime
    last_datestamp: datetime | None
    last_identifier: str

    @property
    def list(self) -> tuple[Any, ...]:
        return self[:6]

    @classmethod
    def at(cls, position: ListPosition) -> PageKey:
        """The key of the page a resumptionToken's ``position`` asks for."""
        return cls(*(getattr(position, field) for field in cls._fields))

    @property
    def scope(self) -> ListScope:
        return ListScope(self.set_spec, self.from_, self.until_exclusive, self.upper_bound)

    @property
    def last(self) -> tuple[datetime, str] | None:
        """The key of the record before this page, None for the first page."""
        if self.last_datestamp is None:
            return None
        return self.last_datestamp, self.last_identifier

    def after(self, datestamp: datetime, identifier: str) -> PageKey:
        """The key of the page that follows the record (``datestamp``, ``identifier``)."""
        return self._replace(last_datestamp=datestamp, last_identifier=identifier)


@dataclass(frozen=True, slots=True)
class ListPageItems:
    """A list page's items, read and rendered: ``body`` holds its ``count`` headers or records;
    ``following`` is the next page's key, None at the end of the list."""

    body: bytes
    count: int
    following: PageKey | None


# How many pages of one list are read ahead of its client. Each read waits on PostgreSQL for most
# of its time, so reads side by side keep both of a small machine's cores busy: four serve a
# client that only fetches faster than two (docs/benchmarks.md, "Measurements behind the code").
DEPTH = 4


class _Read(NamedTuple):
    deadline: float
    task: asyncio.Task[ListPageItems]


class ReadAhead:
    """Pages being read (or read) ahead, by the key of the request that will ask for them.

    ``read(key, found)`` reads and renders the page at ``key``; it may tell ``found`` the key of
    the page after it as soon as it knows it, before the page is read whole.
    ``observe(outcome)`` is told what became of each request that could have had its page read
    ahead: ``used``, ``missed`` (none was read), ``expired`` or ``failed``; and of each page
    read ahead for nobody: ``dropped`` (it made room for another, or expired unasked).
    """

    def __init__(
        self,
        read: Callable[[PageKey, Callable[[PageKey], None]], Awaitable[ListPageItems]],
        *,
        capacity: int,
        depth: int = DEPTH,
        ttl: float = 60.0,
        observe: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self._read = read
        self._observe = observe
        self.capacity = capacity
        self.depth = depth
        self.ttl = ttl
        self._reads: OrderedDict[PageKey, _Read] = OrderedDict()

    def __len__(self) -> int:
        return len(self._reads)

    def start(self, key: PageKey) -> None:
        """Start reading the page at ``key``: a client was just sent its token. When all
        ``capacity`` pages are taken, the page furthest ahead of the list holding the most
        makes room; when every list holds only the page its client asks for next, none is
        pushed out and this page is not read ahead (``skipped``): each of those will be asked
        for soon, and a page read and then dropped is work thrown away (with more lists than
        pages, dropping the oldest dropped most pages just before they were asked for)."""
        if self.capacity <= 0 or key in self._reads:
            return
        self._expire()
        while len(self._reads) >= self.capacity:
            furthest = self._furthest_ahead()
            if furthest is None:
                self._observe("skipped")
                return
            abandon(self._reads.pop(furthest).task)
            self._observe("dropped")
        self._begin(key)

    async def take(self, key: PageKey) -> ListPageItems | None:
        """The page read ahead for ``key``, or None: none was started, it expired, or the read
        failed (then the caller reads the page itself, and meets any failure there)."""
        entry = self._reads.pop(key, None)
        self._expire()  # what nobody will ask for goes, even when no list starts
        if entry is None:
            self._observe("missed")
            return None
        if time.monotonic() > entry.deadline:
            abandon(entry.task)
            self._observe("expired")
            return None
        try:
            page = await asyncio.shield(entry.task)
        except asyncio.CancelledError:
            if not entry.task.cancelled():  # the request itself was cancelled
                forget(entry.task)
                raise
            return None
        except Exception as exc:
            log.warning("a page read ahead failed (%s); reading it again", exc)
            self._observe("failed")
            return None
        self._observe("used")
        # this client moved on: a page read ahead of it may now start the next one
        for held, read in list(self._reads.items()):
            task = read.task
            finished = task.done() and not task.cancelled() and task.exception() is None
            if finished and held.list == key.list:
                self._follow(held, task.result().following)
        return page

    def reading(self) -> int:
        """How many reads have not finished yet."""
        return sum(1 for read in self._reads.values() if not read.task.done())

    async def close(self) -> None:
        """Cancel every read and wait for them to end; the pages held are dropped."""
        tasks = [read.task for read in self._reads.values()]
        self._reads.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _begin(self, key: PageKey) -> None:
        async def read() -> ListPageItems:
            page = await self._read(key, lambda following: self._follow(key, following))
            self._follow(key, page.following)
            return page

        self._reads[key] = _Read(time.monotonic() + self.ttl, asyncio.ensure_future(read()))

    def _follow(self, key: PageKey, following: PageKey | None) -> None:
        """Read the page at ``following``, after ``key``'s, while its list has fewer than
        ``depth`` pages held and there is room (a page read ahead never pushes another out)."""
        if following is None or following in self._reads or len(self._reads) >= self.capacity:
            return
        if sum(1 for held in self._reads if held.list == key.list) < self.depth:
            self._begin(following)

    def _furthest_ahead(self) -> PageKey | None:
        """The page furthest ahead of its list, of the list holding the most pages; None when no
        list holds more than one."""
        held: dict[tuple[Any, ...], list[PageKey]] = {}
        for key in self._reads:
            held.setdefault(key.list, []).append(key)
        pages = max(held.values(), key=len, default=[])
        if len(pages) < 2:
            return None
        return max(pages, key=lambda page: (page.last is not None, page.last or ()))

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [key for key, read in self._reads.items() if read.deadline < now]:
            abandon(self._reads.pop(key).task)
            self._observe("dropped")
