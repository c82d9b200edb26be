"""Reading OAI-PMH responses as a harvester, one page at a time.

A page is parsed incrementally with lxml's pull parser: items are yielded as soon as each
``<record>`` or ``<header>`` ends, and each is cleared before the next, so memory stays flat
whatever the page size. Parsing never resolves entities, never touches the network, refuses any
DOCTYPE outright (billion laughs, XXE) and never runs in lxml's recover mode.

Exception tree (besides the OAI-PMH errors of :mod:`wiscat.shared.oaipmh.errors`)::

    ResponseError            a response that is not a usable OAI-PMH document
     +-- NotOAIResponse      an HTML page, another XML vocabulary, an empty body
     +-- MalformedResponse   not well-formed XML: truncated, invalid characters, a DTD
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import cast

from lxml import etree

from wiscat.shared.oaipmh import xmlids
from wiscat.shared.oaipmh.dates import shifted
from wiscat.shared.oaipmh.errors import OAIError, error_for_code
from wiscat.shared.oaipmh.namespaces import OAI_TAG, WISCAT_NS
from wiscat.shared.text import clipped
from wiscat.shared.urls import http_url

log = logging.getLogger("wiscat.harvester.pages")

# Fed to libxml2 this much at a time: 256 KB reads a page about 1.6 times faster than 64 KB,
# and holds only a few dozen records' trees at once.
_CHUNK = 256 * 1024


class ResponseError(Exception):
    """A response that is not a usable OAI-PMH document."""


class NotOAIResponse(ResponseError):
    """The body is not an OAI-PMH response (an HTML error page, another vocabulary, empty)."""


class MalformedResponse(ResponseError):
    """The body is not well-formed XML, or carries a DTD (refused: entity attacks)."""


#: How the reason for a body that is not well-formed begins (libxml2's message follows).
NOT_WELL_FORMED = "not well-formed XML"


_SECONDS_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
# Every other date a peer may send: a day (xs:date, with or without a time zone) or a second
# with a fraction of it or a time-zone offset (xs:dateTime). OAI-PMH.xsd allows fractions in
# datestamps, and any xs:dateTime in responseDate and expirationDate; the protocol's text allows
# neither in datestamps, but peers send them (DSpace did, with milliseconds).
_ANY_FORM = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?"
)


def parse_oai_date(text: str) -> datetime:
    """A date from a peer, as UTC: a datestamp of either granularity (day values mean
    midnight), or a responseDate or expirationDate. A fraction of a second is dropped (read to
    the second, a datestamp still falls within a ``from`` of that second), an offset applied,
    and a date-time without a time zone taken as UTC."""
    value = text.strip()
    if _SECONDS_FORM.fullmatch(value):  # the protocol's own form, nearly always
        try:
            return datetime.fromisoformat(value)  # "Z": UTC
        except ValueError:
            pass  # the right shape, but no such date or time: refused below
    parts = _ANY_FORM.fullmatch(value)
    if parts is not None:
        year, month, day, hour, minute, second, zone = parts.groups()
        try:
            clock = (int(hour or 0), int(minute or 0), int(second or 0))
            moment = datetime(int(year), int(month), int(day), *clock, tzinfo=UTC)
        except ValueError:
            pass  # no such date or time
        else:
            if zone is None or zone == "Z":
                return moment
            offset = timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
            return shifted(moment, offset if zone[0] == "-" else -offset)
    raise MalformedResponse(f"{value!r} is not an OAI-PMH datestamp")


@dataclass(frozen=True, slots=True)
class HeaderItem:
    """The header of one record as a list page gives it (§2.5)."""

    identifier: str
    datestamp: str
    datestamp_parsed: datetime
    set_specs: tuple[str, ...]
    deleted: bool


@dataclass(frozen=True, slots=True)
class UnreadableItem:
    """A header (or a record, by its header) that cannot be read: no identifier, no datestamp,
    or a datestamp that is no date. The rest of its page is read: one item a peer got wrong
    must not make its whole list unreadable, at every harvest. ``identifier`` when it has one;
    ``raw``, the item as received; ``reason``, what is wrong with it."""

    identifier: str | None
    reason: str
    raw: bytes


@dataclass(slots=True)
class RecordItem:
    """A record of a ListRecords or GetRecord page.

    ``metadata`` is the payload's root element; it lives only until the consumer asks for the
    next item (the parser then clears it), so read what you need from it before that.
    """

    header: HeaderItem
    metadata: etree._Element | None


#: What a list page's items are.
Item = HeaderItem | RecordItem | UnreadableItem


@dataclass
class PageSummary:
    """What a page says besides its items; complete once its items have all been read."""

    response_date: datetime | None = None
    verb: str | None = None
    errors: list[OAIError] = field(default_factory=list)
    resumption_token: str | None = None
    cursor: int | None = None
    complete_list_size: int | None = None
    expiration: datetime | None = None


@dataclass(frozen=True)
class IdentifyInfo:
    """What a peer's Identify response says about it (§4.2)."""

    repository_name: str
    base_url: str
    protocol_version: str
    earliest_datestamp: datetime
    deleted_record: str
    granularity: str
    compression: tuple[str, ...]
    # the peer's lists show a datestamp second only once all of it is visible (a wiscat provider)
    whole_seconds: bool = False
    # the URL of the peer's stream of change hints (docs/links.md#change-hints), if it has one
    changes_url: str | None = None

    @property
    def day_granularity(self) -> bool:
        """Whether the peer's datestamps are days only, not seconds."""
        return self.granularity == "YYYY-MM-DD"


