"""Rendering OAI-PMH 2.0 responses as bytes (specification §3.2 and §4).

One design for every verb: a response is ``response_start(..., verb) + pieces +
response_end(verb)``, where each piece is the bytes of some children of the verb's element.

- :func:`identify`, :func:`list_metadata_formats`, :func:`list_sets`, :func:`get_record` return
  the whole content of their verb's element;
- :func:`header` (ListIdentifiers), :func:`record` (ListRecords) and :func:`resumption_token`
  return one child each, so a list page can be streamed as it is produced;
- :func:`render_error` returns a complete document (§3.6 errors replace the verb's element).

The envelope, the small fixed responses, errors and resumption tokens are built with lxml, which
does the escaping. The hot path of a list, one ``<header>`` or ``<record>`` per stored row, is a
short template instead: the record's payload is already-serialized XML from the database and goes
in verbatim (no per-record parsing: lists stay cheap), and only the few header fields (identifier,
datestamp, setSpecs) are templated, each escaped by :func:`escape_text`. Datestamps are always
``YYYY-MM-DDThh:mm:ssZ`` (§3.3.2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from lxml import etree

from wiscat.shared.oaipmh.arguments import ARGUMENTS, VERBS
from wiscat.shared.oaipmh.dates import Granularity, format_datestamp
from wiscat.shared.oaipmh.errors import NoMetadataFormats, NoSetHierarchy, OAIError
from wiscat.shared.oaipmh.namespaces import OAI_NS, OAI_TAG, WISCAT_NS, XSI_NS
from wiscat.shared.oaipmh.xmlids import PageIds
from wiscat.shared.text import NOT_XML

__all__ = [
    "OAI_NS",
    "SCHEMA_LOCATION",
    "VERBS",
    "PageWriter",
    "clean",
    "escape_text",
    "get_record",
    "header",
    "identify",
    "list_metadata_formats",
    "list_sets",
    "record",
    "render_error",
    "response_end",
    "response_start",
    "resumption_token",
]

SCHEMA_LOCATION = f"{OAI_NS} http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd"
DELETED_RECORD_POLICIES = ("no", "transient", "persistent")
# lxml takes None as the key of the default namespace; its type stubs do not say so.
_NSMAP: Any = {None: OAI_NS}
_ROOT_NSMAP: Any = {None: OAI_NS, "xsi": XSI_NS}

_NEEDS_ESCAPE = re.compile("[&<>\r]")
# NOT_XML or _NEEDS_ESCAPE: one search settles the usual text, which needs neither.
_SPECIAL = re.compile("[^\t\n\x20-\x25\x27-\x3b\x3d\x3f-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"}
_DECLARATION_END = b"?>"
_RECORD_END = b"</metadata></record>"


def clean(text: str) -> str:
    """``text`` with the characters XML 1.0 cannot carry (§2.2) replaced by U+FFFD."""
    return NOT_XML.sub("\ufffd", text)


# The same characters in UTF-8 bytes: the C0 controls but tab, LF and CR, and U+FFFE and
# U+FFFF. A lone surrogate is no UTF-8, and U+0000 no text: PostgreSQL stores neither.
_NOT_XML_UTF8 = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]|\xef\xbf[\xbe\xbf]")
_REPLACEMENT = "\ufffd".encode()


def replace_invalid_characters(document: bytes) -> tuple[bytes, int, str | None]:
    """The UTF-8 ``document`` with each character XML 1.0 cannot carry (§2.2) replaced by
    U+FFFD; how many there were, and the first of them (None for none)."""
    first = _NOT_XML_UTF8.search(document)
    if first is None:
        return document, 0, None
    mended, count = _NOT_XML_UTF8.subn(_REPLACEMENT, document)
    return mended, count, first.group().decode()


def escape_text(text: str) -> str:
    """Escape ``text`` for element content.

    ``&``, ``<`` and ``>`` become entity references; ``\\r`` a character reference, as a parser
    would otherwise turn it into ``\\n`` (XML 1.0 §2.11); characters XML cannot carry become
    U+FFFD.
    """
    if not _SPECIAL.search(text):
        return text
    if NOT_XML.search(text):
        text = clean(text)
    if _NEEDS_ESCAPE.search(text):
        text = _NEEDS_ESCAPE.sub(lambda match: _ESCAPES[match.group()], text)
    return text


def _check_verb(verb: str) -> None:
    if verb not in VERBS:
        raise ValueError(f"{verb!r} is not an OAI-PMH verb")


def _serialize_open(root: etree._Element, closing: bytes) -> bytes:
    text: bytes = etree.tostring(root, encoding="UTF-8", xml_declaration=True)
    if not text.endswith(closing):
        raise AssertionError("unexpected serialization of the response envelope")
    return text[: -len(closing)]


def response_start(
    response_date: datetime, base_url: str, echo: dict[str, str] | None, verb: str | None
) -> bytes:
    """The XML declaration, the ``OAI-PMH`` root, responseDate, request, and the verb's element.

    §3.2: the first two children of the root are ``responseDate`` (UTC, seconds) and
    ``request``, whose content is the base URL and whose attributes are the request's arguments;
    ``echo`` None gives a request element without attributes, as after badVerb or badArgument.
    Only the protocol's argument keys (and ``verb``) are rendered as attributes. With ``verb``
    None (an error response) the verb's element is not opened.
    """
    root = etree.Element(OAI_TAG + "OAI-PMH", nsmap=_ROOT_NSMAP)
    root.set("{" + XSI_NS + "}schemaLocation", SCHEMA_LOCATION)
    etree.SubElement(root, OAI_TAG + "responseDate").text = format_datestamp(response_date)
    request = etree.SubElement(root, OAI_TAG + "request")
    for key, value in (echo or {}).items():
        if key == "verb" or key in ARGUMENTS:
            request.set(key, clean(value))
    request.text = clean(base_url)
    if verb is None:
        return _serialize_open(root, b"</OAI-PMH>")
    _check_verb(verb)
    # An empty text makes lxml write a start and an end tag; the end tags are cut off so that
    # the verb's children can follow.
    etree.SubElement(root, OAI_TAG + verb).text = ""
    return _serialize_open(root, f"</{verb}></OAI-PMH>".encode())


def response_end(verb: str | None) -> bytes:
    """Close the verb's element (when ``verb`` is given) and the root."""
    if verb is None:
        return b"</OAI-PMH>\n"
    _check_verb(verb)
    return f"</{verb}></OAI-PMH>\n".encode()


