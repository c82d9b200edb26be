"""What one harvested page brings: records to store, records to quarantine, deletions.

:func:`read_page` does all the per-record work of a page (parsing, checks, canonical hash,
serialization) and touches neither the network nor the database, so a harvest runs it in a
thread while its event loop receives the next page and writes the previous one. Every lxml
object it makes stays inside it: what it returns is plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lxml import etree

from services.harvester.client import Page
from shared.db import records as store
from shared.iso19139 import RecordError, record_from_element
from shared.oaipmh.pages import HeaderItem, RecordItem


def _raw(element: Any) -> bytes:
    if element is None:
        return b""
    return bytes(etree.tostring(element))


@dataclass
class PageSorter:
    """Turns a page's items into records to store and records to quarantine."""

    batch: list[store.IncomingRecord] = field(default_factory=list)
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
            # WIS guidelines (seed 002): the OAI identifier MUST equal gmd:fileIdentifier.
            self.quarantined.append(
                (
                    header.identifier,
                    f"gmd:fileIdentifier {record.identifier!r} differs from the OAI identifier",
                    _raw(metadata),
                )
            )
            return
        self.batch.append(
            store.IncomingRecord(
                record.identifier, record.md_datestamp, record.content_hash, record.xml
            )
        )


@dataclass
class PageContent:
    """What one page brings: records sorted, deleted identifiers, headers whose records are
    still to get (ListIdentifiers + GetRecord), and the page's greatest datestamp."""

    sorter: PageSorter = field(default_factory=PageSorter)
    deletions: list[str] = field(default_factory=list)
    wanted: list[HeaderItem] = field(default_factory=list)
    greatest: datetime | None = None


def read_page(page: Page) -> PageContent:
    """Read every item of ``page`` (once) and sort it; the page's errors propagate."""
    content = PageContent()
    for item in page.items():
        header = item.header if isinstance(item, RecordItem) else item
        stamp = header.datestamp_parsed
        if content.greatest is None or stamp > content.greatest:
            content.greatest = stamp
        if header.deleted:
            content.deletions.append(header.identifier)
        elif isinstance(item, RecordItem):
            content.sorter.take(header, item.metadata)
        else:
            content.wanted.append(header)
    return content
