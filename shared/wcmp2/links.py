"""Links: the record's online resources, its licence, and its own WCMP 1.3 form at this node.

WCMP2 §7.1.17 (links) and pywcmp's links test accept IANA link relations and those of the
WCMP2 link-type code list; the relations written here are all IANA ones.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from lxml import etree

from wiscat.shared.wcmp2.reading import NS, Notes, code, value

# ISO 19115 CI_OnLineFunctionCode -> IANA link relation; any other function: related
_BY_FUNCTION = {"download": "data", "information": "about", "search": "search"}
RELATIONS = frozenset({"data", "about", "search", "related", "license", "alternate"})
_SCHEMES = ("https://", "http://", "ftp://", "sftp://")


def links(root: etree._Element, notes: Notes) -> list[dict[str, Any]]:
    """The distribution's online resources as WCMP2 links, each URL once."""
    found: dict[str, dict[str, Any]] = {}
    resources = root.findall(
        "gmd:distributionInfo/gmd:MD_Distribution/gmd:transferOptions/"
        "gmd:MD_DigitalTransferOptions/gmd:onLine/gmd:CI_OnlineResource",
        NS,
    )
    for resource in resources:
        href = value(resource.find("gmd:linkage", NS))
        if not href.startswith(_SCHEMES) or any(c.isspace() for c in href):
            # mqtt:// among them: WCMP2 wants a WIS2 channel with it, which WCMP 1.3 has not
            notes.dropped.append(f"link {href!r}: not an http(s) or ftp URL")
            continue
        if href in found:
            continue
        link: dict[str, Any] = {
            "href": href,
            "rel": _BY_FUNCTION.get(code(resource.find("gmd:function", NS)), "related"),
        }
        title = value(resource.find("gmd:name", NS)) or value(resource.find("gmd:description", NS))
        if title:
            link["title"] = title
        found[href] = link
    return list(found.values())


def licence_link(href: str) -> dict[str, Any]:
    """The link to the conditions of a recommended record's data."""
    return {"href": href, "rel": "license", "title": "Licence", "type": "text/html"}


def iso_link(oai_base_url: str, file_identifier: str) -> dict[str, Any]:
    """The link to the record's WCMP 1.3 form, as this node's OAI-PMH GetRecord serves it."""
    query = "?verb=GetRecord&metadataPrefix=iso19139&identifier=" + quote(file_identifier, safe="")
    return {
        "href": oai_base_url + query,
        "rel": "alternate",
        "title": "The record in WMO Core Metadata Profile 1.3 (ISO 19139)",
        "type": "application/xml",
    }
