"""Whether a WCMP2 record may be announced: the WCMP2 JSON schema, and the rules of the WCMP2
test suite (pywcmp's ETS, WCMP2 Annex A) that need none of WMO's files.

The schema is WMO's (``wcmp2-bundled.json``, not shipped with wiscat: a node reads it where
``pywcmp bundle sync`` leaves it, or from a path its operator gives). :func:`rule_errors` needs
nothing: a Global Discovery Catalogue refuses a record that fails any of these rules, and a
record without themes, a contact without roles or a link without ``rel`` makes the test suite
raise rather than fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wiscat.shared.wcmp2.extents import DURATION
from wiscat.shared.wcmp2.identifiers import CENTRE_ID, WCMP2_PREFIX
from wiscat.shared.wcmp2.links import RELATIONS
from wiscat.shared.wcmp2.parties import CONTACT_ROLES
from wiscat.shared.wcmp2.vocabulary import DISCIPLINES, ESD_SCHEME

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

# the formats pywcmp checks (ets.py, test_requirement_validation)
FORMATS = ("date-time", "email", "regex", "uri", "uri-reference")
RESOURCE_TYPES = frozenset({"dataset", "service", "process"})
SCHEMA_FILE = Path("~/.pywcmp/wcmp-2/wcmp2-bundled.json")


def load_schema(path: Path) -> Validator:
    """A validator of WMO's WCMP2 schema at ``path``; OSError or ValueError if it is none.

    jsonschema is imported here, by the first schema loaded: every ``wiscat`` command imports
    this module, and few check a schema."""
    from jsonschema import FormatChecker
    from jsonschema.validators import Draft202012Validator

    schema = json.loads(path.expanduser().read_bytes())
    Draft202012Validator.check_schema(schema)
    validator: Validator = Draft202012Validator(
        schema, format_checker=FormatChecker(formats=FORMATS)
    )
    return validator


def schema_errors(record: dict[str, Any], validator: Validator) -> list[str]:
    """Where and how ``record`` fails the schema, one line each; [] when it passes."""
    return [
        f"schema: {error.json_path}: {error.message}"
        for error in sorted(validator.iter_errors(record), key=lambda e: e.json_path)
    ]


def rule_errors(record: dict[str, Any]) -> list[str]:
    """The test suite's rules that ``record`` breaks; [] when it keeps them all."""
    errors = _identifier(record.get("id"))
    properties = record.get("properties") or {}
    if properties.get("type") not in RESOURCE_TYPES:
        errors.append(f"type {properties.get('type')!r} is not in the resource-type code list")
    if not any(
        theme.get("scheme") == ESD_SCHEME
        and theme.get("concepts")
        and all(concept.get("id") in DISCIPLINES for concept in theme["concepts"])
        for theme in properties.get("themes") or []
    ):
        errors.append("no theme of WIS2 earth-system disciplines")
    for contact in properties.get("contacts") or []:
        roles = contact.get("roles") or []
        if not roles or not set(roles) <= CONTACT_ROLES:
            errors.append(f"contact {contact.get('organization')}: roles {roles} not in the list")
    errors += _policy(properties, record.get("links") or [])
    resolution = (record.get("time") or {}).get("resolution")
    if resolution is not None and not DURATION.match(resolution):
        errors.append(f"time resolution {resolution!r} is not an ISO 8601 duration")
    return errors


def _identifier(identifier: object) -> list[str]:
    if not isinstance(identifier, str):
        return ["no id"]
    tokens = identifier.split(":")
    if not identifier.startswith(WCMP2_PREFIX) or len(tokens) < 5:
        return [f"id {identifier!r} is not urn:wmo:md:CENTRE-ID:LOCAL-ID"]
    if not CENTRE_ID.fullmatch(tokens[3]):
        return [f"id {identifier!r}: {tokens[3]!r} is not a centre-id"]
    if not identifier.isascii() or " " in identifier or not tokens[-1]:
        return [f"id {identifier!r}: not ASCII, a space, or an empty last part"]
    return []


def _policy(properties: dict[str, Any], links: list[dict[str, Any]]) -> list[str]:
    errors = []
    policy = properties.get("wmo:dataPolicy")
    if properties.get("type") == "dataset" and policy not in ("core", "recommended"):
        errors.append(f"data policy {policy!r} is neither core nor recommended")
    if policy == "recommended" and not any(link.get("rel") == "license" for link in links):
        errors.append("recommended data without a link of relation license")
    if not links:
        errors.append("no link (WCMP2 needs one)")
    errors += [
        f"link {link.get('href')!r}: relation {link.get('rel')!r} is not one this node writes"
        for link in links
        if link.get("rel") not in RELATIONS or not link.get("href")
    ]
    return errors
