"""One ISO 19139 metadata record: safe parsing, identity, md datestamp and canonical hash.

Everything that enters the catalogue, by local ingest or by harvest, passes through
:func:`parse_record` (bytes from a file or an admin request) or :func:`record_from_element` (an
element the harvester already took out of an OAI-PMH page). Both return a :class:`Record` or raise
:class:`RecordError` whose message is a reason a person can act on; nothing else escapes.

No :class:`Record` holds a character XML 1.0 does not allow (RELIABILITY P14): lxml's parser
refuses one, literal or by a character reference (``&#11;``, ``&#xFFFE;``), and its API cannot
put one in an element, so the serialization stored never has one and needs no search for it.

Exceptions::

    ValueError
     └── RecordError      not well-formed, carries a DOCTYPE, wrong root, no fileIdentifier
                          (or one no OAI-PMH answer can carry), unparsable gmd:dateStamp, or
                          one more than a day ahead

What counts as "the same record" (design invariant 7) is decided by :func:`canonical_hash`.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from lxml import etree

from wiscat.shared.oaipmh import xmlids
from wiscat.shared.oaipmh.identifiers import any_uri_error
from wiscat.shared.text import clipped

# Namespaces of ISO 19139 (the 2005 schemas WMO Core 1.3 profiles) and of what records carry.
GMD = "http://www.isotc211.org/2005/gmd"
GCO = "http://www.isotc211.org/2005/gco"
GMX = "http://www.isotc211.org/2005/gmx"
SRV = "http://www.isotc211.org/2005/srv"
GML = "http://www.opengis.net/gml/3.2"
# Records written against the 2005/2006 ISO schemas use the pre-3.2.1 GML namespace; readers that
# look for GML content must accept both.
GML_LEGACY = "http://www.opengis.net/gml"
XLINK = "http://www.w3.org/1999/xlink"
XSI = "http://www.w3.org/2001/XMLSchema-instance"

# Prefix map for find()/xpath(); the prefixes are ours, documents may use any.
NAMESPACES: dict[str, str] = {
    "gmd": GMD,
    "gco": GCO,
    "gmx": GMX,
    "srv": SRV,
    "gml": GML,
    "xlink": XLINK,
    "xsi": XSI,
}

ROOT_TAG = f"{{{GMD}}}MD_Metadata"

# The largest document taken as one record, by a file's ingest or the admin API: a WMO Core
# record is a few kilobytes; one far larger is not one record (and is never read whole).
MAX_RECORD_BYTES = 20 * 1024 * 1024

# The longest identifier a record may have, in UTF-8 bytes. PostgreSQL's indexes hold at most
# 2,704 bytes an entry, and the identifier is indexed with its set and datestamp; a longer one
# could never be stored (and a WMO identifier, a URN, is a few dozen characters).
MAX_IDENTIFIER_BYTES = 1024

# The ISO 19139 schema location advertised for the iso19139 metadata format.
GMD_SCHEMA = "http://www.isotc211.org/2005/gmd/gmd.xsd"

# lxml.etree.canonicalize is missing from lxml-stubs; typed here once: element in, text out.
_canonicalize: Callable[..., str] = etree.canonicalize


class RecordError(ValueError):
    """A document that is not an acceptable ISO 19139 record; ``str()`` is the reason."""


@dataclass(frozen=True, slots=True)
class Record:
    """A parsed record, reduced to what the catalogue stores about it.

    ``md_datestamp`` is the record's gmd:dateStamp in UTC (``None`` when the record has none);
    ``content_hash`` is :func:`canonical_hash` of the root; ``xml`` is the root element serialized
    without XML declaration, ready to be embedded in an OAI-PMH ``<metadata>`` element;
    ``xml_ids``, the XML IDs ``xml`` holds, as ``records.xml_ids`` keeps them
    (:func:`wiscat.shared.oaipmh.xmlids.stored_form`).
    """

    identifier: str
    md_datestamp: datetime | None
    content_hash: bytes
    xml: str
    xml_ids: str


def safe_parser(*, encoding: str | None = None) -> etree.XMLParser:
    """A new XML parser that never loads a DTD, resolves an entity or touches the network.

    A fresh parser per call because lxml parsers carry state (error log, resolvers); building one
    costs about a microsecond. ``encoding`` overrides the document's declaration (for text input).
    """
    return _parser(encoding, None)


def _parser(encoding: str | None, target: _PrologScanner | None) -> etree.XMLParser:
    return etree.XMLParser(
        encoding=encoding,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_blank_text=False,
        target=target,
    )


def parse_xml(data: bytes | str) -> etree._Element:
    """Parse one XML document safely and return its root element.

    Raises :class:`RecordError` if the document is not well-formed or carries a DOCTYPE. A DOCTYPE
    is refused outright, whatever it declares: metadata records never need one, and entity
    declarations are how billion-laughs and external-entity (XXE) attacks get in.
    """
    # lxml refuses text that still has an encoding declaration; bytes plus an encoding override
    # parse any text, with or without one.
    if isinstance(data, str):
        try:
            raw, encoding = data.encode("utf-8"), "utf-8"
        except UnicodeEncodeError as exc:  # lone surrogates: not text any parser could read
            raise RecordError(f"not well-formed XML: {exc.reason} at offset {exc.start}") from exc
    else:
        raw, encoding = data, None
    if _has_doctype(raw, encoding):
        raise RecordError(_DOCTYPE_REASON)
    try:
        root = etree.fromstring(raw, safe_parser(encoding=encoding))
    except etree.XMLSyntaxError as exc:
        if raw.startswith(b"\x00") and not raw.startswith(
            (b"\x00<", b"\x00\x00\x00<", b"\x00\x00\xfe\xff")
        ):
            # libxml2 stops at the NUL and calls the document empty, which it is not
            raise RecordError(
                "not well-formed XML: it begins with a NUL byte (binary data, not a record)"
            ) from exc
        raise RecordError(f"not well-formed XML: {exc.msg}") from exc
    _refuse_dtd(root)
    return root


def parse_record(data: bytes | str) -> Record:
    """Parse a whole ISO 19139 document (file contents, request body) into a :class:`Record`."""
    return record_from_element(parse_xml(data), safe_parsed=True)


def record_from_element(root: etree._Element, *, safe_parsed: bool = False) -> Record:
    """Build a :class:`Record` from an already-parsed ``gmd:MD_Metadata`` element.

    ``safe_parsed`` says the element comes from :func:`parse_xml` or from
    :class:`wiscat.shared.oaipmh.pages.PageReader`, whose parsers refuse any DOCTYPE and never
    recover,
    so it can hold no entity reference and the walk that looks for one is skipped.

    The element may sit inside a larger document (an OAI-PMH page); it is then taken out of it
    (the page loses it), so that the stored XML carries the namespace declarations the record
    uses, not the envelope's: libxml2 copies onto the detached element the declarations its
    subtree needs from above, about ten times cheaper than copying the subtree.
    """
    if not safe_parsed:
        _refuse_dtd(root)
    parent = root.getparent()
    if parent is not None:
        parent.remove(root)
    if root.tag != ROOT_TAG:
        raise RecordError(f"root element is {root.tag}, expected gmd:MD_Metadata")
    xml = etree.tostring(root, encoding="unicode", with_tail=False)
    return Record(
        identifier=file_identifier(root),
        md_datestamp=md_datestamp(root),
        content_hash=canonical_hash(root),
        xml=xml,
        xml_ids=xmlids.stored_form(xml),
    )


def file_identifier(root: etree._Element) -> str:
    """The trimmed text of a record's ``gmd:fileIdentifier``: its ``gco:CharacterString``, or a
    ``gmx:Anchor`` in its stead (an element of that element's substitution group in the ISO
    19139 schemas, which records made by newer tools use); RecordError if none."""
    found = _children(root, _FILE_IDENTIFIER)
    if not found:
        raise RecordError("no gmd:fileIdentifier")
    if len(found) > 1:
        # ISO 19115 allows at most one; two would make the record's identity ambiguous.
        raise RecordError("more than one gmd:fileIdentifier")
    text = _child(found[0], _CHARACTER_STRING)
    if text is None:
        text = _child(found[0], _ANCHOR)
    if text is None:
        raise RecordError("gmd:fileIdentifier has no gco:CharacterString (nor gmx:Anchor)")
    identifier = _text(text)
    if not identifier:
        raise RecordError("gmd:fileIdentifier is empty")
    problem = identifier_error(identifier)
    if problem is not None:
        raise RecordError(f"gmd:fileIdentifier {problem}")
    return identifier


def identifier_fits(identifier: str) -> bool:
    """Whether ``identifier`` is short enough to be stored (:data:`MAX_IDENTIFIER_BYTES`)."""
    return len(identifier.encode()) <= MAX_IDENTIFIER_BYTES


def identifier_error(identifier: str) -> str | None:
    """Why no record can have ``identifier``, to follow the name of what holds it ("is longer
    than 1024 bytes"); None if one can. Too long to be stored, or not an xs:anyURI, which
    OAI-PMH.xsd makes every item identifier: each answer that carried it would be invalid."""
    if not identifier_fits(identifier):
        return f"is longer than {MAX_IDENTIFIER_BYTES} bytes"
    problem = any_uri_error(identifier)
    if problem is not None:
        quoted = clipped(identifier, 80)
        return f"{quoted!r} is not a URI, as an OAI-PMH identifier must be (xs:anyURI): {problem}"
    return None


#: How far ahead of this node's clock a gmd:dateStamp may be (a record made where the day has
#: begun, a clock a little fast); one further ahead is a mistake, such as 2102 for 2012, that
#: would block every later copy of the record under "older never overwrites newer".
FUTURE_TOLERANCE = timedelta(days=1)


def md_datestamp(root: etree._Element) -> datetime | None:
    """The record's ``gmd:dateStamp`` as an aware UTC datetime, or None if it has none.

    gmd:dateStamp holds a gco:DateTime or a gco:Date. A date, or a date-time without offset, is
    taken as UTC (WMO Core 1.3 asks for UTC). A gmd:dateStamp that is present but holds no
    readable date raises :class:`RecordError`: the "older never overwrites newer" guard must not
    silently lose its input.
    """
    stamp = _child(root, _DATE_STAMP)
    if stamp is None:
        return None
    value = _child(stamp, _DATE_TIME)
    parse = _parse_datetime
    if value is None:
        value = _child(stamp, _DATE_ONLY)
        parse = _parse_date
    if value is None:
        raise RecordError("gmd:dateStamp holds neither gco:DateTime nor gco:Date")
    text = _text(value)
    moment = parse(text)
    if moment is None:
        # the record's text, of any length
        raise RecordError(f"gmd:dateStamp is not a date: {clipped(text, 60)!r}")
    if moment > datetime.now(UTC) + FUTURE_TOLERANCE:
        raise RecordError(
            f"gmd:dateStamp {text} is in the future: stored, no correction with a true date "
            "could replace it (it would be older)"
        )
    return moment


def canonical_hash(root: etree._Element) -> bytes:
    """SHA-256 (32 bytes) of the canonical form of ``root``; pure, ``root`` is left untouched.

    Two records are "the same" when their canonical forms are equal. These differences do NOT
    count as a change:

    - whitespace at the start and end of any text node, so whitespace-only text between
      elements (indentation, line breaks, CRLF vs LF) and padding around a value;
    - the order of attributes, and single vs double quotes;
    - where namespace declarations sit, and declarations no element or attribute name uses;
    - ``<a/>`` vs ``<a></a>``, CDATA sections vs escaped text, character references vs literal
      characters, the XML declaration and the document's encoding;
    - comments.

    These DO count: element or attribute names, namespace URIs and the prefixes chosen for them,
    attribute values (whitespace included), text other than leading/trailing whitespace (so
    ``"a  b"`` differs from ``"a b"``), the order of elements, and processing instructions.

    That is C14N 2.0 with ``strip_text`` (design invariant 7). It is computed as exclusive
    C14N 1.0 without comments, by libxml2, whose text runs (the text between two tags; text on
    both sides of a comment is one run) are then trimmed of the whitespace :meth:`str.strip`
    removes, as lxml's C14N 2.0 does. What counts as a change is the same as with C14N 2.0, and
    for metadata records the bytes hashed are the same as ``lxml.etree.canonicalize(root,
    strip_text=True)``. The reason is speed: lxml implements C14N 2.0 in Python, about 0.8 ms
    for a 9 KB record, four to five times what a harvester storing 4,000 records a second on two
    cores can spend on hashing; this takes about 0.1 ms and copies no tree.

    Trimming the serialized form relies on C14N output having a literal ``<`` only where markup
    starts and a literal ``>`` never in text. Processing instructions (whose data may hold
    either), ``xml:space="preserve"`` (text in its scope is kept as it is) and trees libxml2
    cannot canonicalize (relative namespace URIs) break that or need more; they are rare in
    metadata records, and for them the hash is taken over lxml's C14N 2.0 itself. Which way is
    taken depends only on what counts as a change, so equal records always take the same way.
    """
    try:
        canonical = _native_canonical(root)
    except etree.C14NError:
        canonical = None
    if canonical is None:
        # lxml's C14N 2.0 walks the tree from the element, so it needs the namespaces declared
        # on ancestors carried by a detached copy.
        if root.getparent() is not None:
            root = copy.deepcopy(root)
        canonical = _canonicalize(root, strip_text=True).encode("utf-8")
    return hashlib.sha256(canonical).digest()


# How C14N writes a carriage return (only ever there from a character reference), which
# C14N 2.0 with strip_text trims like any other whitespace.
_CR = "&#xD;"
# Whitespace-only text between two tags. In C14N output a literal "<" only ever opens markup, so
# once processing instructions are ruled out this cannot match inside an attribute value.
_BLANK_TEXT = re.compile(r">\s+<")
# A text run (after a tag's ">") that starts with whitespace or ends with whitespace before the
# next "<". A ">" inside an attribute value can make it match falsely, which only costs time.
_PADDED_TEXT = re.compile(r">(?:\s|&#xD;|[^<]*+(?:(?<=\s)|(?<=&#xD;))<)")
# The same test on ASCII bytes (the usual record), where \s is the whitespace str.strip removes
# from ASCII text that XML allows: space, tab, LF and CR (which C14N writes as "&#xD;").
_PADDED_ASCII = re.compile(rb">(?:\s|&#xD;|[^<]*+(?:(?<=\s)|(?<=&#xD;))<)")


def _native_canonical(root: etree._Element) -> bytes | None:
    """The canonical form by libxml2 plus trimming, or None where only C14N 2.0 gives it."""
    raw = etree.tostring(root, method="c14n", exclusive=True, with_comments=False)
    # "?" alone first: searching for it is much cheaper than for "<?", and usually settles it.
    if (b"?" in raw and b"<?" in raw) or b'xml:space="preserve"' in raw:
        return None
    if raw.isascii() and not _PADDED_ASCII.search(raw):
        return raw  # nothing to trim: hashed as it is, with no decoding or copy
    canonical = _BLANK_TEXT.sub("><", raw.decode("utf-8"))
    if _PADDED_TEXT.search(canonical):
        canonical = _trim_text_runs(canonical)
    return canonical.encode("utf-8")


def _trim_text_runs(canonical: str) -> str:
    # Each piece after a "<" is one tag up to its ">" (the piece's last: text escapes ">", an
    # attribute value escapes "<"), then the text run up to the next tag.
    pieces = canonical.split("<")
    for index, piece in enumerate(pieces):
        tag, end, text = piece.rpartition(">")
        if _CR in text:
            trimmed = text.replace(_CR, "\r").strip().replace("\r", _CR)
        else:
            trimmed = text.strip()
        if trimmed != text:
            pieces[index] = tag + end + trimmed
    return "<".join(pieces)


_DOCTYPE_REASON = (
    "document carries a DOCTYPE; DTDs and entity declarations are refused "
    "(billion-laughs and external-entity risk)"
)


# What lxml hands a parser target: text, typed as str or bytes by the stubs.
_Text = str | bytes


class _PrologEnd(Exception):
    pass


class _PrologScanner:
    """Parser target that stops at the DOCTYPE or at the root's start tag, whichever comes first.

    Checking before the full parse gives every DOCTYPE the same clear reason: otherwise libxml2's
    own guards may stop a billion-laughs document first, with a message about entity
    amplification that depends on its version.
    """

    def __init__(self) -> None:
        self.has_doctype = False

    def doctype(self, name: str, public_id: str | None, system_url: str | None) -> None:
        self.has_doctype = True
        raise _PrologEnd

    def start(self, tag: _Text, attrib: dict[_Text, _Text], nsmap: object = None) -> None:
        raise _PrologEnd

    def end(self, tag: _Text) -> None:
        pass

    def data(self, data: _Text) -> None:
        pass

    def comment(self, text: _Text) -> None:
        pass

    def close(self) -> None:
        return None


def _has_doctype(raw: bytes, encoding: str | None) -> bool:
    scanner = _PrologScanner()
    try:
        etree.fromstring(raw, _parser(encoding, scanner))
    except _PrologEnd:
        pass
    except etree.XMLSyntaxError:
        pass  # the full parse reports it, with its line
    return scanner.has_doctype


def _refuse_dtd(root: etree._Element) -> None:
    info = root.getroottree().docinfo
    # libxml2 records any <!DOCTYPE ...> as an internal subset, even one with no declarations.
    if info.internalDTD is not None or info.externalDTD is not None:
        raise RecordError(_DOCTYPE_REASON)
    # An element handed over by a caller's own (less strict) parser could still hold unexpanded
    # entity references, which would serialize into XML that no longer parses on its own.
    for _ in root.iter(etree.Entity):
        raise RecordError("document holds entity references")


_FILE_IDENTIFIER = f"{{{GMD}}}fileIdentifier"
_DATE_STAMP = f"{{{GMD}}}dateStamp"
_CHARACTER_STRING = f"{{{GCO}}}CharacterString"
_ANCHOR = f"{{{GMX}}}Anchor"
_DATE_TIME = f"{{{GCO}}}DateTime"
_DATE_ONLY = f"{{{GCO}}}Date"


def _children(element: etree._Element, tag: str) -> list[etree._Element]:
    # libxml2 walks the children (find() with a path runs lxml's ElementPath in Python)
    return list(element.iterchildren(tag))


def _child(element: etree._Element, tag: str) -> etree._Element | None:
    return next(element.iterchildren(tag), None)


def _text(element: etree._Element) -> str:
    # XPath string-value: all descendant text, without comments or processing instructions.
    if len(element) == 0:  # no child node at all: the usual gco:CharacterString
        return (element.text or "").strip()
    return "".join(str(part) for part in element.itertext()).strip()


# xs:date, and the gYearMonth / gYear forms gco:Date also admits, each with an optional zone.
_DATE = re.compile(r"([0-9]{4})(?:-([0-9]{2})(?:-([0-9]{2}))?)?(Z|[+-][0-9]{2}:[0-9]{2})?")


def _parse_date(text: str) -> datetime | None:
    match = _DATE.fullmatch(text)
    if match is None:
        return None
    year, month, day, zone = match.groups()
    try:
        start = date(int(year), int(month or 1), int(day or 1))
    except ValueError:
        return None
    moment = datetime.combine(start, time())
    if zone is None or zone == "Z":
        return moment.replace(tzinfo=UTC)
    return _parse_datetime(f"{moment.isoformat()}{zone}")


def _parse_datetime(text: str) -> datetime | None:
    # xs:dateTime always has the date and time joined by "T"; fromisoformat alone would also take
    # a bare date or a space separator.
    if "T" not in text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
