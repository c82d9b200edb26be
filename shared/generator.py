"""Deterministic WMO Core Profile 1.3 records for tests, benchmarks and demonstrations.

``generate_record(n)`` always returns the same bytes for the same arguments, on any machine and
Python version (choices come from a fixed integer mixer, not from :mod:`random`), so a test can
regenerate a record to compare with what a node stored. Records differ from one another in title,
abstract, keywords, data policy, area and dates, and weigh 5 to 10 KB like real WIS records.

The documents are built from a string template with every value XML-escaped rather than with a
tree builder, because benchmarks need over ten thousand records a second and this is test data, not
a path that reads untrusted input. The output is well-formed and parses with
:func:`wiscat.shared.iso19139.parse_record`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from xml.sax.saxutils import escape

WMO_CODELISTS = "http://wis.wmo.int/2012/codelists/WMOCodeLists.xml"
METADATA_STANDARD_NAME = (
    "WMO Core Metadata Profile of ISO 19115 (WMO Core), 2003/Cor.1:2006 (ISO 19115), "
    "2007 (ISO/TS 19139)"
)
METADATA_STANDARD_VERSION = "1.3"

# Default gmd:dateStamp: a fixed origin plus a step per record and a larger step per version, so
# that a later version of the same record is always newer (the older-record guard sees an update).
_EPOCH = datetime(2015, 1, 1, tzinfo=UTC)
_STEP_PER_RECORD = timedelta(seconds=97)
_STEP_PER_VERSION = timedelta(days=3, hours=1)

_MASK = (1 << 64) - 1


def _mix(value: int) -> int:
    # SplitMix64 finaliser: a fixed, well-spread integer hash, identical everywhere.
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


class _Choices:
    """A deterministic stream of choices seeded by the record number."""

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = _mix(seed)

    def below(self, bound: int) -> int:
        self._state = _mix(self._state)
        return self._state % bound

    def pick(self, options: tuple[str, ...]) -> str:
        return options[self.below(len(options))]

    def sample(self, options: tuple[str, ...], count: int) -> list[str]:
        start = self.below(len(options))
        step = 1 + self.below(len(options) - 1) if len(options) > 1 else 1
        seen: list[str] = []
        index = start
        while len(seen) < count and len(seen) < len(options):
            if options[index] not in seen:
                seen.append(options[index])
            index = (index + step) % len(options)
            if index == start:
                step = 1
        return seen


# Product families: identifier slug, title, format, ISO topic category, WMO_CategoryCode themes,
# measured quantities.
_PRODUCTS: tuple[tuple[str, str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("synop", "Surface synoptic observations (SYNOP)", "BUFR", "climatologyMeteorologyAtmosphere",
     ("weatherObservations", "synopMeteorology"),
     ("air temperature", "dew-point temperature", "mean sea level pressure", "wind speed",
      "wind direction", "present weather", "cloud cover", "precipitation amount")),
    ("temp", "Upper-air radiosonde soundings (TEMP)", "BUFR", "climatologyMeteorologyAtmosphere",
     ("aerology", "weatherObservations"),
     ("geopotential height", "air temperature", "relative humidity", "wind profile",
      "tropopause height")),
    ("metar", "Aerodrome routine meteorological reports (METAR)", "IWXXM",
     "climatologyMeteorologyAtmosphere", ("weatherObservations", "meteorology"),
     ("visibility", "runway visual range", "cloud base height", "wind gusts", "QNH pressure")),
    ("taf", "Aerodrome forecasts (TAF)", "IWXXM", "climatologyMeteorologyAtmosphere",
     ("weatherForecasts", "meteorology"),
     ("forecast visibility", "forecast cloud", "significant weather", "forecast wind")),
    ("ship", "Marine surface observations from voluntary observing ships (SHIP)", "BUFR", "oceans",
     ("marineMeteorology", "weatherObservations"),
     ("sea surface temperature", "wave height", "wave period", "air temperature",
      "sea level pressure")),
    ("buoy", "Drifting and moored buoy reports", "BUFR", "oceans",
     ("oceanography", "marineMeteorology"),
     ("sea surface temperature", "subsurface temperature", "salinity", "surface pressure")),
    ("nwp", "Global numerical weather prediction model output", "GRIB2",
     "climatologyMeteorologyAtmosphere", ("weatherForecasts", "meteorology"),
     ("geopotential", "temperature", "specific humidity", "total precipitation",
      "u-component of wind", "v-component of wind", "2 metre temperature")),
    ("climat", "Monthly climate summaries from land stations (CLIMAT)", "BUFR",
     "climatologyMeteorologyAtmosphere", ("climatology", "landMeteorologyClimate"),
     ("monthly mean temperature", "monthly precipitation total", "sunshine duration",
      "extreme temperatures")),
    ("hydro", "River discharge and water level observations", "netCDF", "inlandWaters",
     ("landHydrology", "hydrology"),
     ("water level", "river discharge", "water temperature", "ice thickness")),
    ("radar", "Weather radar reflectivity composite", "ODIM HDF5",
     "climatologyMeteorologyAtmosphere", ("weatherObservations", "meteorology"),
     ("radar reflectivity", "precipitation rate", "echo top height")),
    ("amv", "Satellite-derived atmospheric motion vectors", "BUFR",
     "climatologyMeteorologyAtmosphere", ("satelliteObservation", "meteorology"),
     ("wind speed", "wind direction", "cloud top pressure", "quality indicator")),
    ("ozone", "Total column ozone and ultraviolet index observations", "netCDF", "environment",
     ("actinometry", "airPollution"),
     ("total ozone", "ultraviolet index", "aerosol optical depth")),
)  # fmt: skip

# Place keywords with a bounding box (west, east, south, north).
_PLACES: tuple[tuple[str, str, float, float, float, float], ...] = (
    ("Germany", "WMO Region VI - Europe", 5.87, 15.04, 47.27, 55.06),
    ("France", "WMO Region VI - Europe", -5.14, 9.56, 41.33, 51.09),
    ("Kenya", "WMO Region I - Africa", 33.91, 41.90, -4.68, 5.03),
    ("South Africa", "WMO Region I - Africa", 16.45, 32.89, -34.84, -22.13),
    ("Japan", "WMO Region II - Asia", 122.93, 153.99, 24.05, 45.55),
    ("India", "WMO Region II - Asia", 68.11, 97.40, 6.55, 35.67),
    ("Brazil", "WMO Region III - South America", -73.99, -34.73, -33.75, 5.27),
    ("Argentina", "WMO Region III - South America", -73.58, -53.59, -55.06, -21.78),
    ("Canada", "WMO Region IV - North America, Central America and the Caribbean",
     -141.00, -52.62, 41.68, 83.11),
    ("Mexico", "WMO Region IV - North America, Central America and the Caribbean",
     -118.40, -86.71, 14.53, 32.72),
    ("Australia", "WMO Region V - South-West Pacific", 112.92, 153.64, -43.74, -10.06),
    ("Indonesia", "WMO Region V - South-West Pacific", 95.01, 141.02, -11.01, 6.08),
    ("Antarctica", "Antarctic", -180.00, 180.00, -90.00, -60.00),
    ("North Atlantic Ocean", "Oceans", -80.00, 0.00, 0.00, 70.00),
)  # fmt: skip

_FREQUENCIES = ("hourly", "every three hours", "every six hours", "twice a day", "daily")
_QUALITY = (
    "automated range and consistency checks",
    "the WMO Integrated Global Observing System quality management procedures",
    "manual inspection by duty forecasters",
    "buddy checks against neighbouring stations",
    "comparison with the latest short-range forecast",
)
_USES = (
    "numerical weather prediction data assimilation",
    "nowcasting and severe weather warnings",
    "climate monitoring and long-term trend analysis",
    "aviation meteorological services",
    "marine safety and maritime forecasting",
    "hydrological forecasting and flood early warning",
    "verification of forecast products",
)
_NOTES = (
    "station coverage varies with the season and with communication availability",
    "values are reported in SI units unless the code table states otherwise",
    "late reports are retransmitted as corrections with the same identifier",
    "historical data before the start of the temporal extent are held offline",
    "missing values are encoded according to the WMO Manual on Codes",
    "the product replaces the traditional alphanumeric bulletins from the same source",
)
_POLICIES = ("WMOEssential", "WMOAdditional", "WMOOther")


def identifier_for(n: int, centre: str = "xx") -> str:
    """The gmd:fileIdentifier of record ``n`` of ``centre`` (stable for ``n``, any version)."""
    product = _PRODUCTS[n % len(_PRODUCTS)][0]
    return f"urn:x-wmo:md:int.wmo.wis::{centre}.{product}.{n}"


def default_md_datestamp(n: int, version: int = 0) -> datetime:
    """The gmd:dateStamp :func:`generate_record` writes when none is given (UTC, whole seconds)."""
    return _EPOCH + n * _STEP_PER_RECORD + version * _STEP_PER_VERSION


def generate_record(
    n: int,
    *,
    centre: str = "xx",
    version: int = 0,
    md_datestamp: datetime | None = None,
    gml_id: str | None = None,
) -> bytes:
    """A full WMO Core 1.3 ``gmd:MD_Metadata`` document, UTF-8 with XML declaration.

    The same arguments give the same bytes. ``version`` changes the content of the same record
    (a revision note ends the abstract, the default dateStamp is later), to simulate updates.
    ``md_datestamp`` overrides the dateStamp (a naive value is taken as UTC). ``gml_id`` is the
    temporal extent's ``gml:id`` (an NCName), ``temporal-extent-<n>`` by default: an id is
    unique within its document only, and real records often share one (``extent``, ``tp1``).
    """
    if n < 0 or version < 0:
        raise ValueError("n and version must not be negative")
    choices = _Choices(n)
    slug, title, fmt, topic, themes, quantities = _PRODUCTS[n % len(_PRODUCTS)]
    place, region, west, east, south, north = _PLACES[choices.below(len(_PLACES))]
    # Shrink the box by a record-dependent margin so that coordinates differ between records.
    inset = choices.below(100) / 1000
    west, east = west + (east - west) * inset, east - (east - west) * inset
    south, north = south + (north - south) * inset, north - (north - south) * inset

    stamp = md_datestamp if md_datestamp is not None else default_md_datestamp(n, version)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    stamp = stamp.astimezone(UTC)
    published = (_EPOCH + n * _STEP_PER_RECORD).date() - timedelta(days=30 + choices.below(900))
    begin_year = 1950 + choices.below(60)
    ongoing = choices.below(4) != 0
    end_position = (
        '<gml:endPosition indeterminatePosition="now"/>'
        if ongoing
        else f"<gml:endPosition>{begin_year + 10 + choices.below(40)}-12-31</gml:endPosition>"
    )

    centre_name = f"National Meteorological Service of {centre.upper()}"
    identifier = identifier_for(n, centre)
    stations = 5 + choices.below(995)
    frequency = choices.pick(_FREQUENCIES)
    measured = choices.sample(quantities, 3)
    uses = choices.sample(_USES, 2)
    days = 30 * (1 + choices.below(24))
    sentences = [
        f"{title} from {stations} stations in {place} ({region}), compiled by {centre_name} "
        f"and exchanged {frequency} over the WMO Information System.",
        f"The dataset includes {measured[0]}, {measured[1]} and {measured[2]}, reported "
        f"according to the WMO Manual on Codes and distributed as {fmt}.",
        f"Before dissemination the reports pass {choices.pick(_QUALITY)}, and suspect values are "
        f"flagged rather than removed.",
        f"Typical applications are {uses[0]} and {uses[1]}.",
        f"The centre keeps the most recent {days} days online for retrieval on request.",
        f"Please note that {choices.pick(_NOTES)}.",
    ]
    # Drop up to two middle sentences so abstracts differ in length as well as in words.
    for _ in range(choices.below(3)):
        del sentences[1 + choices.below(len(sentences) - 2)]
    if version:
        sentences.append(
            f"Revision {version}: station list and contact details updated on {stamp:%Y-%m-%d}."
        )
    abstract = " ".join(sentences)
    policy = _POLICIES[choices.below(len(_POLICIES))]
    priority = 1 + choices.below(4)
    host = f"data.{centre.lower()}.example.org"
    url = f"https://{host}/wis/{slug}/{n}"

    return _TEMPLATE.format(
        identifier=escape(identifier),
        organisation=escape(centre_name),
        email=escape(f"wis-metadata@{centre.lower()}.example.org"),
        datestamp=stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        title=escape(f"{title}, {place}, {centre.upper()} #{n}"),
        published=published.isoformat(),
        abstract=escape(abstract),
        theme_keywords="".join(_keyword(word) for word in themes),
        place_keywords=_keyword(escape(place)) + _keyword(escape(region)),
        policy=policy,
        priority=priority,
        topic=topic,
        west=f"{west:.2f}",
        east=f"{east:.2f}",
        south=f"{south:.2f}",
        north=f"{north:.2f}",
        gml_id=escape(gml_id if gml_id is not None else f"temporal-extent-{n}"),
        begin=f"{begin_year}-01-01",
        end_position=end_position,
        format=escape(fmt),
        url=escape(url),
        slug=slug,
    ).encode("utf-8")


def generate_records(
    count: int,
    start: int = 0,
    *,
    centre: str = "xx",
    version: int = 0,
    md_datestamp: datetime | None = None,
) -> Iterator[bytes]:
    """Records ``start`` .. ``start + count - 1``, as :func:`generate_record` makes them."""
    for n in range(start, start + count):
        yield generate_record(n, centre=centre, version=version, md_datestamp=md_datestamp)


def _keyword(word: str) -> str:
    return f"<gmd:keyword><gco:CharacterString>{word}</gco:CharacterString></gmd:keyword>"


def _code(element: str, value: str) -> str:
    # A code list value as ISO 19139 writes it: codeList URL#name, codeListValue, and the value
    # again as text for human readers. WMO Core 1.3 publishes the ISO code lists it uses together
    # with its own in one catalogue.
    return (
        f'<gmd:{element} codeList="{WMO_CODELISTS}#{element}" codeListValue="{value}">'
        f"{value}</gmd:{element}>"
    )


def _thesaurus(title: str, when: str) -> str:
    return (
        "<gmd:thesaurusName><gmd:CI_Citation>"
        f"<gmd:title><gco:CharacterString>{title}</gco:CharacterString></gmd:title>"
        "<gmd:date><gmd:CI_Date>"
        f"<gmd:date><gco:Date>{when}</gco:Date></gmd:date>"
        f"<gmd:dateType>{_code('CI_DateTypeCode', 'publication')}</gmd:dateType>"
        "</gmd:CI_Date></gmd:date>"
        "</gmd:CI_Citation></gmd:thesaurusName>"
    )


def _contact(role: str) -> str:
    return f"""<gmd:CI_ResponsibleParty>
      <gmd:organisationName><gco:CharacterString>{{organisation}}</gco:CharacterString>\