# Only the root and a verb's element produce events (their start): the items are the verb
# element's children, taken as each is whole, so no element of a record, nor the record itself,
# reaches Python as an event while a page is read (events for the record and its header cost a
# fifth of reading a page: docs/benchmarks.md).
_EVENT_TAGS = [
    OAI_TAG + name
    for name in (
        "OAI-PMH",
        "Identify",
        "ListMetadataFormats",
        "ListSets",
        "GetRecord",
        "ListIdentifiers",
        "ListRecords",
    )
]


def _parser() -> etree.XMLPullParser:
    # Comments and the whitespace-only text between elements (indentation) are dropped as the
    # page is parsed: neither counts as content (invariant 7), and a record without them
    # is a third smaller as a tree and quicker to hash and store. libxml2 keeps whitespace that
    # stands beside text (mixed content) and the whitespace that is an element's only content.
    return etree.XMLPullParser(
        events=("start",),
        tag=_EVENT_TAGS,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_blank_text=True,
    )


_PROLOG_END = re.compile(rb"<(?![?!])")


def has_doctype(body: bytes) -> bool:
    """Whether the prolog (everything before the root element) declares a DOCTYPE.

    Checked on the bytes before libxml2 reads anything, so no entity declaration of a hostile
    peer is ever parsed (billion laughs, XXE).
    """
    head = body[:65536]
    match = _PROLOG_END.search(head)
    prolog = (head[: match.start()] if match else head).upper()
    return b"<!DOCTYPE" in prolog or b"<!ENTITY" in prolog


def _events(parser: etree.XMLPullParser) -> list[tuple[str, etree._Element]]:
    # start/end events always carry elements (the stubs allow for other event kinds)
    return cast(list[tuple[str, etree._Element]], list(parser.read_events()))


def looks_like_html(body: bytes) -> bool:
    """Whether ``body`` starts as an HTML page, as a proxy's or server's error page does."""
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


_IDENTIFIER = OAI_TAG + "identifier"
_DATESTAMP = OAI_TAG + "datestamp"
_SET_SPEC = OAI_TAG + "setSpec"
_HEADER = OAI_TAG + "header"
_METADATA = OAI_TAG + "metadata"