def _content(holder: etree._Element) -> bytes:
    # The children of ``holder``, serialized under the OAI default namespace that the envelope
    # declares: cutting the holder's own tags leaves no namespace declaration to repeat.
    text: bytes = etree.tostring(holder, encoding="UTF-8")
    return text[text.index(b">") + 1 : text.rindex(b"</")]


def _holder(tag: str) -> etree._Element:
    return etree.Element(OAI_TAG + tag, nsmap=_NSMAP)


def _add(parent: etree._Element, tag: str, text: str) -> etree._Element:
    child = etree.SubElement(parent, OAI_TAG + tag)
    child.text = clean(text)
    return child


def render_error(
    response_date: datetime,
    base_url: str,
    echo: dict[str, str] | None,
    errors: Sequence[OAIError],
) -> bytes:
    """A complete error response: one ``<error code="...">`` per condition (§3.6).

    §3.6: "In event of an error or exception condition, repositories must indicate OAI-PMH
    errors, distinguished from HTTP Status-Codes, by including one or more error elements in
    their replies." Pass ``echo`` None after badVerb or badArgument (§3.2, see
    :func:`wiscat.shared.oaipmh.arguments.echo_allowed`).
    """
    if not errors:
        raise ValueError("an error response needs at least one error")
    holder = _holder("OAI-PMH")
    for error in errors:
        if not error.code:
            raise ValueError(f"{type(error).__name__} has no OAI-PMH error code")
        # The messages of errors.py are docstrings; fold their line breaks and indentation.
        _add(holder, "error", " ".join(error.message.split())).set("code", error.code)
    return response_start(response_date, base_url, echo, None) + _content(holder) + b"</OAI-PMH>\n"


