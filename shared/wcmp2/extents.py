"""Where and when: the record's bounding boxes as GeoJSON, its temporal extent as WCMP2 time.

A box whose west edge lies east of its east edge crosses the antimeridian (ISO 19115
EX_GeographicBoundingBox, and OGC API's bbox): it becomes a MultiPolygon split at 180°, so that
it covers the Pacific strip it means and not the rest of the world. The polygons of a
MultiPolygon may not overlap (OGC Simple Features, which a Global Discovery Catalogue's
validator checks): boxes that overlap, touch or repeat become their envelope.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime
from typing import Any

from lxml import etree

from wiscat.shared.iso19139 import GML, GML_LEGACY
from wiscat.shared.wcmp2.reading import NS, Notes, moment, stamp, value

# WCMP2's time resolution (an ISO 8601 duration), as its schema and pywcmp test it
DURATION = re.compile(
    r"^(-?)P(?=\d|T\d)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)([DW]))?"
    r"(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)
# gml:timeInterval's units (GML 3.2 TimeUnitType) as ISO 8601 duration designators
_UNITS = {"year": "Y", "month": "M", "day": "D", "hour": "TH", "minute": "TM", "second": "TS"}
_OPEN = ".."
# west, east, south, north, west < east
Rectangle = tuple[float, float, float, float]


def iso_extents(idents: list[etree._Element]) -> list[etree._Element]:
    """The EX_Extent of every identification (srv:extent for a service, ISO 19119)."""
    return _under(idents, "gmd:extent/gmd:EX_Extent") + _under(idents, "srv:extent/gmd:EX_Extent")


def geometry(extents: list[etree._Element], notes: Notes) -> dict[str, Any] | None:
    """The GeoJSON geometry of the record's bounding boxes, or None if it has none."""
    rectangles: list[Rectangle] = []
    boxes = _under(extents, "gmd:geographicElement/gmd:EX_GeographicBoundingBox")
    for box in boxes:
        sides = _sides(box)
        if sides is None:
            notes.dropped.append(f"bounding box {_written(box)}: not a box on the globe")
            continue
        west, east, south, north = sides
        if west == east or south == north:
            if len(boxes) == 1:
                return _degenerate(west, east, south, north)
            notes.dropped.append(f"bounding box {_written(box)}: no area, beside other boxes")
            continue
        if west < east:
            rectangles.append((west, east, south, north))
        else:  # across the antimeridian
            rectangles.extend(
                (a, b, south, north) for a, b in ((west, 180.0), (-180.0, east)) if a < b
            )
    apart = _apart(rectangles)
    if len(apart) < len(rectangles):
        notes.guessed.append(
            f"bounding boxes that overlap, touch or repeat: {len(rectangles)} made "
            f"{len(apart)}, each the envelope of those it met"
        )
    polygons = [_ring(*rectangle) for rectangle in apart]
    if not polygons:
        return None
    if len(polygons) == 1:
        return {"type": "Polygon", "coordinates": polygons[0]}
    return {"type": "MultiPolygon", "coordinates": polygons}


def _apart(rectangles: list[Rectangle]) -> list[Rectangle]:
    """``rectangles`` with each two that overlap or touch replaced by their envelope, until
    none do."""
    apart = list(rectangles)
    merged = True
    while merged:
        merged = False
        for i, j in itertools.combinations(range(len(apart)), 2):
            (w1, e1, s1, n1), (w2, e2, s2, n2) = apart[i], apart[j]
            if w1 <= e2 and w2 <= e1 and s1 <= n2 and s2 <= n1:
                apart[i] = (min(w1, w2), max(e1, e2), min(s1, s2), max(n1, n2))
                del apart[j]
                merged = True
                break
    return apart


def _sides(box: etree._Element) -> tuple[float, float, float, float] | None:
    try:
        west, east, south, north = (
            float(value(box.find(f"gmd:{side}", NS)))
            for side in (
                "westBoundLongitude",
                "eastBoundLongitude",
                "southBoundLatitude",
                "northBoundLatitude",
            )
        )
    except ValueError:
        return None
    lons_ok = -180 <= west <= 180 and -180 <= east <= 180
    if not lons_ok or not -90 <= south <= north <= 90:
        return None  # also NaN, which compares false
    return west, east, south, north


def _written(box: etree._Element) -> str:
    return ",".join(value(side) or "?" for side in box.iterchildren()) or "(empty)"