class _Unreadable(Exception):
    def __init__(self, reason: str, identifier: str | None) -> None:
        super().__init__(reason)
        self.reason, self.identifier = reason, identifier


def _header(element: etree._Element) -> HeaderItem:
    identifier = stamp = None
    set_specs = []
    for child in element:  # one pass over the children: headers are most of a list's work
        tag = child.tag
        if tag == _IDENTIFIER:
            if identifier is not None:  # which one a deletion or a record is of, none can say
                first, second = clipped(identifier, 80), clipped((child.text or "").strip(), 80)
                raise _Unreadable(f"a header with two identifiers, {first!r} and {second!r}", None)
            identifier = (child.text or "").strip()
        elif tag == _DATESTAMP:
            if stamp is not None:
                raise _Unreadable("a header with two datestamps", identifier or None)
            stamp = (child.text or "").strip()
        elif tag == _SET_SPEC:
            set_specs.append((child.text or "").strip())
    if not identifier:
        raise _Unreadable("a header without identifier", None)
    if not stamp:
        raise _Unreadable("a header without datestamp", identifier)
    # "deleted" is the one status (§2.5); a peer's template may write it in capitals, or write
    # an empty one for a live record: their meaning is plain. Any other is not guessed at.
    status = (element.get("status") or "").strip().lower()
    if status not in ("", "deleted"):
        raise _Unreadable(
            f"a header whose status {clipped(element.get('status') or '', 40)!r} is not "
            "'deleted', the one status OAI-PMH has",
            identifier,
        )
    try:
        moment = parse_oai_date(stamp)
    except MalformedResponse:
        raise _Unreadable(f"a header whose datestamp {stamp!r} is no date", identifier) from None
    return HeaderItem(
        identifier,
        stamp,
        moment,
        tuple(set_specs),
        status == "deleted",
    )


def _refuse_unparsed(body: bytes) -> None:
    """Refuse a body that is no XML to parse: empty, an HTML page, or with a DOCTYPE."""
    if not body.strip():
        raise NotOAIResponse("the response body is empty")
    if looks_like_html(body):
        raise NotOAIResponse("the peer answered with an HTML page, not OAI-PMH XML")
    if has_doctype(body):
        raise MalformedResponse("the response carries a DOCTYPE, which is refused")


def _content_start(body: bytes) -> int:
    """Where the document begins: after any white space before it. XML allows none before the
    XML declaration, but servers whose templates start with a blank line send it (PHP's, often),
    and it is never anything but a blank line."""
    if not body[:1].isspace():
        return 0
    head = body[:4096]
    return len(head) - len(head.lstrip())


