"""A WCMP 1.3 record (ISO 19139) as a WCMP2 2.3.0 record, with its conversion report.

:func:`convert` is pure: the same document and rules give the same record and the same
:meth:`Conversion.content` bytes (keys sorted, no spaces), which a notification's integrity
hash can name. The report says what was guessed (the centre-id, a discipline, the data policy,
a contact role), what was dropped (fax numbers, GTS priorities, distribution scopes, values
WCMP2 cannot hold), and why the record cannot be valid (:func:`.validation.rule_errors` and
what the mapping itself lacks), so that an invalid record is never announced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lxml import etree

from wiscat.shared.iso19139 import ROOT_TAG, RecordError, file_identifier, md_datestamp, parse_xml
from wiscat.shared.wcmp2 import centres, extents, links, parties, vocabulary
from wiscat.shared.wcmp2.centres import CentreRule
from wiscat.shared.wcmp2.identifiers import wcmp2_id
from wiscat.shared.wcmp2.reading import NS, Notes, code, moment, stamp, value
from wiscat.shared.wcmp2.validation import rule_errors

CONFORMANCE = "http://wis.wmo.int/spec/wcmp/2/conf/core"
# ISO 19115 MD_ScopeCode -> WCMP2 resource type (code list resource-type)
_TYPES = {"dataset": "dataset", "series": "dataset", "service": "service"}


@dataclass(frozen=True, slots=True)
class Conversion:
    """A converted record: ``record`` (its ``id`` None when no centre-id was found) and the
    report; ``valid`` when ``invalid`` lists no reason."""

    file_identifier: str
    record: dict[str, Any]
    guessed: tuple[str, ...]
    dropped: tuple[str, ...]
    invalid: tuple[str, ...]

    @property
    def valid(self) -> bool:
        """Whether the record may be announced."""
        return not self.invalid

    def content(self) -> bytes:
        """The record as the bytes served and hashed: JSON, UTF-8, keys sorted, no spaces."""
        return json.dumps(
            self.record, ensure_ascii=False, sort_keys=True, separators=(",", ":")
        ).encode("utf-8")

    def report(self) -> dict[str, Any]:
        """The conversion report, for an operator."""
        return {
            "fileIdentifier": self.file_identifier,
            "id": self.record.get("id"),
            "valid": self.valid,
            "guessed": list(self.guessed),
            "dropped": list(self.dropped),
            "invalid": list(self.invalid),
        }


def convert(
    document: bytes | str, rules: Sequence[CentreRule], *, oai_base_url: str | None = None
) -> Conversion:
    """Convert one stored ISO 19139 record; ``oai_base_url``, this node's ``/oai`` URL, adds a
    link to the record's WCMP 1.3 form. RecordError when the document is no ISO 19139 record."""
    root = parse_xml(document)
    if root.tag != ROOT_TAG:
        raise RecordError(f"root element is {root.tag}, expected gmd:MD_Metadata")
    fid = file_identifier(root)
    notes = Notes()
    idents = root.findall("gmd:identificationInfo/*", NS)
    record: dict[str, Any] = {
        "id": _id(root, idents, fid, rules, notes),
        "conformsTo": [CONFORMANCE],
        "type": "Feature",
    }
    where = extents.iso_extents(idents)
    record["time"] = extents.time(where, notes)
    record["geometry"] = extents.geometry(where, notes)
    found = vocabulary.read(idents, notes)
    properties = _properties(root, idents, found, notes)
    record["properties"] = properties
    record["links"] = links.links(root, notes)
    if properties["wmo:dataPolicy"] == "recommended":
        record["links"] += _licence(found.licences, rules, record["id"], notes)
    if oai_base_url:
        record["links"].append(links.iso_link(oai_base_url, fid))
    invalid = notes.invalid + [e for e in rule_errors(record) if e not in notes.invalid]
    return Conversion(
        fid, record, tuple(notes.guessed), tuple(notes.dropped), tuple(dict.fromkeys(invalid))
    )


