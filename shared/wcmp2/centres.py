"""Which WIS2 centre-ids this node speaks for, and which one a record belongs to.

``WISCAT_WIS2_CENTRES`` holds rules separated by ``;``, each ``CENTRE-ID=KIND:VALUE`` or a bare
``CENTRE-ID``, tried in the order written; the first that matches names the record's centre:

=========================================== ================================================
``de-dwd=prefix:urn:x-wmo:md:de.dwd.``      a fileIdentifier beginning with the value
                                            (case as written)
``de-dwd=originator:Deutscher Wetterdienst``  a contact's organisation (gmd:contact or
                                            gmd:pointOfContact) equal to the value, case and
                                            runs of spaces aside
``de-dwd``                                  every record (a node that speaks for one centre)
``de-dwd=licence:https://www.dwd.de/terms``   not a match: the licence link of the centre's
                                            recommended records that name none
=========================================== ================================================

A record no rule matches has no centre-id, and so no valid WCMP2 record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from wiscat.shared.wcmp2.identifiers import CENTRE_ID

Kind = Literal["all", "prefix", "originator", "licence"]
_KINDS: tuple[Kind, ...] = ("prefix", "originator", "licence")


@dataclass(frozen=True, slots=True)
class CentreRule:
    """One rule of ``WISCAT_WIS2_CENTRES``; ``str()`` gives it back as written there."""

    centre_id: str
    kind: Kind
    value: str = ""

    def __str__(self) -> str:
        if self.kind == "all":
            return self.centre_id
        return f"{self.centre_id}={self.kind}:{self.value}"


def parse_rules(text: object) -> tuple[CentreRule, ...]:
    """The rules of a ``WISCAT_WIS2_CENTRES`` value; ValueError says what is wrong with one."""
    if isinstance(text, tuple) and all(isinstance(rule, CentreRule) for rule in text):
        return text
    if not isinstance(text, str):
        raise ValueError("rules separated by ';', e.g. de-dwd=prefix:urn:x-wmo:md:de.dwd.")
    rules = []
    for written in text.split(";"):
        rule = written.strip()
        if rule:
            rules.append(_rule(rule))
    return tuple(rules)


def _rule(rule: str) -> CentreRule:
    centre_id, equals, condition = (part.strip() for part in rule.partition("="))
    if not CENTRE_ID.fullmatch(centre_id):
        raise ValueError(
            f"{rule!r}: {centre_id!r} is not a WIS2 centre-id (lower-case, parts joined by '-', "
            "e.g. de-dwd)"
        )
    if not equals:
        return CentreRule(centre_id, "all")
    kind, colon, value = (part.strip() for part in condition.partition(":"))
    if not colon or kind not in _KINDS or not value:
        raise ValueError(
            f"{rule!r}: CENTRE-ID=prefix:..., CENTRE-ID=originator:..., "
            "CENTRE-ID=licence:URL, or a bare CENTRE-ID"
        )
    if kind == "licence" and not value.startswith(("https://", "http://")):
        raise ValueError(f"{rule!r}: a licence is an http(s) URL")
    return CentreRule(centre_id, kind, value)


def centres(rules: Iterable[CentreRule]) -> list[str]:
    """The centre-ids the rules name, each once, in order."""
    return list(dict.fromkeys(rule.centre_id for rule in rules))


def matching_rule(
    rules: Iterable[CentreRule], file_identifier: str, organisations: Iterable[str]
) -> CentreRule | None:
    """The first rule that gives the record its centre, or None."""
    names = {_folded(name) for name in organisations}
    for rule in rules:
        if rule.kind == "all":
            return rule
        if rule.kind == "prefix" and file_identifier.startswith(rule.value):
            return rule
        if rule.kind == "originator" and _folded(rule.value) in names:
            return rule
    return None


def licence(rules: Iterable[CentreRule], centre_id: str) -> str | None:
    """The licence URL the rules give ``centre_id``, or None."""
    return next(
        (rule.value for rule in rules if rule.kind == "licence" and rule.centre_id == centre_id),
        None,
    )


def _folded(name: str) -> str:
    return " ".join(name.split()).casefold()