</gmd:organisationName>
      <gmd:contactInfo><gmd:CI_Contact><gmd:address><gmd:CI_Address><gmd:electronicMailAddress>\
<gco:CharacterString>{{email}}</gco:CharacterString></gmd:electronicMailAddress></gmd:CI_Address>\
</gmd:address></gmd:CI_Contact></gmd:contactInfo>
      <gmd:role>{_code("CI_RoleCode", role)}</gmd:role>
    </gmd:CI_ResponsibleParty>"""


# The whole document; {placeholders} are filled by generate_record, already escaped. Built once at
# import from constant parts only.
_TEMPLATE = f"""<?xml version="1.0" encoding="UTF-8"?>
<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd" \
xmlns:gco="http://www.isotc211.org/2005/gco" xmlns:gml="http://www.opengis.net/gml/3.2" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://www.isotc211.org/2005/gmd http://www.isotc211.org/2005/gmd/gmd.xsd">
  <gmd:fileIdentifier><gco:CharacterString>{{identifier}}</gco:CharacterString></gmd:fileIdentifier>
  <gmd:language>
    <gmd:LanguageCode codeList="http://www.loc.gov/standards/iso639-2/" \
codeListValue="eng">eng</gmd:LanguageCode>
  </gmd:language>
  <gmd:characterSet>{_code("MD_CharacterSetCode", "utf8")}</gmd:characterSet>
  <gmd:hierarchyLevel>{_code("MD_ScopeCode", "dataset")}</gmd:hierarchyLevel>
  <gmd:contact>
    {_contact("pointOfContact")}
  </gmd:contact>
  <gmd:dateStamp><gco:DateTime>{{datestamp}}</gco:DateTime></gmd:dateStamp>
  <gmd:metadataStandardName><gco:CharacterString>{METADATA_STANDARD_NAME}</gco:CharacterString></gmd:metadataStandardName>
  <gmd:metadataStandardVersion><gco:CharacterString>{METADATA_STANDARD_VERSION}</gco:CharacterString></gmd:metadataStandardVersion>
  <gmd:identificationInfo>
    <gmd:MD_DataIdentification>
      <gmd:citation>
        <gmd:CI_Citation>
          <gmd:title><gco:CharacterString>{{title}}</gco:CharacterString></gmd:title>
          <gmd:date>
            <gmd:CI_Date>
              <gmd:date><gco:Date>{{published}}</gco:Date></gmd:date>
              <gmd:dateType>{_code("CI_DateTypeCode", "publication")}</gmd:dateType>
            </gmd:CI_Date>
          </gmd:date>
        </gmd:CI_Citation>
      </gmd:citation>
      <gmd:abstract><gco:CharacterString>{{abstract}}</gco:CharacterString></gmd:abstract>
      <gmd:pointOfContact>
        {_contact("originator")}
      </gmd:pointOfContact>
      <gmd:descriptiveKeywords>
        <gmd:MD_Keywords>
          {{theme_keywords}}
          <gmd:type>{_code("MD_KeywordTypeCode", "theme")}</gmd:type>
          {_thesaurus("WMO_CategoryCode", "2012-03-01")}
        </gmd:MD_Keywords>
      </gmd:descriptiveKeywords>
      <gmd:descriptiveKeywords>
        <gmd:MD_Keywords>
          {{place_keywords}}
          <gmd:type>{_code("MD_KeywordTypeCode", "place")}</gmd:type>
          {_thesaurus("WMO Regional Associations and Members", "2012-03-01")}
        </gmd:MD_Keywords>
      </gmd:descriptiveKeywords>
      <gmd:resourceConstraints>
        <gmd:MD_LegalConstraints>
          <gmd:accessConstraints>{_code("MD_RestrictionCode", "otherRestrictions")}\
