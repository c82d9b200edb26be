"""What one harvested page brings: records to store, records to quarantine, deletions.

:func:`read_page` does all the per-record work of a page (parsing, checks, canonical hash,
serialization) and touches neither the network nor the database. Every lxml object it makes
stays inside it: what it returns is plain values. That work is most of a harvest's CPU, so
:mod:`wiscat.harvester.page_workers` runs it in worker processes (:func:`read_spooled`).

The workers' fork server imports this module, and so every worker has what it imports: nothing
here may import aiohttp, asyncpg or the settings (the client's exceptions are in
:mod:`wiscat.harvester.errors`, the rows written in :mod:`wiscat.shared.model`; a test holds
it to that), so that idle workers hold less memory and start sooner (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from lxml import etree

from wiscat.harvester.errors import BadResponse
from wiscat.shared.iso19139 import RecordError, identifier_error, record_from_element
from wiscat.shared.model import IncomingRecord
from wiscat.shared.oaipmh.errors import NoRecordsMatch
from wiscat.shared.oaipmh.pages import (
    HeaderItem,
    Item,
    PageReader,
    PageSummary,
    RecordItem,
    ResponseError,
    UnreadableItem,
)

log = logging.getLogger("wiscat.harvester.pages")


@dataclass
class Page:
    """One response of a list: iterate its items once, in order; then read its summary.

    noRecordsMatch is not a failure (§3.6: an empty list): the page then has no items and ends
    the list.
    """

    url: str  # the request's URL as shown in logs and reasons (wiscat.shared.urls.safe_url)
    bytes: int
    reader: PageReader
    consumed: bool = False
    # the verb asked: a page that answers another (ListIdentifiers' headers to a ListRecords
    # request) fails, before any of its items is taken for what was asked
    verb: str | None = None

    def items(self) -> Iterator[Item]:
        if self.consumed:
            return
        self.consumed = True
        try:
            for item in self.reader.items():
                self._check_verb(self.reader.summary)
                yield item
        except NoRecordsMatch:
            self.reader.summary.errors.clear()
            self.reader.summary.resumption_token = None
        except ResponseError as exc:
            raise BadResponse(f"{exc} (from {self.url})") from exc
        self._check_verb(self.reader.summary)

    @property
    def summary(self) -> PageSummary:
        return self.reader.summary

    def adopt(self, summary: PageSummary, items_seen: int) -> None:
        """Take the outcome of reading this page elsewhere (a worker process read a copy)."""
        self._check_verb(summary)
        self.consumed = True
        self.reader.summary = summary
        self.reader.items_seen = items_seen

    def _check_verb(self, summary: PageSummary) -> None:
        # None: an error, or noRecordsMatch, read as such
        if self.verb is not None and summary.verb not in (None, self.verb):
            raise answered_otherwise(self.verb, self.url, summary.verb)


def answered_otherwise(asked: str, url: str, answered: str | None) -> BadResponse:
    """The failure of a request for verb ``asked`` that ``url`` answered with another verb's
    element (``answered``)."""
    return BadResponse(f"a {asked} request to {url} was answered with {answered!r}")


def _raw(element: Any) -> bytes:
    if element is None:
        return b""
    return bytes(etree.tostring(element))


@dataclass
class PageSorter:
    """Turns a page's items into records to store and records to quarantine."""

    batch: list[IncomingRecord] = field(default_factory=list)
    quarantined: list[tuple[str | None, str, bytes]] = field(default_factory=list)

    def take(self, header: HeaderItem, metadata: Any) -> None:
        # Called while the payload element is alive (the page parser frees it afterwards).
        if metadata is None:
            self.quarantined.append((header.identifier, "record without metadata", b""))
            return
        try:
            record = record_from_element(metadata, safe_parsed=True)
        except RecordError as exc:
            self.quarantined.append((header.identifier, str(exc), _raw(metadata)))
            return
        if record.identifier != header.identifier:
            # WIS guidelines: the OAI identifier MUST equal gmd:fileIdentifier.
            self.quarantined.append(
                (
                    header.identifier,
                    f"gmd:fileIdentifier {record.identifier!r} differs from the OAI identifier",
                    _raw(metadata),
                )
            )
            return
        self.batch.append(
            IncomingRecord(
                record.identifier,
                record.md_datestamp,
                record.content_hash,
                record.xml,
                record.xml_ids,
            )
        )

    def set_aside(self, item: UnreadableItem) -> None:
        """Quarantine an item whose header cannot be read: neither stored nor deleted, and its
        datestamp, if any, is no date to go by."""
        self.quarantined.append((item.identifier, item.reason, item.raw))