class PageWriter:
    """Writes the headers and records of one list page into a buffer of pieces.

    Within a page datestamps and setSpec runs repeat (a harvested batch shares one datestamp and
    one set), so each distinct value is formatted and escaped once per page. A record's stored
    document goes into the buffer as it is and is copied once, when :meth:`take` joins the
    pieces.
    """

    __slots__ = ("_ids", "_parts", "_sets", "_stamps")

    def __init__(self) -> None:
        self._ids = PageIds()
        self._stamps: dict[datetime, str] = {}
        self._sets: dict[tuple[str, ...], str] = {}
        self._parts: list[bytes] = []

    def add(self, piece: bytes) -> None:
        """Append bytes already rendered (the envelope, a resumptionToken)."""
        self._parts.append(piece)

    def take(self) -> bytes:
        """The buffer's bytes, joined; the buffer starts again empty."""
        joined = b"".join(self._parts)
        self._parts = []
        return joined

    def _header(
        self, identifier: str, datestamp: datetime, set_specs: tuple[str, ...], deleted: bool
    ) -> str:
        stamp = self._stamps.get(datestamp)
        if stamp is None:
            stamp = self._stamps[datestamp] = format_datestamp(datestamp)
        specs = self._sets.get(set_specs)
        if specs is None:
            specs = self._sets[set_specs] = "".join(
                f"<setSpec>{escape_text(spec)}</setSpec>" for spec in set_specs
            )
        status = ' status="deleted"' if deleted else ""
        return (
            f"<header{status}><identifier>{escape_text(identifier)}</identifier>"
            f"<datestamp>{stamp}</datestamp>{specs}</header>"
        )

    def add_header(
        self, identifier: str, datestamp: datetime, set_specs: Iterable[str], deleted: bool
    ) -> None:
        """One ``<header>``, a child of ``<ListIdentifiers>`` (§4.5).

        §2.5: a header holds the unique identifier, the datestamp and the setSpecs of the item;
        deleted items carry ``status="deleted"``.
        """
        self.add(self._header(identifier, datestamp, tuple(set_specs), deleted).encode())

    def add_record(
        self,
        identifier: str,
        datestamp: datetime,
        set_specs: Iterable[str],
        deleted: bool,
        metadata_xml: str | bytes | None,
        *,
        xml_ids: str | None = None,
    ) -> None:
        """One ``<record>``, a child of ``<ListRecords>`` (§4.5) or ``<GetRecord>`` (§4.1).

        §2.5: a record is a header and the metadata, "a single manifestation of the metadata
        from an item"; a deleted record (``status="deleted"``) has no metadata element.
        ``metadata_xml`` is one serialized UTF-8 element (no document type declaration); it is
        inserted verbatim, but for XML IDs an earlier record of the page used (see
        :mod:`wiscat.shared.oaipmh.xmlids`). ``xml_ids`` are the IDs it holds, as
        :func:`~wiscat.shared.oaipmh.xmlids.stored_form` gave them; None: it is searched.
        """
        head = self._header(identifier, datestamp, tuple(set_specs), deleted)
        if deleted or metadata_xml is None:
            self.add(f"<record>{head}</record>".encode())
            return
        payload = self._ids.admit(identifier, _payload(metadata_xml), xml_ids)
        self._parts += (f"<record>{head}<metadata>".encode(), payload, _RECORD_END)


def header(identifier: str, datestamp: datetime, set_specs: Iterable[str], deleted: bool) -> bytes:
    """One ``<header>`` on its own; see :meth:`PageWriter.add_header`."""
    writer = PageWriter()
    writer.add_header(identifier, datestamp, set_specs, deleted)
    return writer.take()


def _payload(metadata: str | bytes) -> bytes:
    data = metadata.encode("utf-8") if isinstance(metadata, str) else metadata
    # A stored document may keep its XML declaration, which cannot appear inside another
    # document; the payload is UTF-8 either way.
    if data.startswith(b"<?xml"):
        data = data[data.index(_DECLARATION_END) + len(_DECLARATION_END) :].lstrip()
    return data


def record(
    identifier: str,
    datestamp: datetime,
    set_specs: Iterable[str],
    deleted: bool,
    metadata_xml: str | bytes | None,
) -> bytes:
    """One ``<record>`` on its own; see :meth:`PageWriter.add_record`."""
    writer = PageWriter()
    writer.add_record(identifier, datestamp, set_specs, deleted, metadata_xml)
    return writer.take()


def get_record(
    identifier: str,
    datestamp: datetime,
    set_specs: Iterable[str],
    deleted: bool,
    metadata_xml: str | bytes | None,
) -> bytes:
    """The content of ``<GetRecord>``: the one record asked for (§4.1), see :func:`record`."""
    return record(identifier, datestamp, set_specs, deleted, metadata_xml)


