"""ISO 19139 to oai_dc, checked against the official oai_dc.xsd."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from wiscat.shared.crosswalk import DC, OAI_DC, OAI_DC_SCHEMA, to_oai_dc
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import GCO, GMD, GML_LEGACY, SRV, XSI, RecordError, parse_record

SCHEMAS = Path(__file__).parent.parent / "data" / "schemas"

# simpledc20021212.xsd imports the W3C schema of the xml: namespace for xml:lang; this stand-in
# declares what the DC schema refers to, so validation needs no network.
XML_NAMESPACE_SCHEMA = """<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"
    targetNamespace="http://www.w3.org/XML/1998/namespace">
  <xs:attribute name="lang" type="xs:language"/>
</xs:schema>"""
XML_NAMESPACE_SCHEMA_URL = "http://www.w3.org/2001/03/xml.xsd"


class LocalOnly(etree.Resolver):
    """Serves the xml: namespace schema from memory and records every other request."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def resolve(self, system_url: str, public_id: str, context: object) -> object:
        if system_url == XML_NAMESPACE_SCHEMA_URL:
            return self.resolve_string(XML_NAMESPACE_SCHEMA, context)
        if system_url.startswith(("http:", "https:", "ftp:")):
            self.refused.append(system_url)
        return None


@pytest.fixture(scope="module")
def oai_dc_schema() -> etree.XMLSchema:
    parser = etree.XMLParser(no_network=True)
    resolver = LocalOnly()
    parser.resolvers.add(resolver)
    schema = etree.XMLSchema(etree.parse(str(SCHEMAS / "oai_dc.xsd"), parser))
    assert resolver.refused == []
    return schema


def validate(schema: etree.XMLSchema, output: bytes) -> etree._Element:
    element = etree.fromstring(output)
    assert schema.validate(element), schema.error_log
    return element


def values(element: etree._Element, name: str) -> list[str]:
    return [child.text or "" for child in element.findall(f"{{{DC}}}{name}")]


def iso(body: str) -> bytes:
    return (
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" xmlns:gco="{GCO}" xmlns:srv="{SRV}" '
        f'xmlns:gml="{GML_LEGACY}" xmlns:gmx="http://www.isotc211.org/2005/gmx" '
        f'xmlns:xlink="http://www.w3.org/1999/xlink">{body}</gmd:MD_Metadata>'
    ).encode()


def cs(text: str) -> str:
    return f"<gco:CharacterString>{text}</gco:CharacterString>"


# --- the schema itself ---------------------------------------------------------------------------


def test_schema_rejects_what_it_should(oai_dc_schema: etree.XMLSchema) -> None:
    bad = f'<oai_dc:dc xmlns:oai_dc="{OAI_DC}" xmlns:dc="{DC}"><dc:titel>x</dc:titel></oai_dc:dc>'
    assert not oai_dc_schema.validate(etree.fromstring(bad))
    nested = (
        f'<oai_dc:dc xmlns:oai_dc="{OAI_DC}" xmlns:dc="{DC}"><dc:title><b>x</b></dc:title>'
        "</oai_dc:dc>"
    )
    assert not oai_dc_schema.validate(etree.fromstring(nested))
    lang = (
        f'<oai_dc:dc xmlns:oai_dc="{OAI_DC}" xmlns:dc="{DC}">'
        '<dc:title xml:lang="en">x</dc:title></oai_dc:dc>'
    )
    assert oai_dc_schema.validate(etree.fromstring(lang))


# --- generated records ---------------------------------------------------------------------------


def test_generated_records_validate(oai_dc_schema: etree.XMLSchema) -> None:
    for n in range(0, 1000, 20):
        for version in (0, 1):
            validate(oai_dc_schema, to_oai_dc(generate_record(n, version=version)))