class PageReader:
    """Parse one response body; iterate :meth:`items`, then read :attr:`summary`."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.summary = PageSummary()
        self.items_seen = 0
        self._token_seen = False
        # whether a provider like ours renamed some records' repeated XML IDs for the page
        # (xmlids): looked for as the items are read, where they are read (a page worker), not
        # where the page arrives (a search of the whole page in the harvest process)
        self._renamed_ids = False

    def items(self) -> Iterator[Item]:
        """Yield each header (ListIdentifiers) or record (ListRecords, GetRecord) in order,
        and an :class:`UnreadableItem` in the place of one whose header cannot be read."""
        _refuse_unparsed(self.body)
        parser = _parser()
        self._renamed_ids = xmlids.MARK.encode() in self.body
        root: etree._Element | None = None
        listing: etree._Element | None = None  # the verb's element: its children are the items
        for start in range(_content_start(self.body), len(self.body), _CHUNK):
            try:
                parser.feed(self.body[start : start + _CHUNK])
                events = _events(parser)
            except etree.XMLSyntaxError as exc:
                raise MalformedResponse(f"{NOT_WELL_FORMED}: {exc.msg}") from exc
            for _, element in events:
                if root is None:
                    root = element
                    self._check_root(root)
                elif element.getparent() is root:  # not a verb's name inside a record
                    if listing is not None:
                        yield from self._take(listing, len(listing))
                    yield from self._take(root, root.index(element))  # the envelope before it
                    listing = element
                    self.summary.verb = element.tag[len(OAI_TAG) :]
            if listing is not None:
                # each child but the last is whole: the parser may be inside the last
                yield from self._take(listing, len(listing) - 1)
        try:
            whole = parser.close()
        except etree.XMLSyntaxError as exc:
            raise MalformedResponse(f"{NOT_WELL_FORMED}: {exc.msg}") from exc
        if root is None:
            raise NotOAIResponse(f"the root element is {whole.tag}, not OAI-PMH")
        if listing is not None:
            yield from self._take(listing, len(listing))
            root.remove(listing)
        yield from self._take(root, len(root))  # the envelope after it
        if self.summary.errors:
            raise self.summary.errors[0]
        if self.summary.verb is None:  # it was read as an empty list, and the list ended
            raise NotOAIResponse("the response holds no answer: no verb's element, and no error")

    def _take(self, parent: etree._Element, count: int) -> Iterator[Item]:
        """Read the first ``count`` children of ``parent``, all of them whole, yielding each
        item; then free them (flat memory)."""
        if count <= 0:
            return
        for element in islice(parent, count):
            item = self._end(element)
            if item is not None:
                self.items_seen += 1
                yield item
        del parent[:count]

    def _check_root(self, root: etree._Element) -> None:
        docinfo = root.getroottree().docinfo
        if getattr(docinfo, "doctype", "") or docinfo.internalDTD is not None:
            raise MalformedResponse("the response carries a DOCTYPE, which is refused")
        if root.tag != OAI_TAG + "OAI-PMH":
            raise NotOAIResponse(f"the root element is {root.tag}, not OAI-PMH")

    def _end(self, element: etree._Element) -> Item | None:
        """What a whole element of the list or of the envelope brings: an item, or a part of
        the page's summary."""
        tag = element.tag
        try:
            if tag == _HEADER:
                return _header(element)
            if tag == OAI_TAG + "record":
                # the first of each, as find() gives it, by libxml2's walk of the children:
                # half the time of find(), which runs lxml's ElementPath
                head = next(element.iterchildren(_HEADER), None)
                if head is None:
                    raise _Unreadable("a record without a header", None)
                metadata = next(element.iterchildren(_METADATA), None)
                payload = None
                header = _header(head)
                if metadata is not None:
                    children = [c for c in metadata if isinstance(c.tag, str)]
                    if len(children) > 1:  # which is the record? taking the first lost the rest
                        raise _Unreadable(
                            f"its metadata holds {len(children)} elements, where OAI-PMH allows "
                            "one (§2.5)",
                            header.identifier,
                        )
                    payload = children[0] if children else None
                    if payload is not None and self._renamed_ids:
                        xmlids.restore(payload, header.identifier)
                return RecordItem(header, payload)
        except _Unreadable as exc:
            raw = etree.tostring(element, encoding="utf-8", with_tail=False)
            return UnreadableItem(exc.identifier, exc.reason, raw)
        if tag == OAI_TAG + "responseDate":
            self.summary.response_date = parse_oai_date(element.text or "")
        elif tag == OAI_TAG + "error":
            self.summary.errors.append(
                error_for_code(element.get("code") or "", (element.text or "").strip())
            )
        elif tag == OAI_TAG + "resumptionToken":
            if self._token_seen:  # the last was followed: the list could go on from either
                raise MalformedResponse("the response has two resumptionTokens")
            self._token_seen = True
            token = (element.text or "").strip()
            self.summary.resumption_token = token or None
            self.summary.cursor = _int(element.get("cursor"))
            self.summary.complete_list_size = _int(element.get("completeListSize"))
            expiry = element.get("expirationDate")
            self.summary.expiration = parse_oai_date(expiry) if expiry else None
        return None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


