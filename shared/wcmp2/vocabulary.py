"""Keywords, themes and the data policy, read from the record's keywords and constraints.

WCMP 1.3 keeps its WMO vocabularies in keywords (thesaurus WMO_CategoryCode and others) and in
``gmd:otherConstraints`` (WMO_DataLicenseCode, WMO_GTSProductCategoryCode). WCMP2 wants themes
(one of them from the WIS2 topic hierarchy's earth-system disciplines), keywords, and
``wmo:dataPolicy`` (WMO Unified Data Policy, Res. 1 (Cg-Ext(2021)): core or recommended).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from wiscat.shared.wcmp2.reading import HREF, NS, Notes, value

ESD_SCHEME = "https://codes.wmo.int/wis/topic-hierarchy/earth-system-discipline"
CATEGORY_SCHEME = "http://wis.wmo.int/2012/codelists/WMOCodeLists#WMO_CategoryCode"
TOPIC_SCHEME = "https://standards.iso.org/iso/19139/resources/gmxCodelists.xml#MD_TopicCategoryCode"
# the first level of the earth-system-discipline table (WIS2 Topic Hierarchy 1.3.0)
DISCIPLINES = frozenset(
    {"atmospheric-composition", "climate", "cryosphere", "hydrology", "ocean", "space-weather",
     "weather"}
)  # fmt: skip
_GUESSED_DISCIPLINE = "weather"

# WMO_CategoryCode (WMO Core 1.3 code lists) -> earth-system discipline
_BY_CATEGORY = {
    **dict.fromkeys(
        ("weatherObservations", "weatherForecasts", "meteorology", "synopticMeteorology",
         "synopMeteorology", "aerology", "marineAerology", "marineMeteorology", "rocketSounding",
         "satelliteObservation", "airplaneObservation", "observationPlatform",
         "aviationMeteorology"),
        "weather",
    ),
    **dict.fromkeys(("climatology", "landMeteorologyClimate", "agriculturalMeteorology"),
                    "climate"),
    **dict.fromkeys(("hydrology", "landHydrology", "waterPollution", "landWaterPollution"),
                    "hydrology"),
    **dict.fromkeys(("oceanography", "seaPollution"), "ocean"),
    **dict.fromkeys(("glaciology",), "cryosphere"),
    **dict.fromkeys(("pollution", "airPollution", "actinometry", "atmosphericComposition",
                     "landPollution"), "atmospheric-composition"),
    **dict.fromkeys(("spaceWeather",), "space-weather"),
}  # fmt: skip
# ISO 19115 MD_TopicCategoryCode -> earth-system discipline, when no category code says one
_BY_TOPIC = {
    "climatologyMeteorologyAtmosphere": "weather",
    "oceans": "ocean",
    "inlandWaters": "hydrology",
}
# WMO_DataLicenseCode -> wmo:dataPolicy: essential and unrestricted data are core, data with
# conditions (additional, other) recommended
POLICIES = {
    "wmoessential": "core",
    "nolimitation": "core",
    "wmoadditional": "recommended",
    "wmoother": "recommended",
}
_GTS_PRIORITY = re.compile(r"gtspriority[1-4]")
_SCOPES = frozenset({"globalexchange", "regionalexchange", "originatingcentre"})
# thesauri whose keywords are WMO codes read elsewhere, not free keywords
_CODE_THESAURI = ("WMO_DistributionScopeCode", "WMO_DataLicenseCode", "WMO_GTSProductCategoryCode")


@dataclass
class Vocabulary:
    """What the keywords and constraints say."""

    keywords: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)  # the codes as written
    licences: list[str] = field(default_factory=list)  # http(s) URLs in the constraints
    rights: list[str] = field(default_factory=list)


def read(idents: list[etree._Element], notes: Notes) -> Vocabulary:
    """The record's keywords, WMO category codes, data policy codes and rights."""
    found = Vocabulary()
    for keywords in _under(idents, "gmd:descriptiveKeywords/gmd:MD_Keywords"):
        thesaurus = value(keywords.find("gmd:thesaurusName/gmd:CI_Citation/gmd:title", NS))
        for word in (value(k) for k in keywords.findall("gmd:keyword", NS)):
            if word:
                _keyword(word, thesaurus, found, notes)
    constraints = _under(idents, "gmd:resourceConstraints/*")
    for prop in _under(constraints, "gmd:otherConstraints") + _under(
        constraints, "gmd:useLimitation"
    ):
        text = value(prop)
        if _code(text, found, notes):
            continue
        href = next((child.get(HREF) for child in prop if child.get(HREF)), None)
        if href and href.startswith(("https://", "http://")):
            found.licences.append(href)
        if text:
            found.rights.append(text)
    found.keywords = list(dict.fromkeys(found.keywords))
    return found