def _id(
    root: etree._Element,
    idents: list[etree._Element],
    fid: str,
    rules: Sequence[CentreRule],
    notes: Notes,
) -> str | None:
    if not rules:
        notes.invalid.append("no centre-id: WISCAT_WIS2_CENTRES names no WIS2 centre")
        return None
    organisations = parties.organisations(root, idents)
    rule = centres.matching_rule(rules, fid, organisations)
    if rule is None:
        notes.invalid.append(
            f"no centre-id: no rule of WISCAT_WIS2_CENTRES matches the fileIdentifier or an "
            f"organisation ({'; '.join(organisations) or 'none'})"
        )
        return None
    notes.guessed.append(f"centre-id {rule.centre_id}, by the rule {rule}")
    return wcmp2_id(rule.centre_id, fid)


def _properties(
    root: etree._Element,
    idents: list[etree._Element],
    found: vocabulary.Vocabulary,
    notes: Notes,
) -> dict[str, Any]:
    title = value(next(iter(_under(idents, "gmd:citation/gmd:CI_Citation/gmd:title")), None))
    description = value(next(iter(_under(idents, "gmd:abstract")), None))
    if not title:
        notes.invalid.append("no title (gmd:citation/gmd:CI_Citation/gmd:title)")
    if not description and title:
        description = title
        notes.guessed.append("description: the title (the record has no gmd:abstract)")
    properties: dict[str, Any] = {
        "type": _type(root, notes),
        "title": title,
        "description": description,
        "themes": vocabulary.themes(found, idents, notes),
        "contacts": parties.contacts(root, idents, notes),
        "wmo:dataPolicy": vocabulary.data_policy(found, notes),
    }
    if found.keywords:
        properties["keywords"] = found.keywords
    if found.rights:
        properties["rights"] = "\n".join(dict.fromkeys(found.rights))
    if not properties["contacts"]:
        notes.invalid.append("no contact with an organisation (WCMP2 needs one)")
    properties.update(_dates(root, idents, notes))
    return properties


def _type(root: etree._Element, notes: Notes) -> str:
    scope = code(root.find("gmd:hierarchyLevel", NS))
    found = _TYPES.get(scope)
    if found is None:
        found = "dataset"
        notes.guessed.append(f"resource type dataset for hierarchy level {scope or '(none)'}")
    return found


def _dates(root: etree._Element, idents: list[etree._Element], notes: Notes) -> dict[str, str]:
    try:
        updated = md_datestamp(root)
    except RecordError as exc:
        notes.dropped.append(str(exc))
        updated = None
    cited: dict[str, datetime] = {}
    for when in _under(idents, "gmd:citation/gmd:CI_Citation/gmd:date/gmd:CI_Date"):
        kind = code(when.find("gmd:dateType", NS))
        found = moment(value(when.find("gmd:date", NS)))
        if isinstance(found, str) and len(found) == len("2024-01-01"):
            found = datetime.fromisoformat(found + "T00:00:00+00:00")
        if isinstance(found, datetime) and kind not in cited:
            cited[kind] = found
    created = cited.get("creation") or cited.get("publication") or updated
    if created is None:
        notes.invalid.append("no date: neither gmd:dateStamp nor a creation or publication date")
        return {}
    dates = {"created": stamp(created)}
    if updated is not None:
        if created > updated:
            notes.guessed.append("created: the dateStamp (the citation's date is later)")
            dates["created"] = stamp(updated)
        dates["updated"] = stamp(updated)
    return dates


def _licence(
    named: list[str], rules: Sequence[CentreRule], identifier: str | None, notes: Notes
) -> list[dict[str, Any]]:
    """The licence link of recommended data (pywcmp's data policy test asks for one): the
    record's own, else its centre's from the rules."""
    if named:
        return [links.licence_link(named[0])]
    if identifier is None:
        return []  # no centre-id: said already
    centre_id = identifier.split(":")[3]
    href = centres.licence(rules, centre_id)
    if href is None:
        notes.invalid.append(
            "recommended data needs a licence link, and the record names none: give its "
            f"centre one ({centre_id}=licence:URL in WISCAT_WIS2_CENTRES)"
        )
        return []
    notes.guessed.append(f"licence link {href}: the centre's ({centre_id}=licence:...)")
    return [links.licence_link(href)]


def _under(parents: list[etree._Element], path: str) -> list[etree._Element]:
    # a helper of each module's own, called with literal paths only (RELIABILITY X09's scan)
    return [found for parent in parents for found in parent.findall(path, NS)]