</gmd:accessConstraints>
          <gmd:otherConstraints><gco:CharacterString>{{policy}}</gco:CharacterString></gmd:otherConstraints>
          <gmd:otherConstraints><gco:CharacterString>GTSPriority{{priority}}</gco:CharacterString></gmd:otherConstraints>
        </gmd:MD_LegalConstraints>
      </gmd:resourceConstraints>
      <gmd:language>
        <gmd:LanguageCode codeList="http://www.loc.gov/standards/iso639-2/" \
codeListValue="eng">eng</gmd:LanguageCode>
      </gmd:language>
      <gmd:topicCategory>
        <gmd:MD_TopicCategoryCode>{{topic}}</gmd:MD_TopicCategoryCode>
      </gmd:topicCategory>
      <gmd:extent>
        <gmd:EX_Extent>
          <gmd:geographicElement>
            <gmd:EX_GeographicBoundingBox>
              <gmd:westBoundLongitude><gco:Decimal>{{west}}</gco:Decimal></gmd:westBoundLongitude>
              <gmd:eastBoundLongitude><gco:Decimal>{{east}}</gco:Decimal></gmd:eastBoundLongitude>
              <gmd:southBoundLatitude><gco:Decimal>{{south}}</gco:Decimal></gmd:southBoundLatitude>
              <gmd:northBoundLatitude><gco:Decimal>{{north}}</gco:Decimal></gmd:northBoundLatitude>
            </gmd:EX_GeographicBoundingBox>
          </gmd:geographicElement>
          <gmd:temporalElement>
            <gmd:EX_TemporalExtent>
              <gmd:extent>
                <gml:TimePeriod gml:id="{{gml_id}}">
                  <gml:beginPosition>{{begin}}</gml:beginPosition>
                  {{end_position}}
                </gml:TimePeriod>
              </gmd:extent>
            </gmd:EX_TemporalExtent>
          </gmd:temporalElement>
        </gmd:EX_Extent>
      </gmd:extent>
    </gmd:MD_DataIdentification>
  </gmd:identificationInfo>
  <gmd:distributionInfo>
    <gmd:MD_Distribution>
      <gmd:distributionFormat>
        <gmd:MD_Format>
          <gmd:name><gco:CharacterString>{{format}}</gco:CharacterString></gmd:name>
          <gmd:version><gco:CharacterString>current</gco:CharacterString></gmd:version>
        </gmd:MD_Format>
      </gmd:distributionFormat>
      <gmd:transferOptions>
        <gmd:MD_DigitalTransferOptions>
          <gmd:onLine>
            <gmd:CI_OnlineResource>
              <gmd:linkage><gmd:URL>{{url}}</gmd:URL></gmd:linkage>
              <gmd:protocol><gco:CharacterString>WWW:LINK</gco:CharacterString></gmd:protocol>
              <gmd:name><gco:CharacterString>{{slug}} data access</gco:CharacterString></gmd:name>
              <gmd:function>{_code("CI_OnLineFunctionCode", "download")}</gmd:function>
            </gmd:CI_OnlineResource>
          </gmd:onLine>
        </gmd:MD_DigitalTransferOptions>
      </gmd:transferOptions>
    </gmd:MD_Distribution>
  </gmd:distributionInfo>
</gmd:MD_Metadata>
"""