def _ring(west: float, east: float, south: float, north: float) -> list[list[list[float]]]:
    # counter-clockwise, as RFC 7946 §3.1.6 asks of an exterior ring
    return [[[west, south], [east, south], [east, north], [west, north], [west, south]]]


def _degenerate(west: float, east: float, south: float, north: float) -> dict[str, Any]:
    if west == east and south == north:
        return {"type": "Point", "coordinates": [west, south]}
    return {"type": "LineString", "coordinates": [[west, south], [east, north]]}


def time(extents: list[etree._Element], notes: Notes) -> dict[str, Any] | None:
    """WCMP2 ``time`` from the first temporal extent, or None (the key stays, null)."""
    for gml in (GML, GML_LEGACY):
        for period in _under(extents, "gmd:temporalElement/gmd:EX_TemporalExtent/gmd:extent"):
            found = period.find(f"{{{gml}}}TimePeriod")
            if found is not None:
                return _period(found, gml, notes)
            instant = period.find(f"{{{gml}}}TimeInstant/{{{gml}}}timePosition")
            if instant is not None:
                return _instant(instant, notes)
    return None


def _period(period: etree._Element, gml: str, notes: Notes) -> dict[str, Any] | None:
    ends = []
    for tag, nested in (("beginPosition", "begin"), ("endPosition", "end")):
        position = period.find(f"{{{gml}}}{tag}")
        if position is None:
            position = period.find(f"{{{gml}}}{nested}/{{{gml}}}TimeInstant/{{{gml}}}timePosition")
        ends.append(_end(position))
    begin, end = ends
    if begin is None or end is None:
        notes.dropped.append(f"temporal extent {_spoken(period)}: not ISO 8601 dates")
        return None
    if begin == _OPEN and end == _OPEN:
        notes.dropped.append("temporal extent: open at both ends, it says nothing")
        return None
    shortest = min(len(begin), len(end))  # 2024 is not before 2024-05-01: compare as written
    if _OPEN not in (begin, end) and end[:shortest] < begin[:shortest]:
        notes.dropped.append(f"temporal extent {begin}/{end}: it ends before it begins")
        return None
    found: dict[str, Any] = {"interval": [begin, end]}
    resolution = _resolution(period, gml, notes)
    if resolution is not None:
        found["resolution"] = resolution
    return found


def _end(position: etree._Element | None) -> str | None:
    if position is None:
        return _OPEN
    text = (position.text or "").strip()
    if not text:
        # indeterminatePosition "now", "unknown", "after", "before", or nothing: open
        return _OPEN
    when = moment(text)
    if when is None:
        return None
    return stamp(when) if isinstance(when, datetime) else when


def _instant(position: etree._Element, notes: Notes) -> dict[str, Any] | None:
    when = moment((position.text or "").strip())
    if when is None:
        notes.dropped.append(f"temporal extent {_spoken(position)}: not an ISO 8601 date")
        return None
    if isinstance(when, datetime):
        return {"timestamp": stamp(when)}
    if len(when) == len("2024-01-01"):
        return {"date": when}
    return {"interval": [when, when]}


def _resolution(period: etree._Element, gml: str, notes: Notes) -> str | None:
    duration = period.find(f"{{{gml}}}duration")
    if duration is not None and (duration.text or "").strip():
        text = (duration.text or "").strip()
        if DURATION.match(text):
            return text
        notes.dropped.append(f"time resolution {text!r}: not an ISO 8601 duration")
        return None
    interval = period.find(f"{{{gml}}}timeInterval")
    if interval is None:
        return None
    unit = _UNITS.get((interval.get("unit") or "").strip())
    count = (interval.text or "").strip()
    if unit is None or not count.isdigit() or int(count) == 0:
        notes.dropped.append(f"time resolution {count} {interval.get('unit')!r}: not a duration")
        return None
    time_part = unit.startswith("T")
    return f"P{'T' if time_part else ''}{int(count)}{unit[-1]}"


def _spoken(element: etree._Element) -> str:
    return repr(" ".join("".join(str(text) for text in element.itertext()).split())[:60])


def _under(parents: list[etree._Element], path: str) -> list[etree._Element]:
    # a helper of each module's own, called with literal paths only (RELIABILITY X09's scan)
    return [found for parent in parents for found in parent.findall(path, NS)]
