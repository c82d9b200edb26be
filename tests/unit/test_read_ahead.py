"""ReadAhead: which pages are read before they are asked for, and what is kept, for how long.

The reads here are small coroutines over a list of numbered pages, so that what was read, and
when, can be asserted exactly; the provider's own reads are tested against PostgreSQL in
tests/integration/test_provider_read_ahead.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from wiscat.provider.readahead import ListPageItems, PageKey, ReadAhead

BOUND = datetime(2026, 1, 1, tzinfo=UTC)
STAMP = datetime(2025, 1, 1, tzinfo=UTC)


def key(page: int, set_spec: str = "A") -> PageKey:
    """The key of page ``page`` (0: the first) of a list of set ``set_spec``."""
    return PageKey(
        "ListRecords", "iso19139", set_spec, None, None, BOUND, STAMP if page else None, str(page)
    )


class Catalogue:
    """Pages 0 .. pages - 1 of any list; each read is logged, and may be made to wait or fail.

    As the provider's reads do, a read tells the next page's key first, then waits for the
    page itself (``gate``).
    """

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.reads: list[PageKey] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.failing: set[str] = set()

    async def read(self, at: PageKey, found: Callable[[PageKey], None]) -> ListPageItems:
        self.reads.append(at)
        page = int(at.last_identifier)
        following = at.after(STAMP, str(page + 1)) if page + 1 < self.pages else None
        if following:
            found(following)
        await self.gate.wait()
        if at.last_identifier in self.failing:
            raise ConnectionError("the database went away")
        return ListPageItems(f"<page {page} of {at.set_spec}>".encode(), 10, following)


def read_ahead(catalogue: Catalogue, **options: object) -> tuple[ReadAhead, Counter[str]]:
    seen: Counter[str] = Counter()
    settings: dict[str, object] = {"capacity": 8, "depth": 2, **options}
    ahead = ReadAhead(catalogue.read, observe=lambda outcome: seen.update([outcome]), **settings)  # type: ignore[arg-type]
    return ahead, seen


async def settle(ahead: ReadAhead) -> None:
    for _ in range(100):
        await asyncio.sleep(0)
        if not ahead.reading():
            return
    raise AssertionError("reads did not finish")


async def asking_during_the_read(
    catalogue: Catalogue,
) -> tuple[ReadAhead, Counter[str], asyncio.Task[ListPageItems | None]]:
    """Page 1 read ahead, and its request made while the read is held back."""
    catalogue.gate.clear()
    ahead, seen = read_ahead(catalogue)
    ahead.start(key(1))
    taking = asyncio.create_task(ahead.take(key(1)))
    await asyncio.sleep(0.01)
    return ahead, seen, taking


async def test_a_page_read_ahead_is_taken_and_the_next_ones_read_up_to_the_depth() -> None:
    catalogue = Catalogue(10)
    ahead, seen = read_ahead(catalogue)
    ahead.start(key(1))
    await settle(ahead)
    # page 1 read for the token just sent, and page 2 after it: two pages ahead, no more
    assert catalogue.reads == [key(1), key(2)]
    page = await ahead.take(key(1))
    assert page is not None and page.body == b"<page 1 of A>"
    await settle(ahead)
    assert catalogue.reads == [key(1), key(2), key(3)]
    assert len(ahead) == 2
    assert seen == {"used": 1}
    await ahead.close()


async def test_the_end_of_a_list_stops_the_reads() -> None:
    catalogue = Catalogue(3)
    ahead, _ = read_ahead(catalogue)
    ahead.start(key(1))
    await settle(ahead)
    assert catalogue.reads == [key(1), key(2)]
    await ahead.take(key(1))
    await ahead.take(key(2))
    await settle(ahead)
    assert catalogue.reads == [key(1), key(2)]
    assert len(ahead) == 0


async def test_a_page_nobody_read_ahead_is_missed() -> None:
    ahead, seen = read_ahead(Catalogue(5))
    assert await ahead.take(key(3)) is None
    assert seen == {"missed": 1}


async def test_a_client_waits_for_its_page_while_it_is_being_read() -> None:
    catalogue = Catalogue(5)
    ahead, seen, taking = await asking_during_the_read(catalogue)
    assert not taking.done()
    # the pages after it are being read meanwhile: the next page's key is known first
    assert catalogue.reads == [key(1), key(2), key(3)]
    catalogue.gate.set()
    page = await taking
    assert page is not None and page.body == b"<page 1 of A>"
    assert seen == {"used": 1}
    await ahead.close()


async def test_capacity_bounds_the_pages_held_and_the_furthest_ahead_gives_way() -> None:
    catalogue = Catalogue(10)
    ahead, seen = read_ahead(catalogue, capacity=3)
    for name in "ABC":
        ahead.start(key(1, name))
        await settle(ahead)
        assert len(ahead) <= 3
    # A read pages 1 and 2 ahead, B its page 1 into the last room (a page read ahead never
    # pushes another out); C's start pushed out A's page 2, the one furthest ahead of its
    # list: no list's next page went
    assert catalogue.reads == [key(1, "A"), key(2, "A"), key(1, "B"), key(1, "C")]
    assert seen == {"dropped": 1}
    for name in "ABC":
        assert await ahead.take(key(1, name)) is not None
    await ahead.close()


async def test_with_every_list_at_its_next_page_a_new_list_reads_nothing_ahead() -> None:
    """More lists than pages held (15 harvesters, 8 pages): a page its client asks for next
    is never pushed out for another's, where it would be read for nothing."""
    catalogue = Catalogue(10)
    ahead, seen = read_ahead(catalogue, capacity=2, depth=1)
    for name in "ABC":
        ahead.start(key(1, name))
        await settle(ahead)
    assert catalogue.reads == [key(1, "A"), key(1, "B")]
    assert seen == {"skipped": 1}
    assert await ahead.take(key(1, "C")) is None  # C's client reads its page itself
    assert await ahead.take(key(1, "A")) is not None
    assert await ahead.take(key(1, "B")) is not None
    assert seen == {"skipped": 1, "missed": 1, "used": 2}
    await ahead.close()


