"""What the mapping reads from an ISO 19139 tree, and the notes it takes as it goes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lxml import etree

from wiscat.shared.iso19139 import GCO, GMD, GML, GML_LEGACY, GMX, SRV, XLINK

NS = {"gmd": GMD, "gco": GCO, "gmx": GMX, "srv": SRV, "gml": GML, "gml0": GML_LEGACY}
HREF = f"{{{XLINK}}}href"


@dataclass
class Notes:
    """What a conversion guessed, dropped, and why its record cannot be valid."""

    guessed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


def flat(element: etree._Element) -> str:
    """All text below ``element``, runs of whitespace folded to one space."""
    if len(element) == 0:  # no child node: the usual gco:CharacterString, read at once
        return " ".join((element.text or "").split())
    return " ".join("".join(str(text) for text in element.itertext()).split())


def value(prop: etree._Element | None) -> str:
    """The value of an ISO property such as ``<gmd:title><gco:CharacterString>``: its child's
    text (a gco:CharacterString, gmx:Anchor, gmd:URL, code list element...), or a code list
    element's codeListValue when it has no text; "" for None."""
    if prop is None:
        return ""
    for child in prop:
        if isinstance(child.tag, str):
            return flat(child) or (child.get("codeListValue") or "").strip()
    return flat(prop)


def code(prop: etree._Element | None) -> str:
    """A code list property's value: its element's codeListValue, else its text."""
    if prop is None:
        return ""
    for child in prop:
        if isinstance(child.tag, str):
            return (child.get("codeListValue") or "").strip() or flat(child)
    return ""


def values(props: Iterable[etree._Element]) -> list[str]:
    """The non-empty values of ``props``, each once, in order."""
    return list(dict.fromkeys(text for text in map(value, props) if text))


_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")
# a date, year-month or year, with the time zone xs:date allows (which a day without a time
# cannot use: it is left out)
_DATE = re.compile(r"(\d{4}(?:-\d{2}(?:-\d{2})?)?)(?:Z|[+-]\d{2}:\d{2})?")


def moment(text: str) -> datetime | str | None:
    """An ISO 8601 value of a record as a UTC datetime (a date-time), the text itself (a date,
    a year-month or a year: no time zone to make it a moment), or None if it is neither."""
    text = text.strip()
    if _DATE_TIME.fullmatch(text):
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        except (ValueError, OverflowError):  # 0001-01-01T00:00:00+01:00 is before year 1
            return None
    date = _DATE.fullmatch(text)
    if date:
        text = date.group(1)
        try:  # a year or year-month completed to a day, only to check it
            datetime.strptime(text + "-01-01"[len(text) - 4 :], "%Y-%m-%d")
        except ValueError:
            return None
        return text
    return None


def stamp(when: datetime) -> str:
    """A UTC date-time as WCMP2 writes it (RFC 3339, whole seconds, ``Z``)."""
    # not strftime("%Y"), which writes the year 999 as "999", not "0999"
    return when.astimezone(UTC).replace(microsecond=0, tzinfo=None).isoformat() + "Z"