_TOKEN_OPEN = b"<resumptionToken"
_TOKEN_CLOSE = b"</resumptionToken>"
_TAIL = 64 * 1024


def announced_token(body: bytes) -> str | None:
    """The resumptionToken a page's tail announces, read before the page itself is parsed.

    Only a guess, so that a harvester can send the next request while it reads this page: the
    token :class:`PageReader` finds decides, and a guess that differs from it is dropped. The
    element is looked for in the last 64 KB (§3.5 puts it last in the list) and parsed on its own
    with a safe parser; a prefixed or missing element gives None (no guess, nothing sent early).
    """
    tail_start = max(0, len(body) - _TAIL)
    start = body.rfind(_TOKEN_OPEN, tail_start)
    if start < 0:
        return None
    end = body.find(_TOKEN_CLOSE, start)
    if end < 0:
        return None
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        element = etree.fromstring(body[start : end + len(_TOKEN_CLOSE)], parser)
    except etree.XMLSyntaxError:
        return None
    return (element.text or "").strip() or None


def read_errors(body: bytes) -> list[OAIError]:
    """The OAI-PMH errors in a body, or [] if it is not an OAI-PMH error document."""
    try:
        reader = PageReader(body)
        for _ in reader.items():
            pass
    except OAIError:
        return reader.summary.errors
    except ResponseError:
        return []
    return reader.summary.errors


def read_identify(body: bytes) -> IdentifyInfo:
    """Parse an Identify response; raise the OAI error or ResponseError it carries."""
    reader = PageReader(body)
    for _ in reader.items():
        pass
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    root = etree.fromstring(body[_content_start(body) :], parser)
    identify = root.find(OAI_TAG + "Identify")
    if identify is None:
        raise NotOAIResponse("the Identify response has no Identify element")

    def text(tag: str) -> str:
        return (identify.findtext(OAI_TAG + tag) or "").strip()

    granularity = text("granularity")
    if granularity not in ("YYYY-MM-DD", "YYYY-MM-DDThh:mm:ssZ"):
        # OAI-PMH §4.2 requires it; days are the safe reading (from rounds down to the day)
        log.warning(
            "Identify of %s gives no valid granularity (%r): using days",
            text("baseURL"),
            granularity,
        )
        granularity = "YYYY-MM-DD"
    try:
        earliest = parse_oai_date(text("earliestDatestamp"))
    except MalformedResponse:
        # §4.2 requires it; used only to slice the peer's range for the rolling re-harvest
        log.warning(
            "Identify of %s gives no valid earliestDatestamp (%r): using 1970-01-01",
            text("baseURL"),
            text("earliestDatestamp"),
        )
        earliest = datetime(1970, 1, 1, tzinfo=UTC)
    return IdentifyInfo(
        repository_name=text("repositoryName"),
        base_url=text("baseURL"),
        protocol_version=text("protocolVersion"),
        earliest_datestamp=earliest,
        deleted_record=text("deletedRecord"),
        granularity=granularity,
        compression=tuple(
            (c.text or "").strip() for c in identify.findall(OAI_TAG + "compression")
        ),
        whole_seconds=any(
            guarantee.get("datestamps") == "whole-seconds"
            for guarantee in identify.iterfind(f"{OAI_TAG}description/{{{WISCAT_NS}}}listGuarantee")
        ),
        changes_url=_changes_url(identify),
    )


def _changes_url(identify: etree._Element) -> str | None:
    """The absolute http(s) URL of the first ``wiscat:changes`` description; None without one
    (or with one that is not such a URL: the peer is polled as any other)."""
    for stream in identify.iterfind(f"{OAI_TAG}description/{{{WISCAT_NS}}}changes"):
        url = (stream.get("url") or "").strip()
        if http_url(url) is not None:
            return url
        log.warning(
            "Identify gives a change-hint stream that is no http(s) URL: %r", clipped(url, 200)
        )
    return None
