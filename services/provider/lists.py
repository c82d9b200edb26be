"""The lists the provider serves (ListRecords, ListIdentifiers): their slots, the bound each new
list stops at, and their pages, read from the database (or ahead of their request) and rendered.

A page holds one of ``Settings.max_concurrent_lists`` list slots from its read until it is sent
or its client is gone; a list asked for with every slot taken is :class:`Overloaded` (503).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from wiscat.provider.characters import listable, nameable_sets, servable_rows
from wiscat.provider.metrics import ProviderMetrics
from wiscat.provider.readahead import ListPageItems, PageKey, ReadAhead
from wiscat.provider.standby import Standby
from wiscat.shared import crosswalk
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.hierarchy import in_tree, minimal
from wiscat.shared.settings import UNION_SET, Settings

log = logging.getLogger("wiscat.provider")

# how long a page read ahead waits for its request (a client that stopped midway)
READ_AHEAD_SECONDS = 60.0
# a list held back this long by a write transaction in progress is worth a warning, at most
# one a minute (HORIZON_WARN_EVERY)
HORIZON_WARN_LAG = 60.0
HORIZON_WARN_EVERY = 60.0


class Overloaded(Exception):
    """Every list slot is taken."""


class Slot:
    """One of the provider's list slots, held by a page until :meth:`release` (once)."""

    def __init__(self, lists: Lists) -> None:
        self._lists: Lists | None = lists

    def release(self) -> None:
        if self._lists is not None:
            self._lists.in_progress -= 1
            self._lists = None


@dataclass
class ListPage:
    """A list page on its way to the client, in a few pieces (the envelope, the items, the
    resumptionToken and the end), holding its list slot until the page is sent or the client
    has gone."""

    pieces: list[bytes]
    slot: Slot


class Lists:
    """The provider's lists: their slots, their pages read ahead, their bound."""

    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        metrics: ProviderMetrics,
        read_pool: Pool | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        # where pages are read: a hot standby's pool (DATABASE_READ_URL), else the primary's
        self.read_pool = read_pool or pool
        self.standby = (
            Standby(pool, read_pool, settings.read_replay_wait_seconds) if read_pool else None
        )
        self.metrics = metrics
        self.in_progress = 0
        self.horizon_warned = -HORIZON_WARN_EVERY  # (time.monotonic) last warned of the horizon
        self.read_ahead = ReadAhead(
            self.read_page,
            capacity=settings.read_ahead_pages,
            ttl=READ_AHEAD_SECONDS,
            observe=lambda outcome: metrics.read_ahead.labels(outcome).inc(),
        )

    def slot(self) -> Slot:
        """A free list slot, taken; :class:`Overloaded` when there is none."""
        if self.in_progress >= self.settings.max_concurrent_lists:
            raise Overloaded()
        self.in_progress += 1
        return Slot(self)

    async def close(self) -> None:
        await self.read_ahead.close()

    async def upper_bound(self) -> datetime:
        """The datestamp a list beginning now stops at, frozen in its tokens (invariant 2).

        No row that a transaction still in progress will commit may be listed before it, or a
        harvester's high-water mark would pass it for ever: the list stops short of the oldest
        write transaction in progress (:func:`wiscat.shared.db.records.list_horizon`), and of the
        settle window besides. The bound is also cut back to a whole second, so a list shows a
        datestamp second only once all of it is visible: harvesters may then ask from = last
        second seen + 1 (the guarantee Identify states; without a settle window, as in some
        tests, it is not cut). Read from a standby, the list also stops short of what the
        standby has not replayed (:class:`wiscat.provider.standby.Standby`).
        """
        if self.standby is not None:
            horizon = await self.standby.horizon()
        else:
            horizon = await store.list_horizon(self.pool)
        settle = self.settings.settle_seconds
        upper_bound = horizon.at - timedelta(seconds=settle)
        lag = (datetime.now(UTC) - horizon.at).total_seconds()
        self.metrics.list_horizon_lag.set(max(lag, 0.0) if horizon.oldest_pid else 0.0)
        warn = time.monotonic() - self.horizon_warned >= HORIZON_WARN_EVERY
        if horizon.hidden and warn:
            self.horizon_warned = time.monotonic()
            log.warning(
                "%d write transactions in progress belong to another database role, whose "
                "start this role may not see: lists may pass what they will commit "
                "(invariant 2); grant this role pg_read_all_stats, or let every writer use "
                "one role",
                horizon.hidden,
            )
        elif horizon.oldest_pid and lag >= HORIZON_WARN_LAG and warn:
            self.horizon_warned = time.monotonic()
            log.warning(
                "lists stop %.0f s short of now: the write transaction of database session %d "
                "has been open that long, and what it commits must not be passed "
                "(pg_stat_activity tells what it is)",
                lag,
                horizon.oldest_pid,
            )
        if settle > 0:
            upper_bound = upper_bound.replace(microsecond=0) - timedelta(microseconds=1)
        return upper_bound

    async def page(self, key: PageKey, *, continued: bool) -> ListPageItems:
        """The page at ``key``: read ahead when a list is ``continued`` (by a token), else read
        now. On a standby, a ``continued`` list waits until the standby has replayed its bound
        (it may have begun on another provider)."""
        if continued and self.standby is not None:
            await self.standby.ensure_replayed(key.scope.upper_bound)
        page = await self.read_ahead.take(key) if continued else None
        return page if page is not None else await self.read_page(key)

    async def read_page(
        self, key: PageKey, found: Callable[[PageKey], None] = lambda key: None
    ) -> ListPageItems:
        """Read the page at ``key`` and render its items.

        A ListRecords page is read in two steps: its keys (and one more, to know whether the
        list goes on), then its rows up to its last key. ``found`` is told the next page's key
        between the two, so that its read can start while this page's documents are still
        coming.
        """
        async with self.read_pool.acquire() as db:  # one connection (and one reset) a page
            return await self._read_page(db, key, found)

    async def _read_page(
        self, db: store.Executor, key: PageKey, found: Callable[[PageKey], None]
    ) -> ListPageItems:
        page_size = self.settings.page_size
        scope = key.scope
        while key.verb == "ListIdentifiers":
            rows = await store.list_page(
                db, scope, after=key.last, limit=page_size + 1, with_xml=False
            )
            following = None
            if len(rows) > page_size:
                rows = rows[:page_size]
                following = key.after(rows[-1].datestamp, rows[-1].identifier)
            listed = listable(rows, self.metrics)  # P14
            if listed or following is None:
                return ListPageItems(
                    render_items(key, listed, self.metrics), len(listed), following
                )
            key = following  # not one record of this page could be listed
        while True:
            keys = await store.list_keys(db, scope, after=key.last, limit=page_size + 1)
            if not keys:
                return ListPageItems(b"", 0, None)
            following = key.after(*keys[page_size - 1]) if len(keys) > page_size else None
            if following:
                found(following)
            rows = await store.list_page(
                db,
                scope,
                after=key.last,
                limit=page_size,
                with_xml=True,
                through=keys[min(len(keys), page_size) - 1],
            )
            servable_rows(rows, self.metrics)  # P14
            listed = listable(rows, self.metrics)
            if listed or following is None:
                return ListPageItems(
                    render_items(key, listed, self.metrics), len(listed), following
                )
            # every record of this page changed (and left the list's bound) between the steps, or
            # none could be listed
            key = following