@dataclass
class PageContent:
    """What one page brings: records sorted, deleted identifiers, headers whose records are
    still to get (ListIdentifiers + GetRecord), and the page's greatest datestamp."""

    sorter: PageSorter = field(default_factory=PageSorter)
    deletions: list[str] = field(default_factory=list)
    wanted: list[HeaderItem] = field(default_factory=list)
    greatest: datetime | None = None


def read_page(page: Page) -> PageContent:
    """Read every item of ``page`` (once) and sort it; the page's errors propagate.

    An identifier the page lists more than once is taken at its newest header datestamp, the
    last of those on a tie (invariant 4: the last event wins): its other items are
    neither stored nor deleted nor asked for. Items set aside (quarantined) are no event.
    """
    content = PageContent()
    newest: dict[str, tuple[datetime, int]] = {}  # identifier -> its winning item's (stamp, n)
    taken: list[int] = []  # the item number of each record of content.sorter.batch
    deleted: list[int] = []  # likewise, of content.deletions
    wanted: list[int] = []  # likewise, of content.wanted
    for number, item in enumerate(page.items()):
        if isinstance(item, UnreadableItem):
            content.sorter.set_aside(item)
            continue
        header = item.header if isinstance(item, RecordItem) else item
        stamp = header.datestamp_parsed
        if content.greatest is None or stamp > content.greatest:
            content.greatest = stamp
        if isinstance(item, RecordItem) and not header.deleted:
            held = len(content.sorter.batch)
            content.sorter.take(header, item.metadata)
            if len(content.sorter.batch) == held:
                continue  # quarantined
            taken.append(number)
        elif (problem := identifier_error(header.identifier)) is not None:
            # a header alone: no record can have this identifier (iso19139.file_identifier),
            # nor can a tombstone, so it is neither a deletion nor a record to get
            reason = f"a header whose identifier {problem}"
            content.sorter.quarantined.append((header.identifier, reason, b""))
            continue
        elif header.deleted:
            content.deletions.append(header.identifier)
            deleted.append(number)
        else:
            content.wanted.append(header)
            wanted.append(number)
        if header.identifier not in newest or stamp >= newest[header.identifier][0]:
            newest[header.identifier] = (stamp, number)
    if len(newest) < len(taken) + len(deleted) + len(wanted):  # an identifier came twice
        content.sorter.batch = _winners(content.sorter.batch, taken, newest)
        content.deletions = _winners(content.deletions, deleted, newest)
        content.wanted = _winners(content.wanted, wanted, newest)
    return content


_Item = TypeVar("_Item", IncomingRecord, HeaderItem, str)


def _winners(
    items: list[_Item], numbers: list[int], newest: dict[str, tuple[datetime, int]]
) -> list[_Item]:
    """The ``items`` (numbered ``numbers`` in their page) that are their identifier's newest."""
    return [
        item
        for item, number in zip(items, numbers, strict=True)
        if newest[_identifier(item)][1] == number
    ]


def _identifier(item: IncomingRecord | HeaderItem | str) -> str:
    return item if isinstance(item, str) else item.identifier


def read_copy(url: str, body: bytes) -> tuple[PageContent, PageSummary, int]:
    """:func:`read_page` in a worker process: the page's content, its summary and its item count
    (for :meth:`Page.adopt`)."""
    page = Page(url, len(body), PageReader(body))
    content = read_page(page)
    return content, page.summary, page.reader.items_seen


Reader = Callable[[str, bytes], tuple[PageContent, PageSummary, int]]


def read_spooled(reader: Reader, url: str, path: str) -> tuple[PageContent, PageSummary, int]:
    """What a worker runs for a page the harvester spooled to ``path``: ``reader`` on its bytes."""
    with open(path, "rb") as file:
        body = file.read()
    return reader(url, body)
