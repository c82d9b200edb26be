"""The WCMP2 geometry of a record's bounding boxes: across the antimeridian, on it, off the globe,
and several that overlap (docs/wis2.md's mapping table)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lxml import etree

from tests.support.wcmp2_documents import NS, edited, replace_text, report
from wiscat.shared.wcmp2.convert import Conversion

BOX = "//gmd:EX_GeographicBoundingBox"


def set_box(west: str, east: str, south: str = "-20", north: str = "10") -> Callable[..., None]:
    def edit(root: etree._Element) -> None:
        sides = (
            ("westBoundLongitude", west),
            ("eastBoundLongitude", east),
            ("southBoundLatitude", south),
            ("northBoundLatitude", north),
        )
        for side, text in sides:
            replace_text(root, f"{BOX}/gmd:{side}/gco:Decimal", text)

    return edit


def test_a_box_across_the_antimeridian(announceable: Callable[[bytes], Conversion]) -> None:
    from shapely.geometry import Point, shape

    conversion = announceable(edited(set_box("170", "-170")))
    geometry = conversion.record["geometry"]
    assert geometry["type"] == "MultiPolygon"
    area = shape(geometry)
    assert area.contains(Point(175, 0)) and area.contains(Point(-175, 0))
    assert not area.contains(Point(0, 0)) and not area.contains(Point(100, 0))
    assert area.area == pytest.approx(20 * 30)  # 20 degrees wide, 30 high: the Pacific strip
    assert area.is_valid


@pytest.mark.parametrize(
    ("west", "east", "kind", "width"),
    [
        ("180", "-170", "Polygon", 10),
        ("170", "-180", "Polygon", 10),
        ("-180", "180", "Polygon", 360),
    ],
)
def test_boxes_on_the_antimeridian(
    announceable: Callable[[bytes], Conversion], west: str, east: str, kind: str, width: float
) -> None:
    from shapely.geometry import shape

    geometry = announceable(edited(set_box(west, east))).record["geometry"]
    assert geometry["type"] == kind
    assert shape(geometry).area == pytest.approx(width * 30)


@pytest.mark.parametrize(
    ("box", "dropped"),
    [
        (("10", "20", "30", "-30"), True),
        (("200", "20"), True),
        (("x", "20"), True),
        (("5", "5", "7", "7"), False),
    ],
)
def test_boxes_off_the_globe_are_dropped(
    announceable: Callable[[bytes], Conversion], box: tuple[str, ...], dropped: bool
) -> None:
    conversion = announceable(edited(set_box(*box)))
    if dropped:
        assert conversion.record["geometry"] is None
        assert "not a box on the globe" in report(conversion)
    else:
        assert conversion.record["geometry"] == {"type": "Point", "coordinates": [5.0, 7.0]}


def boxes(*sides: tuple[str, str, str, str]) -> Callable[..., None]:
    """The record's bounding box made ``sides``, one box each (west, east, south, north)."""

    names = ("westBoundLongitude", "eastBoundLongitude", "southBoundLatitude", "northBoundLatitude")

    def edit(root: etree._Element) -> None:
        [box] = root.xpath(BOX, namespaces=NS)
        element = box.getparent()  # gmd:geographicElement
        for each in reversed(sides):
            copy = etree.fromstring(etree.tostring(element))
            for name, text in zip(names, each, strict=True):
                [number] = copy.xpath(f".//gmd:{name}/gco:Decimal", namespaces=NS)
                number.text = text
            element.addnext(copy)
        element.getparent().remove(element)

    return edit


def test_boxes_that_overlap_become_one_valid_geometry(
    announceable: Callable[[bytes], Conversion],
) -> None:
    """A MultiPolygon's polygons may not overlap (OGC Simple Features; the GDC's validator
    checks it): boxes that overlap or repeat become their envelope, and the report says so."""
    from shapely.geometry import Point, shape

    conversion = announceable(
        edited(
            boxes(
                ("0", "20", "0", "20"),
                ("10", "30", "10", "30"),  # overlaps the first
                ("0", "20", "0", "20"),  # the first again, as real records repeat it
                ("100", "110", "0", "10"),  # apart
            )
        )
    )
    geometry = conversion.record["geometry"]
    area = shape(geometry)
    assert area.is_valid, geometry
    assert geometry["type"] == "MultiPolygon" and len(geometry["coordinates"]) == 2
    for point in (Point(5, 5), Point(25, 25), Point(105, 5)):
        assert area.contains(point)
    assert not area.contains(Point(60, 5))
    assert "bounding boxes that overlap" in report(conversion)