def header_sets(
    stored: store.StoredRecord, metrics: ProviderMetrics, listed: str | None = None
) -> tuple[str, ...]:
    """The setSpecs of a header; ``listed``, the set of the list it is in (None: GetRecord or
    the whole catalogue). A stored setSpec that breaks OAI-PMH's pattern is left out (P14)."""
    if stored.deleted and listed is not None and not in_tree(stored.set_specs, listed):
        # A deleted header lists the sets the record was deleted from (invariant 4): a
        # record that left the listed set (every set below it) lives on in the sets it holds.
        return (listed,)
    # A tombstone holds the sets it was deleted from, the whole catalogue's included.
    # OAI-PMH 2.0 §2.6: the header's setSpecs "should include only the minimum number ...
    # required to specify the set membership": a record of A:B is in A too (§2.7.2: set=A
    # lists it), and A:B says so, so A is left out even for a record filed in A and A:B (what
    # RELIABILITY P16 asks). The union set is not implied by any setSpec's syntax: it stays.
    return minimal({*nameable_sets(stored.set_specs, metrics, "header"), UNION_SET})


def metadata(prefix: str, stored: store.StoredRecord) -> bytes | None:
    """The record's metadata in format ``prefix``; None for a tombstone."""
    if stored.deleted or stored.xml is None:
        return None
    if prefix == "oai_dc":
        return crosswalk.to_oai_dc(stored.xml)
    return stored.xml


def render_items(
    key: PageKey, rows: Sequence[store.StoredRecord], metrics: ProviderMetrics
) -> bytes:
    """A list page's headers (ListIdentifiers) or records (ListRecords), as one piece."""
    writer = render.PageWriter()
    sets_of: dict[tuple[tuple[str, ...], bool], tuple[str, ...]] = {}
    headers_only = key.verb == "ListIdentifiers"
    listed = key.scope.set_spec
    for stored in rows:
        sets_key = (stored.set_specs, stored.deleted)
        sets = sets_of.get(sets_key)
        if sets is None:
            sets = sets_of[sets_key] = header_sets(stored, metrics, listed)
        if headers_only:
            writer.add_header(stored.identifier, stored.datestamp, sets, stored.deleted)
            continue
        xml = metadata(key.metadata_prefix, stored)
        writer.add_record(
            stored.identifier,
            stored.datestamp,
            sets,
            stored.deleted,
            xml,
            # the IDs found when the document was stored are this document's, not a crosswalk's
            xml_ids=stored.xml_ids if xml is stored.xml else None,
        )
    return writer.take()
