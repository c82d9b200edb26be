"""XML IDs of the records in one list page (RELIABILITY P01).

An XML ID (``gml:id``, the ``id`` of ISO 19139's object identification) is unique within its
document only, and real records reuse them: many WMO Core records call their TimePeriod
``extent``. A ListRecords page is one document, and OAI-PMH.xsd checks its metadata strictly, so
two records of one page with the same ID would make the page invalid (a duplicate ``xs:ID``).

The rule: in a page, the first record to use an ID keeps it. A later record that uses one again
is served with each such ID renamed ``<id>.page-dup-<h>``, where ``<h>`` is 12 hex digits of the
SHA-256 of the record's identifier, and each same-document reference to it (an attribute whose
value is ``#<id>``, as ``xlink:href``) renamed alike. GetRecord serves a record as stored. A
harvester reading a page (:class:`wiscat.shared.oaipmh.pages.PageReader`) takes the record's own
suffix off again, so what it stores is what the provider stores, whatever the page held.

A record's IDs are found once, when it is written (:func:`stored_form`, kept in
``records.xml_ids``), not each time a page serves it: the search was the largest part of the
provider's own CPU a record served (docs/benchmarks.md). A row written without them (NULL: any
SQL but wiscat's writers, or a row written before migration 0019) is searched as it is served.
"""

from __future__ import annotations

import hashlib

from lxml import etree

MARK = ".page-dup-"
_ID_NAMES = frozenset(
    {"id", "{http://www.opengis.net/gml/3.2}id", "{http://www.opengis.net/gml}id"}
)
# A stored record is lxml's serialization: every attribute is written name="value", after a
# space. _ids finds every ID attribute of a record and some attributes that are not IDs (any
# prefix:id, or text that looks like one), which only costs a closer look. bytes.find looks
# for the name a third quicker than a regular expression would (docs/benchmarks.md).
_ID_OPEN = b'id="'
_BEFORE_NAME = frozenset(b" \t\n\r:")


def _ids(payload: bytes) -> set[str]:
    found = set()
    find = payload.find
    at = find(_ID_OPEN)
    while at > 0:  # a record starts with "<", never with the name
        start = at + len(_ID_OPEN)
        end = find(b'"', start)
        if end < 0:
            break
        if payload[at - 1] in _BEFORE_NAME:
            found.add(payload[start:end].decode("utf-8"))
        at = find(_ID_OPEN, end)
    return found


# How records.xml_ids writes a record's IDs: each followed by this character, which no ID
# found can hold (it ends the attribute's value).
_END = '"'


def stored_form(xml: str) -> str:
    """The IDs of record ``xml`` (as stored) as ``records.xml_ids`` keeps them: each followed by
    a double quote, in order (``'extent"time-1"'``; a record without any: ``''``)."""
    return "".join(value + _END for value in sorted(_ids(xml.encode("utf-8"))))


def _from_stored(text: str) -> set[str]:
    return set(text.split(_END)[:-1])


def suffix(identifier: str) -> str:
    """What a record's colliding IDs are renamed with, the same in every page."""
    return MARK + hashlib.sha256(identifier.encode("utf-8")).hexdigest()[:12]


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


class PageIds:
    """The IDs the records of one page use so far."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def admit(self, identifier: str, payload: bytes, stored_ids: str | None = None) -> bytes:
        """``payload`` (one stored record, UTF-8) as the page must carry it: as it is, or with
        the IDs an earlier record of the page used renamed (module docstring). ``stored_ids``
        are its IDs as :func:`stored_form` gave them for this very payload; None: search it."""
        found = _ids(payload) if stored_ids is None else _from_stored(stored_ids)
        if self._seen.isdisjoint(found):
            self._seen |= found
            return payload
        renamed = _rename(payload, found & self._seen, identifier)
        self._seen |= _ids(renamed)
        return renamed


def _rename(payload: bytes, taken: set[str], identifier: str) -> bytes:
    root = etree.fromstring(payload, _parser())
    end = suffix(identifier)
    for element in root.iter(etree.Element):
        for name, value in element.items():
            if not isinstance(value, str):
                continue
            if (name in _ID_NAMES and value in taken) or (value[:1] == "#" and value[1:] in taken):
                element.set(name, value + end)
    return etree.tostring(root, encoding="utf-8", xml_declaration=False)


def restore(root: etree._Element, identifier: str) -> None:
    """Take the page suffix of record ``identifier`` off its IDs and references, in place."""
    end = suffix(identifier)
    for element in root.iter(etree.Element):
        for name, value in element.items():
            if (
                isinstance(value, str)
                and value.endswith(end)
                and (name in _ID_NAMES or value[:1] == "#")
            ):
                element.set(name, value[: -len(end)])