def test_mapping_of_a_generated_record(oai_dc_schema: etree.XMLSchema) -> None:
    data = generate_record(7)
    record = parse_record(data)
    dc = validate(oai_dc_schema, to_oai_dc(record.xml))

    assert dc.tag == f"{{{OAI_DC}}}dc"
    assert dc.get(f"{{{XSI}}}schemaLocation") == f"{OAI_DC} {OAI_DC_SCHEMA}"
    assert values(dc, "identifier") == [identifier_for(7)]
    [title] = values(dc, "title")
    assert title.endswith("#7")
    assert values(dc, "creator") == ["National Meteorological Service of XX"]
    assert values(dc, "publisher") == ["National Meteorological Service of XX"]
    subjects = values(dc, "subject")
    assert {"climatology", "landMeteorologyClimate", "climatologyMeteorologyAtmosphere"} <= set(
        subjects
    )
    assert len(subjects) == len(set(subjects))
    [description] = values(dc, "description")
    assert description.startswith("Monthly climate summaries")
    assert values(dc, "date") == ["2015-01-01T00:11:19Z"]
    assert values(dc, "type") == ["Dataset"]
    assert values(dc, "format") == ["BUFR"]
    assert values(dc, "language") == ["eng"]
    rights = values(dc, "rights")
    assert rights[0] in {"WMOEssential", "WMOAdditional", "WMOOther"}
    assert rights[1].startswith("GTSPriority")
    bbox, period = values(dc, "coverage")
    assert bbox.startswith("north=") and ",south=" in bbox and ",east=" in bbox
    assert ",west=" in bbox
    assert period.startswith("start=")
    assert values(dc, "relation") == ["https://data.xx.example.org/wis/climat/7"]


def test_output_is_embeddable() -> None:
    output = to_oai_dc(generate_record(1))
    assert output.startswith(b"<oai_dc:dc ")
    assert b"<?xml" not in output
    output.decode("utf-8")


def test_text_and_bytes_input_agree() -> None:
    data = generate_record(3)
    assert to_oai_dc(data) == to_oai_dc(data.decode()) == to_oai_dc(parse_record(data).xml)


def test_non_ascii_is_written_as_utf8() -> None:
    output = to_oai_dc(iso(f"<gmd:fileIdentifier>{cs('urn:été')}</gmd:fileIdentifier>"))
    assert "<dc:identifier>urn:été</dc:identifier>".encode() in output


# --- tolerance ----------------------------------------------------------------------------------


def test_empty_record(oai_dc_schema: etree.XMLSchema) -> None:
    dc = validate(oai_dc_schema, to_oai_dc(iso("")))
    assert [etree.QName(child).localname for child in dc] == ["type"]
    assert values(dc, "type") == ["Dataset"]


def test_every_optional_element_can_be_missing(oai_dc_schema: etree.XMLSchema) -> None:
    # Remove each element of a full record in turn; each result still maps and validates.
    data = generate_record(2)
    count = sum(1 for _ in etree.fromstring(data).iter(etree.Element))
    assert count > 100
    for index in range(1, count):  # every element but the root
        copy = etree.fromstring(data)
        element = list(copy.iter(etree.Element))[index]
        parent = element.getparent()
        assert parent is not None
        parent.remove(element)
        validate(oai_dc_schema, to_oai_dc(etree.tostring(copy)))


def test_nil_and_empty_values_are_left_out(oai_dc_schema: etree.XMLSchema) -> None:
    body = (
        '<gmd:fileIdentifier gco:nilReason="missing"/>'
        "<gmd:identificationInfo><gmd:MD_DataIdentification>"
        f"<gmd:citation><gmd:CI_Citation><gmd:title>{cs('  ')}</gmd:title>"
        "</gmd:CI_Citation></gmd:citation>"
        '<gmd:abstract gco:nilReason="unknown"/>'
        "</gmd:MD_DataIdentification></gmd:identificationInfo>"
    )
    dc = validate(oai_dc_schema, to_oai_dc(iso(body)))
    assert values(dc, "identifier") == []
    assert values(dc, "title") == []
    assert values(dc, "description") == []