async def test_a_page_unasked_for_too_long_expires() -> None:
    ahead, seen = read_ahead(Catalogue(5), ttl=0.05)
    ahead.start(key(1))
    await settle(ahead)
    await asyncio.sleep(0.1)
    assert await ahead.take(key(1)) is None
    # and the page read ahead after it went too
    assert seen == {"expired": 1, "dropped": 1}
    assert len(ahead) == 0


async def test_pages_nobody_asks_for_go_when_another_list_starts() -> None:
    ahead, seen = read_ahead(Catalogue(5), ttl=0.05)
    ahead.start(key(1))
    await settle(ahead)
    await asyncio.sleep(0.1)
    ahead.start(key(1, "B"))
    assert len(ahead) == 1
    assert seen == {"dropped": 2}
    await ahead.close()


async def test_a_failed_read_leaves_the_page_to_its_request() -> None:
    catalogue = Catalogue(5)
    catalogue.failing.add("1")
    ahead, seen = read_ahead(catalogue)
    ahead.start(key(1))
    await settle(ahead)
    assert await ahead.take(key(1)) is None
    assert seen == {"failed": 1}


async def test_a_cancelled_request_does_not_cancel_the_read() -> None:
    catalogue = Catalogue(5)
    ahead, _, taking = await asking_during_the_read(catalogue)
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    catalogue.gate.set()
    await asyncio.sleep(0.01)
    # the read went on (the request will be made again), and two pages after it were read
    assert catalogue.reads == [key(1), key(2), key(3)]
    await ahead.close()


async def test_close_cancels_the_reads_in_progress() -> None:
    catalogue = Catalogue(5)
    catalogue.gate.clear()
    ahead, _ = read_ahead(catalogue)
    ahead.start(key(1))
    await asyncio.sleep(0.01)
    assert ahead.reading() == 2
    await ahead.close()
    assert len(ahead) == 0 and ahead.reading() == 0
    catalogue.gate.set()
    await asyncio.sleep(0.01)
    assert catalogue.reads == [key(1), key(2)]


async def test_no_capacity_reads_nothing_ahead() -> None:
    catalogue = Catalogue(5)
    ahead, seen = read_ahead(catalogue, capacity=0)
    ahead.start(key(1))
    await settle(ahead)
    assert catalogue.reads == []
    assert await ahead.take(key(1)) is None
    assert seen == {"missed": 1}