def resumption_token(
    token: str | None, *, cursor: int, complete_list_size: int, expiration: datetime | None
) -> bytes:
    """The ``<resumptionToken>`` element of an incomplete list (§3.5).

    §3.5: "the response containing the incomplete list that completes the list must include an
    empty resumptionToken element"; pass ``token`` None there. ``cursor`` is "a count of the
    number of elements of the complete list thus far returned (i.e. cursor starts at 0)";
    ``completeListSize`` is written only when positive (the schema types it positiveInteger),
    ``expirationDate`` only for a non-empty token.
    """
    if cursor < 0:
        raise ValueError("cursor must not be negative")
    holder = _holder("ListRecords")
    element = _add(holder, "resumptionToken", token or "")
    if token and expiration is not None:
        element.set("expirationDate", format_datestamp(expiration))
    if complete_list_size > 0:
        element.set("completeListSize", str(complete_list_size))
    element.set("cursor", str(cursor))
    return _content(holder)


def identify(
    *,
    repository_name: str,
    base_url: str,
    admin_emails: Sequence[str],
    earliest_datestamp: datetime,
    deleted_record: str,
    compression: Sequence[str] = (),
    whole_seconds: bool = False,
    changes_url: str | None = None,
) -> bytes:
    """The content of ``<Identify>``, in the order §4.2 and the schema require.

    repositoryName, baseURL, protocolVersion ``2.0``, one or more adminEmail,
    earliestDatestamp ("the guaranteed lower limit of all datestamps recording changes,
    modifications, or deletions in the repository"), deletedRecord (``no``, ``transient`` or
    ``persistent``), granularity ``YYYY-MM-DDThh:mm:ssZ``, and the compression encodings offered
    besides identity. With ``whole_seconds`` a description says the lists' datestamp guarantee
    (:data:`WISCAT_NS`); with ``changes_url`` another gives the URL of the stream of change
    hints (docs/links.md#change-hints). Raises ValueError without an admin email or for another
    deletedRecord value.
    """
    if not admin_emails:
        raise ValueError("Identify needs at least one adminEmail (§4.2)")
    if deleted_record not in DELETED_RECORD_POLICIES:
        raise ValueError(f"deletedRecord must be one of {', '.join(DELETED_RECORD_POLICIES)}")
    holder = _holder("Identify")
    _add(holder, "repositoryName", repository_name)
    _add(holder, "baseURL", base_url)
    _add(holder, "protocolVersion", "2.0")
    for email in admin_emails:
        _add(holder, "adminEmail", email)
    _add(holder, "earliestDatestamp", format_datestamp(earliest_datestamp))
    _add(holder, "deletedRecord", deleted_record)
    _add(holder, "granularity", Granularity.SECONDS.value)
    for name in compression:
        _add(holder, "compression", name)
    if whole_seconds:
        description = etree.SubElement(holder, OAI_TAG + "description")
        guarantee = etree.SubElement(
            description, f"{{{WISCAT_NS}}}listGuarantee", nsmap={"wiscat": WISCAT_NS}
        )
        guarantee.set("datestamps", "whole-seconds")
    if changes_url is not None:
        description = etree.SubElement(holder, OAI_TAG + "description")
        stream = etree.SubElement(
            description, f"{{{WISCAT_NS}}}changes", nsmap={"wiscat": WISCAT_NS}
        )
        stream.set("url", changes_url)
    return _content(holder)


def list_metadata_formats(formats: Sequence[tuple[str, str, str]]) -> bytes:
    """The content of ``<ListMetadataFormats>``: one metadataFormat per (prefix, schema,
    namespace) (§4.4).

    Raises :class:`NoMetadataFormats` ("there are no metadata formats available for the
    specified item") for an empty sequence, as the schema requires at least one.
    """
    if not formats:
        raise NoMetadataFormats()
    holder = _holder("ListMetadataFormats")
    for prefix, schema, namespace in formats:
        element = etree.SubElement(holder, OAI_TAG + "metadataFormat")
        _add(element, "metadataPrefix", prefix)
        _add(element, "schema", schema)
        _add(element, "metadataNamespace", namespace)
    return _content(holder)


def list_sets(sets: Sequence[tuple[str, str]]) -> bytes:
    """The content of ``<ListSets>``: one set per (setSpec, setName) (§4.6), never split.

    Raises :class:`NoSetHierarchy` ("the repository does not support sets") for an empty
    sequence, as the schema requires at least one set.
    """
    if not sets:
        raise NoSetHierarchy()
    holder = _holder("ListSets")
    for spec, name in sets:
        element = etree.SubElement(holder, OAI_TAG + "set")
        _add(element, "setSpec", spec)
        _add(element, "setName", name)
    return _content(holder)
