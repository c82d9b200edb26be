"""A list's pages, asked for ahead of the caller: :class:`Pager`, which
:meth:`wiscat.harvester.client.OAIClient.read_pages` runs."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Generic, TypeVar

from wiscat.harvester.errors import RepeatedResumptionToken, TooManyEmptyPages, TooManyRequests
from wiscat.harvester.page_content import Page
from wiscat.harvester.transport import with_token
from wiscat.shared.oaipmh.dates import format_datestamp, format_day
from wiscat.shared.oaipmh.errors import BadArgument
from wiscat.shared.oaipmh.pages import PageReader, announced_token, read_errors
from wiscat.shared.tasks import abandon
from wiscat.shared.text import clipped
from wiscat.shared.urls import safe_url

log = logging.getLogger("wiscat.harvester.client")

T = TypeVar("T")

# An OAI-PMH error answer is well under this; a page this small is cheap to read twice.
SMALL_PAGE = 16 * 1024


def in_days(moment: datetime, day_granularity: bool) -> str:
    """``moment`` as a list argument. A day-granularity peer gets days: from rounds down to its
    day (nothing is missed) and until keeps its day (inclusive, so that whole day is asked
    for)."""
    return format_day(moment) if day_granularity else format_datestamp(moment)


class Slot(Generic[T]):
    """One request of a list under way: the token it was made with, the token its page
    announces (once fetched), and the task that fetches and reads the page."""

    def __init__(self, asked_with: str | None) -> None:
        self.asked_with = asked_with
        self.announced: str | None = None
        self.fetched = False
        self.task: asyncio.Task[tuple[Page, T]]


class Pager(Generic[T]):
    """Every page of one list with what ``read`` made of it, in list order.

    Up to ``ahead`` pages are asked for and read ahead of the one the caller holds: as soon as
    a page arrives, the next is asked for with the token the page's tail announces
    (:func:`announced_token`), and the page is read (``read`` may run it in another process, so
    several pages are read at once). Each such guess is checked against the token the page's
    reading found before the next page is handed over; a request made with a wrong guess is
    dropped with all that came after it, and its outcome, failure included, is never seen.
    ``read`` must leave the page consumed (:meth:`Page.adopt`, or its items read), or leave its
    items to the caller, which reads them before asking for the next.
    """

    def __init__(
        self,
        fetch: Callable[[str, dict[str, str]], Awaitable[bytes]],
        base_url: str,
        verb: str,
        read: Callable[[Page], Awaitable[T]],
        *,
        metadata_prefix: str,
        set_spec: str | None,
        from_: datetime | None,
        until: datetime | None,
        day_granularity: bool,
        ahead: int,
        max_requests: int,
        max_empty_pages: int,
    ) -> None:
        self.fetch = fetch
        self.base_url = base_url
        self.verb = verb
        self.read = read
        self.from_ = from_
        self.until = until
        self.ahead = ahead
        self.params = {"verb": verb, "metadataPrefix": metadata_prefix}
        if set_spec:
            self.params["set"] = set_spec
        self.ask_in(day_granularity)
        # a peer whose Identify says seconds, yet which takes days only, refuses the list's
        # first request with badArgument: it is asked again in days, once (RELIABILITY H15)
        self.may_ask_in_days = not day_granularity and (from_ is not None or until is not None)
        self.shown = safe_url(base_url)
        self.limit = max_requests
        self.max_empty_pages = max_empty_pages
        self.seen_tokens: set[str] = set()
        self.empty_pages = 0
        self.requests = 0
        # requests under way, in list order: the first is the next page the caller gets
        self.slots: deque[Slot[T]] = deque()
        self.newest: Slot[T] | None = None  # the last request sent (maybe handed over already)

    def ask_in(self, days: bool) -> None:
        if self.from_ is not None:
            self.params["from"] = in_days(self.from_, days)
        if self.until is not None:
            self.params["until"] = in_days(self.until, days)

    def send(self, asked_with: str | None, query: dict[str, str]) -> None:
        self.requests += 1
        if self.requests > self.limit:
            raise TooManyRequests(
                f"the list from {self.shown} needed more than {self.limit} requests (the cap is "
                "WISCAT_HARVEST_MAX_REQUESTS_PER_LIST)"
            )
        self.newest = slot = Slot[T](asked_with)
        slot.task = asyncio.create_task(self.fetch_and_read(slot, query))
        self.slots.append(slot)

    def go_ahead(self) -> None:
        """The newest page fetched announced its successor: ask for it if there is room (at
        the request limit none goes ahead: the list may be done)."""
        newest = self.newest
        if (
            newest is None
            or not newest.fetched
            or len(self.slots) >= self.ahead
            or self.requests >= self.limit
        ):
            return
        guess = newest.announced
        if (
            guess is None
            or guess in self.seen_tokens
            or any(s.asked_with == guess for s in self.slots)
        ):
            return
        self.send(guess, {"verb": self.verb, "resumptionToken": guess})

    async def fetch_and_read(self, slot: Slot[T], query: dict[str, str]) -> tuple[Page, T]:
        body = await self.fetch(self.base_url, query)
        if self.may_ask_in_days and slot.asked_with is None and len(body) < SMALL_PAGE:
            # an error answer is small: read here, whoever reads the page's items
            refused = read_errors(body)
            if refused and isinstance(refused[0], BadArgument):
                raise refused[0]
        slot.announced = announced_token(body)
        slot.fetched = True
        if slot is self.newest:
            self.go_ahead()
        # a broken page's reason names the token it was asked with, to ask for it again
        where = self.shown if slot.asked_with is None else with_token(self.shown, slot.asked_with)
        page = Page(where, len(body), PageReader(body), verb=self.verb)
        del body  # the page's alone: a worker's reading may let go of it (page_workers)
        return page, await self.read(page)

    def drop_all(self) -> None:
        while self.slots:
            abandon(self.slots.pop().task)

    async def pages(self) -> AsyncIterator[tuple[Page, T]]:
        slots = self.slots
        try:
            self.send(None, self.params)
            while slots:
                try:
                    page, result = await slots[0].task
                except BadArgument as exc:
                    if not self.may_ask_in_days or slots[0].asked_with is not None:
                        raise
                    self.may_ask_in_days = False
                    log.warning(
                        "%s refused from and until in seconds (badArgument: %s), though its "
                        "Identify says seconds: asking again in days",
                        self.shown,
                        clipped(" ".join(exc.message.split()), 200),
                    )
                    self.drop_all()
                    self.ask_in(True)
                    self.send(None, self.params)
                    continue
                slots.popleft()
                self.go_ahead()
                yield page, result
                for _ in page.items():  # whatever the caller left unread
                    pass
                token = page.summary.resumption_token
                if token is None:
                    return
                self.follow(page, token)
        finally:
            self.drop_all()

    def follow(self, page: Page, token: str) -> None:
        """Go on to the page ``token`` asks for, unless the list is broken."""
        if token in self.seen_tokens:
            raise RepeatedResumptionToken(
                f"{self.shown} sent the resumptionToken {token!r} twice in one list"
            )
        self.seen_tokens.add(token)
        self.empty_pages = self.empty_pages + 1 if page.reader.items_seen == 0 else 0
        if self.empty_pages > self.max_empty_pages:
            raise TooManyEmptyPages(
                f"{self.shown} sent {self.empty_pages} pages in a row with a token and no item "
                "(the cap is WISCAT_HARVEST_MAX_EMPTY_PAGES)"
            )
        if self.slots and self.slots[0].asked_with == token:
            return  # the request sent ahead was the right one
        self.drop_all()  # sent ahead, and no longer wanted
        self.send(token, {"verb": self.verb, "resumptionToken": token})
