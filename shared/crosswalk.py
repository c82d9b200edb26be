"""ISO 19139 to unqualified Dublin Core (``oai_dc``), the format every OAI-PMH repository offers.

OAI-PMH 2.0 §3.4 requires ``oai_dc`` for every item, so the provider renders it from the stored
ISO record on request. Every Dublin Core element is optional and repeatable, and records in the
wild omit much of what WMO Core asks for, so each mapping below simply yields nothing when its
source is absent. Only a document that is not an ISO 19139 record at all is refused.

Mapping (paths relative to ``gmd:MD_Metadata``; ``ident`` is any ``gmd:identificationInfo`` child):

=============== ==========================================================================
dc:title        ident/citation/CI_Citation/title
dc:creator      organisationName of ident/pointOfContact and of citedResponsibleParty
                (parties with role publisher or distributor go to dc:publisher instead)
dc:publisher    organisationName of gmd:contact (the party responsible for the metadata)
dc:subject      ident/descriptiveKeywords/MD_Keywords/keyword, ident/topicCategory
dc:description  ident/abstract
dc:date         gmd:dateStamp
dc:type         gmd:hierarchyLevel mapped to the DCMI Type Vocabulary ("Dataset" by default)
dc:format       distributionFormat/MD_Format/name, ident/resourceFormat/MD_Format/name
dc:identifier   gmd:fileIdentifier
dc:language     gmd:language, ident/language
dc:rights       ident/resourceConstraints/*/otherConstraints and useLimitation (WMO data policy)
dc:coverage     bounding box as "north=..,south=..,east=..,west=.."; temporal extent as a DCMI
                Period "start=..; end=.." (an open end is left out)
dc:relation     distributionInfo//CI_OnlineResource/linkage/URL
=============== ==========================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lxml import etree

from wiscat.shared.iso19139 import (
    GCO,
    GMD,
    GML,
    GML_LEGACY,
    ROOT_TAG,
    SRV,
    XSI,
    RecordError,
    parse_xml,
)

OAI_DC = "http://www.openarchives.org/OAI/2.0/oai_dc/"
DC = "http://purl.org/dc/elements/1.1/"
OAI_DC_SCHEMA = "http://www.openarchives.org/OAI/2.0/oai_dc.xsd"

_NS = {"gmd": GMD, "gco": GCO, "srv": SRV, "gml": GML, "gml0": GML_LEGACY}

# ISO 19115 MD_ScopeCode -> DCMI Type Vocabulary; anything else is described as a dataset.
_DCMI_TYPES = {
    "dataset": "Dataset",
    "series": "Collection",
    "service": "Service",
    "software": "Software",
    "model": "Software",
}
_PUBLISHER_ROLES = frozenset({"publisher", "distributor"})


def to_oai_dc(record_xml: str | bytes) -> bytes:
    """Render a stored ISO 19139 record as an ``oai_dc:dc`` element (UTF-8, no XML declaration).

    Raises :class:`~wiscat.shared.iso19139.RecordError` if ``record_xml`` is not well-formed or its
    root
    is not ``gmd:MD_Metadata``; missing optional content only leaves out the matching elements.
    """
    root = parse_xml(record_xml)
    if root.tag != ROOT_TAG:
        raise RecordError(f"root element is {root.tag}, expected gmd:MD_Metadata")
    idents = root.findall("gmd:identificationInfo/*", _NS)

    dc = etree.Element(
        f"{{{OAI_DC}}}dc",
        nsmap={"oai_dc": OAI_DC, "dc": DC, "xsi": XSI},
    )
    dc.set(f"{{{XSI}}}schemaLocation", f"{OAI_DC} {OAI_DC_SCHEMA}")

    creators, publishers = _parties(root, idents)
    _add(dc, "title", _values(_under(idents, "gmd:citation/gmd:CI_Citation/gmd:title")))
    _add(dc, "creator", creators)
    _add(dc, "publisher", publishers)
    _add(dc, "subject", _subjects(idents))
    _add(dc, "description", _values(_under(idents, "gmd:abstract")))
    _add(dc, "date", _values(root.findall("gmd:dateStamp", _NS)))
    _add(dc, "type", [_dcmi_type(root)])
    _add(dc, "format", _values(_formats(root, idents)))
    _add(dc, "identifier", _values(root.findall("gmd:fileIdentifier", _NS)))
    _add(
        dc, "language", _values(root.findall("gmd:language", _NS) + _under(idents, "gmd:language"))
    )
    _add(dc, "rights", _values(_rights(idents)))
    _add(dc, "coverage", _coverage(idents))
    _add(dc, "relation", _values(root.findall(".//gmd:CI_OnlineResource/gmd:linkage", _NS)))
    return etree.tostring(dc, encoding="UTF-8", xml_declaration=False)


def _add(dc: etree._Element, name: str, values: Iterable[str]) -> None:
    # Dublin Core elements repeat freely; the same value twice says nothing more.
    seen: set[str] = set()
    for value in values:
        if value and value not in seen:
            seen.add(value)
            etree.SubElement(dc, f"{{{DC}}}{name}").text = value


def _under(parents: Iterable[etree._Element], path: str) -> list[etree._Element]:
    return [found for parent in parents for found in parent.findall(path, _NS)]


def _value(prop: etree._Element) -> str:
    """The value of an ISO property element such as ``<gmd:title><gco:CharacterString>``.

    The value sits in the property's child (gco:CharacterString, gmx:Anchor, gmd:URL, a code list
    element, gco:Date...); for a code list element without text, its codeListValue.
    """
    for child in prop:
        if not isinstance(child.tag, str):
            continue  # comment or processing instruction
        return _flat(child) or (child.get("codeListValue") or "").strip()
    return _flat(prop)


def _flat(element: etree._Element) -> str:
    # All text below the element (comments excluded), runs of whitespace folded to one space:
    # Dublin Core values are display strings, and ISO abstracts are often hard-wrapped.
    return " ".join("".join(str(text) for text in element.itertext()).split())


def _values(props: Iterable[etree._Element]) -> Iterator[str]:
    return (_value(prop) for prop in props)


def _parties(root: etree._Element, idents: list[etree._Element]) -> tuple[list[str], list[str]]:
    creators: list[str] = []
    publishers: list[str] = [
        _value(name)
        for name in root.findall("gmd:contact/gmd:CI_ResponsibleParty/gmd:organisationName", _NS)
    ]
    parties = _under(idents, "gmd:pointOfContact/gmd:CI_ResponsibleParty") + _under(
        idents, "gmd:citation/gmd:CI_Citation/gmd:citedResponsibleParty/gmd:CI_ResponsibleParty"
    )
    for party in parties:
        role = party.find("gmd:role/gmd:CI_RoleCode", _NS)
        role_value = "" if role is None else (role.get("codeListValue") or role.text or "").strip()
        target = publishers if role_value in _PUBLISHER_ROLES else creators
        target.extend(_value(name) for name in party.findall("gmd:organisationName", _NS))
    return creators, publishers


def _subjects(idents: list[etree._Element]) -> Iterator[str]:
    yield from _values(_under(idents, "gmd:descriptiveKeywords/gmd:MD_Keywords/gmd:keyword"))
    for topic in _under(idents, "gmd:topicCategory/gmd:MD_TopicCategoryCode"):
        yield (topic.text or "").strip()


def _dcmi_type(root: etree._Element) -> str:
    scope = root.find("gmd:hierarchyLevel/gmd:MD_ScopeCode", _NS)
    if scope is None:
        return "Dataset"
    code = (scope.get("codeListValue") or scope.text or "").strip()
    return _DCMI_TYPES.get(code, "Dataset")


def _formats(root: etree._Element, idents: list[etree._Element]) -> list[etree._Element]:
    path = "gmd:MD_Format/gmd:name"
    return _under(
        root.findall("gmd:distributionInfo/gmd:MD_Distribution/gmd:distributionFormat", _NS),
        path,
    ) + _under(_under(idents, "gmd:resourceFormat"), path)


def _rights(idents: list[etree._Element]) -> list[etree._Element]:
    constraints = _under(idents, "gmd:resourceConstraints/*")
    return _under(constraints, "gmd:otherConstraints") + _under(constraints, "gmd:useLimitation")


def _extents(idents: list[etree._Element]) -> list[etree._Element]:
    # Data identifications carry gmd:extent, service identifications srv:extent (ISO 19119).
    return _under(idents, "gmd:extent/gmd:EX_Extent") + _under(idents, "srv:extent/gmd:EX_Extent")


def _coverage(idents: list[etree._Element]) -> Iterator[str]:
    extents = _extents(idents)
    for box in _under(extents, "gmd:geographicElement/gmd:EX_GeographicBoundingBox"):
        sides = {
            side: box.find(f"gmd:{element}/gco:Decimal", _NS)
            for side, element in (
                ("north", "northBoundLatitude"),
                ("south", "southBoundLatitude"),
                ("east", "eastBoundLongitude"),
                ("west", "westBoundLongitude"),
            )
        }
        values = {side: (el.text or "").strip() for side, el in sides.items() if el is not None}
        # A box with a side missing describes no area; leave it out rather than guess.
        if len(values) == 4 and all(values.values()):
            yield ",".join(f"{side}={value}" for side, value in values.items())
    for temporal in _under(extents, "gmd:temporalElement/gmd:EX_TemporalExtent/gmd:extent"):
        for gml in (GML, GML_LEGACY):
            yield from _period(temporal, gml)


def _period(extent: etree._Element, gml: str) -> Iterator[str]:
    for period in extent.findall(f"{{{gml}}}TimePeriod"):
        parts = []
        for label, tag in (("start", "beginPosition"), ("end", "endPosition")):
            position = period.find(f"{{{gml}}}{tag}")
            text = "" if position is None else (position.text or "").strip()
            if text:
                parts.append(f"{label}={text}")
        if parts:
            yield "; ".join(parts)
    for instant in extent.findall(f"{{{gml}}}TimeInstant/{{{gml}}}timePosition"):
        text = (instant.text or "").strip()
        if text:
            yield text
