"""Validation of provider responses: the official OAI-PMH.xsd, plus checks the XSD cannot make."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from lxml import etree

SCHEMAS = Path(__file__).parent.parent / "data" / "schemas"
OAI = "{http://www.openarchives.org/OAI/2.0/}"
_DATESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_DECLARATION = re.compile(rb"""<\?xml version=(['"])1\.0\1 encoding=(['"])UTF-8\2\?>""")


# The official ISO/TS 19139 schemas (gmd 2007-04-17, with gco, gmx, gsr, gss, gts, GML 3.2.1 and
# XLink), kept under data/schemas as the copies a catalogue server ships them in: their imports
# name where those copies lay beside each other, which this maps to the folders here.
_SCHEMA_HOMES = (
    (re.compile(r"/iso/19139/20070417/(\w+/\w+\.xsd)$"), SCHEMAS / "iso19139" / "20070417"),
    (re.compile(r"/gml/3\.2\.1/(\w+\.xsd)$"), SCHEMAS / "gml" / "3.2.1"),
    (re.compile(r"/w3c/1999/(xlink\.xsd)$"), SCHEMAS / "xlink"),
)


class _LocalSchemas(etree.Resolver):
    """Each import of the ISO schemas from the copy here; nothing from the network."""

    def resolve(self, system_url: str, public_id: str, context: object) -> object:
        for pattern, home in _SCHEMA_HOMES:
            if found := pattern.search(system_url):
                return self.resolve_filename(str(home / found[1]), context)
        if "://" in system_url and not system_url.startswith("file:"):
            raise AssertionError(f"a schema import names {system_url}, which is not kept here")
        return None


@cache
def _schema() -> etree.XMLSchema:
    parser = etree.XMLParser(no_network=True, resolve_entities=False)
    parser.resolvers.add(_LocalSchemas())
    document = etree.parse(str(SCHEMAS / "wiscat-validation.xsd"), parser)
    return etree.XMLSchema(document)


def validate_oai(xml: bytes) -> None:
    """Raise AssertionError, with the schema's messages, unless ``xml`` validates."""
    document = etree.fromstring(xml, etree.XMLParser(no_network=True, resolve_entities=False))
    schema = _schema()
    if not schema.validate(document):
        errors = "\n".join(str(e) for e in schema.error_log)
        raise AssertionError(f"response does not validate against OAI-PMH.xsd:\n{errors}")


def strict_checks(xml: bytes) -> None:
    """The XML declaration names UTF-8; every date is ``YYYY-MM-DDThh:mm:ssZ``; datestamps lie
    within the request's from/until; a deleted header has no metadata nor about; identifiers
    are unique within a list (RELIABILITY P01)."""
    assert _DECLARATION.match(xml), xml[:60]
    root = etree.fromstring(xml)
    for header in root.iter(f"{OAI}header"):
        if header.get("status") == "deleted":
            record = header.getparent()
            assert record is not None
            assert record.find(f"{OAI}metadata") is None, "a deleted record with metadata"
            assert record.find(f"{OAI}about") is None, "a deleted record with about"
    response_date = root.findtext(f"{OAI}responseDate") or ""
    assert _DATESTAMP.fullmatch(response_date), response_date
    request = root.find(f"{OAI}request")
    assert request is not None
    low, high = request.get("from"), request.get("until")
    stamps = [e.text or "" for e in root.iter(f"{OAI}datestamp", f"{OAI}earliestDatestamp")]
    for stamp in stamps:
        assert _DATESTAMP.fullmatch(stamp), stamp
    for token in root.iter(f"{OAI}resumptionToken"):
        expiry = token.get("expirationDate")
        assert expiry is None or _DATESTAMP.fullmatch(expiry), expiry
    for stamp in (e.text or "" for e in root.iter(f"{OAI}datestamp")):
        if low:
            assert stamp >= (low if "T" in low else low + "T00:00:00Z"), (stamp, low)
        if high:
            assert stamp <= (high if "T" in high else high + "T23:59:59Z"), (stamp, high)
    identifiers = [
        e.text for e in root.iter(f"{OAI}identifier") if e.getparent().tag == f"{OAI}header"
    ]
    assert len(identifiers) == len(set(identifiers)), "an identifier is listed twice"