def test_other_encodings_of_iso_content(oai_dc_schema: etree.XMLSchema) -> None:
    party = (
        "<gmd:CI_ResponsibleParty><gmd:organisationName>{name}</gmd:organisationName>"
        '<gmd:role><gmd:CI_RoleCode codeList="x" codeListValue="{role}"/></gmd:role>'
        "</gmd:CI_ResponsibleParty>"
    )
    body = (
        "<gmd:language><gmd:LanguageCode codeList='x' codeListValue='fre'/></gmd:language>"
        "<gmd:hierarchyLevel><gmd:MD_ScopeCode codeList='x' codeListValue='service'/>"
        "</gmd:hierarchyLevel>"
        "<gmd:contact>"
        + party.format(name=cs("Meta Centre"), role="pointOfContact")
        + "</gmd:contact>"
        "<gmd:dateStamp><gco:Date>2024-02-03</gco:Date></gmd:dateStamp>"
        "<gmd:identificationInfo><srv:SV_ServiceIdentification>"
        "<gmd:citation><gmd:CI_Citation>"
        "<gmd:title><gmx:Anchor xlink:href='urn:t'>Anchored   title\n  wrapped</gmx:Anchor>"
        "</gmd:title>"
        "<gmd:citedResponsibleParty>"
        + party.format(name=cs("Publishing House"), role="publisher")
        + "</gmd:citedResponsibleParty>"
        "</gmd:CI_Citation></gmd:citation>"
        "<gmd:pointOfContact>"
        + party.format(name=cs("Author Org"), role="author")
        + "</gmd:pointOfContact>"
        "<gmd:descriptiveKeywords><gmd:MD_Keywords>"
        "<gmd:keyword><gmx:Anchor xlink:href='urn:k'>Anchored keyword</gmx:Anchor></gmd:keyword>"
        f"<gmd:keyword>{cs('plain')}</gmd:keyword><gmd:keyword>{cs('plain')}</gmd:keyword>"
        "</gmd:MD_Keywords></gmd:descriptiveKeywords>"
        "<gmd:resourceConstraints><gmd:MD_Constraints>"
        f"<gmd:useLimitation>{cs('No commercial use')}</gmd:useLimitation>"
        "</gmd:MD_Constraints></gmd:resourceConstraints>"
        "<srv:extent><gmd:EX_Extent>"
        "<gmd:geographicElement><gmd:EX_GeographicBoundingBox>"
        "<gmd:westBoundLongitude><gco:Decimal>-10</gco:Decimal></gmd:westBoundLongitude>"
        "<gmd:eastBoundLongitude><gco:Decimal>10</gco:Decimal></gmd:eastBoundLongitude>"
        "<gmd:southBoundLatitude><gco:Decimal>-5</gco:Decimal></gmd:southBoundLatitude>"
        "<gmd:northBoundLatitude><gco:Decimal>5</gco:Decimal></gmd:northBoundLatitude>"
        "</gmd:EX_GeographicBoundingBox></gmd:geographicElement>"
        "<gmd:geographicElement><gmd:EX_GeographicBoundingBox>"
        "<gmd:westBoundLongitude><gco:Decimal>1</gco:Decimal></gmd:westBoundLongitude>"
        "</gmd:EX_GeographicBoundingBox></gmd:geographicElement>"
        "<gmd:temporalElement><gmd:EX_TemporalExtent><gmd:extent>"
        "<gml:TimePeriod gml:id='p'><gml:beginPosition/>"
        "<gml:endPosition>2020-12-31</gml:endPosition></gml:TimePeriod>"
        "</gmd:extent></gmd:EX_TemporalExtent></gmd:temporalElement>"
        "<gmd:temporalElement><gmd:EX_TemporalExtent><gmd:extent>"
        "<gml:TimeInstant gml:id='i'><gml:timePosition>2021-06-01</gml:timePosition>"
        "</gml:TimeInstant>"
        "</gmd:extent></gmd:EX_TemporalExtent></gmd:temporalElement>"
        "</gmd:EX_Extent></srv:extent>"
        "</srv:SV_ServiceIdentification></gmd:identificationInfo>"
    )
    dc = validate(oai_dc_schema, to_oai_dc(iso(body)))

    assert values(dc, "language") == ["fre"]
    assert values(dc, "type") == ["Service"]
    assert values(dc, "title") == ["Anchored title wrapped"]
    assert values(dc, "creator") == ["Author Org"]
    assert values(dc, "publisher") == ["Meta Centre", "Publishing House"]
    assert values(dc, "subject") == ["Anchored keyword", "plain"]
    assert values(dc, "rights") == ["No commercial use"]
    assert values(dc, "date") == ["2024-02-03"]
    # The incomplete box is left out; the period has no start.
    assert values(dc, "coverage") == [
        "north=5,south=-5,east=10,west=-10",
        "end=2020-12-31",
        "2021-06-01",
    ]


# --- refusals -----------------------------------------------------------------------------------


def test_not_an_iso_record() -> None:
    with pytest.raises(RecordError, match="expected gmd:MD_Metadata"):
        to_oai_dc(b"<foo/>")


def test_malformed() -> None:
    with pytest.raises(RecordError, match="not well-formed"):
        to_oai_dc("<gmd:MD_Metadata")


def test_doctype_is_refused() -> None:
    with pytest.raises(RecordError, match="DOCTYPE"):
        to_oai_dc(b'<!DOCTYPE x [<!ENTITY e "v">]>' + iso("&e;"))
