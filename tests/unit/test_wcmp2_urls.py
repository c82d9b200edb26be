"""The WCMP2 collection's URLs: the site root from WISCAT_BASE_URL, and an id as one path
segment that reads back as itself."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wiscat.shared.wcmp2.identifiers import wcmp2_id
from wiscat.shared.wcmp2.urls import collection_url, item_url, path_segment, site_root

BASE = "http://gisc.example.org:8080/collections/wis2-discovery-metadata"
HOSTILE = [
    "urn:wmo:md:de-dwd:plain",
    "urn:wmo:md:de-dwd:a/b/revisions/c",
    "urn:wmo:md:de-dwd:~100%25 sure",
    "urn:wmo:md:de-dwd:%",
    "urn:wmo:md:de-dwd:with space",
    "urn:wmo:md:de-dwd:Zürich\u2013Δ",
    "urn:wmo:md:de-dwd:?query#fragment",
    "urn:wmo:md:de-dwd:..",
    wcmp2_id("de-dwd", "urn:x-wmo:md:int.wmo.wis::a b/ü:"),
]


def _item(url: str, base: str = BASE) -> tuple[str | None, ...]:
    """The decoded segments after ``{base}/items/``."""
    assert url.startswith(base + "/items/")
    rest = url[len(base + "/items/") :]
    assert urlsplit(url).path.endswith(rest)  # no query or fragment taken from the id
    return tuple(path_segment(part) for part in rest.split("/"))


@pytest.mark.parametrize("identifier", HOSTILE)
def test_a_hostile_id_is_one_segment_that_reads_back(identifier: str) -> None:
    url = item_url(BASE, identifier)
    assert _item(url) == (identifier,)
    assert ":" in url.rpartition("/")[2]  # ':' kept as it is
    assert " " not in url and url.isascii()
    assert _item(item_url(BASE, identifier, "0123456789abcdef")) == (
        identifier,
        "revisions",
        "0123456789abcdef",
    )


@given(st.text(min_size=1))
def test_any_id_round_trips(identifier: str) -> None:
    assert _item(item_url(BASE + "/", identifier)) == (identifier,)


def test_a_real_id_keeps_its_colons_and_escapes_its_percent() -> None:
    identifier = wcmp2_id("de-dwd", "x y")  # urn:wmo:md:de-dwd:~x%20y
    assert item_url(BASE, identifier) == f"{BASE}/items/urn:wmo:md:de-dwd:~x%2520y"


def test_a_segment_that_is_no_utf_8_reads_as_none() -> None:
    assert path_segment("%FF") is None
    assert path_segment("%C3%BC") == "ü"


@pytest.mark.parametrize(
    ("base_url", "root"),
    [
        ("http://127.0.0.1:8080/oai", "http://127.0.0.1:8080"),
        ("https://gisc.example.org/wis/oai", "https://gisc.example.org/wis"),
        ("https://gisc.example.org/wis/oai/", "https://gisc.example.org/wis"),
        ("https://gisc.example.org/catalogue/OAIHandler", "https://gisc.example.org/catalogue"),
    ],
)
def test_the_site_root_is_the_base_url_without_its_endpoint(base_url: str, root: str) -> None:
    assert site_root(base_url) == root
    assert collection_url(base_url) == root + "/collections/wis2-discovery-metadata"