def _keyword(word: str, thesaurus: str, found: Vocabulary, notes: Notes) -> None:
    if "WMO_CategoryCode" in thesaurus or word in _BY_CATEGORY:
        found.categories.append(word)
    elif not _code(word, found, notes):
        if any(name in thesaurus for name in _CODE_THESAURI):
            notes.dropped.append(f"keyword {word!r} of {thesaurus}: no WCMP2 property holds it")
        else:
            found.keywords.append(word)


def _code(text: str, found: Vocabulary, notes: Notes) -> bool:
    """Whether ``text`` is a WMO code of a data policy, a GTS priority or a distribution scope
    (taken, or noted as dropped)."""
    folded = "".join(text.split()).casefold()
    if folded in POLICIES:
        found.policies.append(text)
    elif _GTS_PRIORITY.fullmatch(folded):
        notes.dropped.append(f"{text} (GTS priority: WIS2 has no GTS)")
    elif folded in _SCOPES:
        notes.dropped.append(f"{text} (distribution scope: a WIS2 topic says where data goes)")
    else:
        return False
    return True


def themes(found: Vocabulary, idents: list[etree._Element], notes: Notes) -> list[dict[str, Any]]:
    """WCMP2 themes: the earth-system disciplines, the WMO categories, the ISO topics."""
    topics = [
        (element.text or "").strip()
        for element in _under(idents, "gmd:topicCategory/gmd:MD_TopicCategoryCode")
    ]
    topics = list(dict.fromkeys(topic for topic in topics if topic))
    categories = list(dict.fromkeys(found.categories))
    disciplines = [_BY_CATEGORY[c] for c in categories if c in _BY_CATEGORY]
    if not disciplines:
        disciplines = [_BY_TOPIC[t] for t in topics if t in _BY_TOPIC]
    if not disciplines:
        disciplines = [_GUESSED_DISCIPLINE]
        notes.guessed.append(
            f"earth-system discipline {_GUESSED_DISCIPLINE}: no WMO category code or ISO "
            "topic category names one"
        )
    result = [_theme(ESD_SCHEME, list(dict.fromkeys(disciplines)), urls=True)]
    if categories:
        result.append(_theme(CATEGORY_SCHEME, categories))
    if topics:
        result.append(_theme(TOPIC_SCHEME, topics))
    return result


def _theme(scheme: str, ids: list[str], *, urls: bool = False) -> dict[str, Any]:
    concepts = [{"id": i, "url": f"{scheme}/{i}"} if urls else {"id": i} for i in ids]
    return {"concepts": concepts, "scheme": scheme}


def data_policy(found: Vocabulary, notes: Notes) -> str:
    """``wmo:dataPolicy`` from the data policy codes; guessed (and noted) when there are none
    or they disagree: recommended, which promises no free and unrestricted exchange."""
    policies = {POLICIES["".join(code.split()).casefold()] for code in found.policies}
    if len(policies) == 1:
        return policies.pop()
    if policies:
        notes.guessed.append(
            f"data policy recommended: the record says both ({', '.join(found.policies)})"
        )
    else:
        notes.guessed.append("data policy recommended: the record has no WMO_DataLicenseCode")
    return "recommended"


def _under(parents: list[etree._Element], path: str) -> list[etree._Element]:
    # a helper of each module's own, called with literal paths only (RELIABILITY X09's scan)
    return [found for parent in parents for found in parent.findall(path, NS)]
