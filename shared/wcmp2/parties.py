"""Contacts: the metadata's (``gmd:contact``) and the resource's (``gmd:pointOfContact``).

A party that appears twice (the same organisation, name and means of contact, as the metadata
contact and as the originator, say) is one WCMP2 contact with both roles.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from lxml import etree
from rfc3986_validator import validate_rfc3986

from wiscat.shared.wcmp2.reading import NS, Notes, code, value, values

# ISO 19115 CI_RoleCode -> the WCMP2 contact-role code list (licensor, producer, processor, host).
# Never "publisher": the KPI text asks for it, but the code list lacks it and the test suite
# refuses it.
ROLES = {
    "originator": "producer",
    "principalInvestigator": "producer",
    "author": "producer",
    "owner": "licensor",
    "processor": "processor",
    "resourceProvider": "host",
    "custodian": "host",
    "distributor": "host",
    "publisher": "host",
}
# the code list's roles; a party with another role (pointOfContact, user, none) is a host
CONTACT_ROLES = frozenset({"licensor", "producer", "processor", "host"})
_DEFAULT_ROLE = "host"

# WCMP2's phone pattern, E.164
PHONE = re.compile(r"\+[1-9][0-9]{3,14}")
_PHONE_FILLER = re.compile(r"[\s().\-/]|\(0\)")
_HTTP = re.compile(r"https?://[^\s]+")
# RFC 3986's reserved and unreserved characters, and "%" (an escape already there)
_URI_CHARACTERS = ":/?#[]@!$&'()*+,;=-._~%"


def contacts(root: etree._Element, idents: list[etree._Element], notes: Notes) -> list[Any]:
    """The WCMP2 contacts of the record, duplicates merged."""
    parties = root.findall("gmd:contact/gmd:CI_ResponsibleParty", NS) + _under(
        idents, "gmd:pointOfContact/gmd:CI_ResponsibleParty"
    )
    merged: dict[str, dict[str, Any]] = {}
    for party in parties:
        contact = _contact(party, notes)
        if contact is None:
            continue
        role = contact.pop("roles")[0]
        key = repr(sorted(contact.items()))
        kept = merged.setdefault(key, {**contact, "roles": []})
        if role not in kept["roles"]:
            kept["roles"].append(role)
    return list(merged.values())


def organisations(root: etree._Element, idents: list[etree._Element]) -> list[str]:
    """The organisation names of every contact, for the centre rules."""
    return values(
        root.findall("gmd:contact/gmd:CI_ResponsibleParty/gmd:organisationName", NS)
        + _under(idents, "gmd:pointOfContact/gmd:CI_ResponsibleParty/gmd:organisationName")
    )


def _contact(party: etree._Element, notes: Notes) -> dict[str, Any] | None:
    organisation = value(party.find("gmd:organisationName", NS))
    name = value(party.find("gmd:individualName", NS))
    iso_role = code(party.find("gmd:role", NS))
    if not organisation:
        notes.dropped.append(
            f"contact {name or '(unnamed)'} ({iso_role or 'no role'}): no organisation, which "
            "WCMP2 requires"
        )
        return None
    contact: dict[str, Any] = {"organization": organisation}
    if name:
        contact["name"] = name
    position = value(party.find("gmd:positionName", NS))
    if position:
        contact["position"] = position
    info = party.find("gmd:contactInfo/gmd:CI_Contact", NS)
    if info is not None:
        _means(info, organisation, contact, notes)
    role = ROLES.get(iso_role)
    if role is None:
        role = _DEFAULT_ROLE
        notes.guessed.append(
            f"contact {organisation}: role {_DEFAULT_ROLE} for ISO role {iso_role or '(none)'}, "
            "which the WCMP2 code list lacks"
        )
    contact["roles"] = [role]
    return contact


def _means(info: etree._Element, who: str, contact: dict[str, Any], notes: Notes) -> None:
    phones = []
    for number in values(info.findall("gmd:phone/gmd:CI_Telephone/gmd:voice", NS)):
        phone = _phone(number)
        if phone is None:
            notes.dropped.append(f"contact {who}: phone {number!r}, not an international number")
        elif {"value": phone} not in phones:
            phones.append({"value": phone})
    for number in values(info.findall("gmd:phone/gmd:CI_Telephone/gmd:facsimile", NS)):
        notes.dropped.append(f"contact {who}: fax {number!r} (WCMP2 has no fax)")
    if phones:
        contact["phones"] = phones
    address = info.find("gmd:address/gmd:CI_Address", NS)
    if address is not None:
        _address(address, who, contact, notes)
    links = []
    for url in values(info.findall("gmd:onlineResource/gmd:CI_OnlineResource/gmd:linkage", NS)):
        # WCMP2's contact link is a URI (format uri): an IRI's other characters escaped
        href = quote(url, safe=_URI_CHARACTERS)
        if _HTTP.fullmatch(url) and validate_rfc3986(href, rule="URI"):
            links.append({"href": href, "rel": "about", "type": "text/html"})
        else:
            notes.dropped.append(f"contact {who}: link {url!r}, not an http(s) URL")
    if links:
        contact["links"] = links
    for element in ("hoursOfService", "contactInstructions"):  # the same names in both
        text = value(info.find(f"gmd:{element}", NS))
        if text:
            contact[element] = text


def _address(address: etree._Element, who: str, contact: dict[str, Any], notes: Notes) -> None:
    emails = []
    for mail in values(address.findall("gmd:electronicMailAddress", NS)):
        if "@" in mail and " " not in mail:
            emails.append({"value": mail})
        else:
            notes.dropped.append(f"contact {who}: e-mail {mail!r}, not an address")
    if emails:
        contact["emails"] = emails
    postal: dict[str, Any] = {}
    lines = values(address.findall("gmd:deliveryPoint", NS))
    if lines:
        postal["deliveryPoint"] = lines
    for element in ("city", "administrativeArea", "postalCode", "country"):
        text = value(address.find(f"gmd:{element}", NS))
        if text:
            postal[element] = text
    if postal:
        contact["addresses"] = [postal]


def _phone(number: str) -> str | None:
    """``number`` in E.164 (``+4969...``): spaces, dots, dashes, brackets and a trunk ``(0)``
    taken out, ``00`` read as ``+``; None when it is then no international number."""
    digits = _PHONE_FILLER.sub("", number.replace("(0)", ""))
    if digits.startswith("00"):
        digits = "+" + digits[2:]
    return digits if PHONE.fullmatch(digits) else None


def _under(parents: list[etree._Element], path: str) -> list[etree._Element]:
    # a helper of each module's own, called with literal paths only (RELIABILITY X09's scan)
    return [found for parent in parents for found in parent.findall(path, NS)]
